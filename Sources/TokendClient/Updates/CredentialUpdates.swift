/// The credentials of one user as they change: the current ones first, then each new token.
///
/// Made by ``TokendClient/updates(for:)``. The sequence ends by throwing a
/// ``TokendClientError`` when the credential is removed (`unknownUser`), needs a new login
/// (`reauthenticationRequired`), may not be read (`permissionDenied`), or when the daemon
/// cannot be reached at the start (`daemonUnavailable`). Once it delivered credentials it
/// survives daemon restarts: it reconnects with backoff and subscribes again, without
/// delivering the token it already delivered a second time.
///
/// A consumer that falls behind gets the newest credentials, not a backlog. Ending the
/// iteration (leaving the loop, cancelling the task) closes the connection.
///
/// ```swift
/// for try await credentials in client.updates(for: "alice") {
///     session.token = credentials.accessToken
/// }
/// ```
public struct CredentialUpdates: AsyncSequence, Sendable {
    public typealias Element = Credentials
    public typealias Failure = TokendClientError

    let stream: AsyncStream<Result<Credentials, TokendClientError>>

    /// Reads the updates one by one.
    public struct AsyncIterator: AsyncIteratorProtocol {
        public typealias Element = Credentials
        public typealias Failure = TokendClientError

        var base: AsyncStream<Result<Credentials, TokendClientError>>.AsyncIterator

        /// The next credentials; `nil` once the stream ended without an error.
        /// - Throws: ``TokendClientError`` when the stream ended with one.
        public mutating func next(
            isolation actor: isolated (any Actor)? = #isolation
        ) async throws(TokendClientError) -> Credentials? {
            switch await base.next(isolation: actor) {
            case nil: return nil
            case .success(let credentials)?: return credentials
            case .failure(let error)?: throw error
            }
        }

        /// The next credentials; `nil` once the stream ended without an error.
        /// - Throws: ``TokendClientError`` when the stream ended with one.
        public mutating func next() async throws(TokendClientError) -> Credentials? {
            try await next(isolation: nil)
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator())
    }
}
