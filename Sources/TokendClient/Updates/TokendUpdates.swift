import TokendProtocol

/// The values a streaming tokend method sends, as an `AsyncSequence` that survives daemon
/// restarts: ``CredentialUpdates`` (`Watch`) and ``ReloginWarningUpdates``
/// (`WatchReloginWarnings`).
///
/// It ends by throwing ``TokendClientError``. Ending the iteration (leaving the loop, cancelling
/// the task) closes the connection.
public struct TokendUpdates<Element: Sendable>: AsyncSequence, Sendable {
    public typealias Failure = TokendClientError

    let stream: AsyncStream<Result<Element, TokendClientError>>

    /// Reads the values one by one.
    public struct AsyncIterator: AsyncIteratorProtocol {
        public typealias Failure = TokendClientError

        var base: AsyncStream<Result<Element, TokendClientError>>.AsyncIterator

        /// The next value; `nil` once the stream ended without an error.
        /// - Throws: ``TokendClientError`` when the stream ended with one.
        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async throws(TokendClientError) -> Element? {
            switch await base.next(isolation: actor) {
            case nil: return nil
            case .success(let value)?: return value
            case .failure(let error)?: throw error
            }
        }

        /// The next value; `nil` once the stream ended without an error.
        /// - Throws: ``TokendClientError`` when the stream ended with one.
        public mutating func next() async throws(TokendClientError) -> Element? {
            try await next(isolation: nil)
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator())
    }
}

/// The credentials of one user as they change: the current ones first, then each new token.
///
/// Made by ``TokendClient/updates(for:backoff:)``. The sequence ends by throwing a
/// ``TokendClientError`` when the credential is removed (`unknownUser`), needs a new login
/// (`reauthenticationRequired`), may not be read (`permissionDenied`), or when the daemon
/// cannot be reached at the start (`daemonUnavailable`). Once it delivered credentials it
/// survives daemon restarts: it reconnects with backoff and subscribes again, without
/// delivering the token it already delivered a second time.
///
/// A consumer that falls behind gets the newest credentials, not a backlog.
///
/// ```swift
/// for try await credentials in client.updates(for: "alice") {
///     session.token = credentials.accessToken
/// }
/// ```
public typealias CredentialUpdates = TokendUpdates<Credentials>

/// The re-login warnings of the credentials the caller owns or reads, as tokend says them
/// (`WatchReloginWarnings`): those in force when the stream starts, then each new one as a
/// threshold passes.
///
/// Made by ``TokendClient/reloginWarnings(backoff:)``. Once it received a reply it survives
/// daemon restarts: it reconnects with backoff and subscribes again; the warnings in force are
/// then sent again, so a consumer that shows them keeps a record of what it showed
/// (``TokendProtocol/ReloginWarning/key``). It ends by throwing ``TokendClientError``:
/// `daemonUnavailable` when the daemon cannot be reached at the start, a protocol error from a
/// daemon without the method.
///
/// ```swift
/// for try await warning in client.reloginWarnings() {
///     print("log in again to \(warning.provider) by \(warning.reloginBy): \(warning.command)")
/// }
/// ```
public typealias ReloginWarningUpdates = TokendUpdates<ReloginWarning>

extension ReloginWarning {
    /// What identifies this warning: the same credential, deadline and threshold is the same
    /// warning, said again (after a reconnection) or not.
    public var key: String { "\(userIdentifier)\t\(reloginBy)\t\(threshold)" }
}
