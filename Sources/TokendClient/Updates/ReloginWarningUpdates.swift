import TokendJSON
import TokendProtocol

/// The re-login warnings of the credentials the caller owns or reads, as tokend says them
/// (`WatchReloginWarnings`): those in force when the stream starts, then each new one as a
/// threshold passes.
///
/// Made by ``TokendClient/reloginWarnings(backoff:)``. Once it received a reply it survives
/// daemon restarts: it reconnects with backoff and subscribes again; the warnings in force are
/// then sent again, so a consumer that shows them keeps a record of what it showed
/// (``TokendProtocol/ReloginWarning/key``). It ends by throwing ``TokendClientError``: `daemonUnavailable` when the
/// daemon cannot be reached at the start, `methodNotFound`-like protocol errors from a daemon
/// without the method.
///
/// ```swift
/// for try await warning in client.reloginWarnings() {
///     print("log in again to \(warning.provider) by \(warning.reloginBy): \(warning.command)")
/// }
/// ```
public struct ReloginWarningUpdates: AsyncSequence, Sendable {
    public typealias Element = ReloginWarning
    public typealias Failure = TokendClientError

    let stream: AsyncStream<Result<ReloginWarning, TokendClientError>>

    /// Reads the warnings one by one.
    public struct AsyncIterator: AsyncIteratorProtocol {
        public typealias Element = ReloginWarning
        public typealias Failure = TokendClientError

        var base: AsyncStream<Result<ReloginWarning, TokendClientError>>.AsyncIterator

        /// The next warning; `nil` once the stream ended without an error.
        /// - Throws: ``TokendClientError`` when the stream ended with one.
        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async throws(TokendClientError) -> ReloginWarning? {
            switch await base.next(isolation: actor) {
            case nil: return nil
            case .success(let warning)?: return warning
            case .failure(let error)?: throw error
            }
        }

        /// The next warning; `nil` once the stream ended without an error.
        /// - Throws: ``TokendClientError`` when the stream ended with one.
        public mutating func next() async throws(TokendClientError) -> ReloginWarning? {
            try await next(isolation: nil)
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator())
    }
}

extension ReloginWarning {
    /// What identifies this warning: the same credential, deadline and threshold is the same
    /// warning, said again (after a reconnection) or not.
    public var key: String { "\(userIdentifier)\t\(reloginBy)\t\(threshold)" }
}
