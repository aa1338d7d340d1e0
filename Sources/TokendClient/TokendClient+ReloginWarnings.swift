import TokendJSON
import TokendProtocol

extension TokendClient {
    /// The daemon's `WatchReloginWarnings` method.
    static let watchReloginWarningsMethod = "io.tokend.TokenProvider.WatchReloginWarnings"

    /// The re-login warnings of the credentials the caller owns or reads, from the daemon's
    /// `WatchReloginWarnings` method (see ``ReloginWarningUpdates``).
    ///
    /// The stream runs on a connection of its own, opened at once by a task of its own. When the
    /// connection is lost after the first reply (the daemon restarted), it reconnects with
    /// exponential backoff (``ReconnectBackoff``) and calls the method again; warnings still in
    /// force come again then. Before the first reply, a daemon that cannot be reached ends the
    /// stream with `daemonUnavailable`.
    ///
    /// Cancelling the consuming task, or dropping the iterator, closes the connection.
    /// - Parameter backoff: the delays between reconnection attempts.
    /// - Returns: the sequence of warnings.
    public func reloginWarnings(backoff: ReconnectBackoff = ReconnectBackoff()) -> ReloginWarningUpdates {
        let call = VarlinkCall(method: Self.watchReloginWarningsMethod, parameters: [:], more: true)
        // Warnings are few and each one matters: none is dropped for a slow consumer.
        return StreamSubscription.start(call, client: self, backoff: backoff, bufferingPolicy: .bufferingNewest(256)) {
            reply throws(TokendClientError) in
            do {
                return try ReloginWarning.list(from: reply.parameters)
            } catch {
                throw TokendClient.invalidReply(call, error)
            }
        }
    }
}
