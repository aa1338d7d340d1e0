import TokendJSON
import TokendProtocol

extension TokendClient {
    /// The credentials of `userIdentifier` as they change, from the daemon's `Watch` method.
    ///
    /// The stream runs on a connection of its own (a `Watch` holds its connection until its
    /// last reply), opened at once by a task of its own. It yields the current credentials
    /// first and then each new token; each one also refreshes the in-process cache. When the connection
    /// is lost after the first reply (the daemon restarted), it reconnects with exponential
    /// backoff (see ``ReconnectBackoff``) and calls `Watch` again, skipping credentials equal to
    /// the ones it delivered last. It ends by throwing ``TokendClientError`` on removal
    /// (`unknownUser`), on `reauthenticationRequired` or `permissionDenied`, and with
    /// `daemonUnavailable` when the daemon cannot be reached before the first reply.
    ///
    /// Cancelling the consuming task, or dropping the iterator, closes the connection.
    /// - Parameters:
    ///   - userIdentifier: whose credentials.
    ///   - backoff: the delays between reconnection attempts.
    /// - Returns: the sequence of credentials.
    public func updates(
        for userIdentifier: String,
        backoff: ReconnectBackoff = ReconnectBackoff()
    ) -> CredentialUpdates {
        let method = TokenProviderMethod.watch.rawValue
        do {
            try Self.checkIdentifier(userIdentifier, name: "userIdentifier", method: method)
        } catch {
            return StreamSubscription.failed(error)
        }
        let call = VarlinkCall(method: method, parameters: ["userIdentifier": .string(userIdentifier)], more: true)
        // The last credentials yielded, to skip a repeat after subscribing again.
        let lastDelivered = LockedBox<Credentials?>(nil)
        return StreamSubscription.start(
            call, client: self, backoff: backoff, bufferingPolicy: .bufferingNewest(1),
            onErrorReply: { [self] error in
                if error.endsCredential { self.cache.withLock { $0.remove(userIdentifier) } }
            }
        ) { [self] reply throws(TokendClientError) in
            let credentials = try TokendClient.credentials(in: reply, of: call, for: userIdentifier)
            let isNew = lastDelivered.withLock { last -> Bool in
                guard last != credentials else { return false }
                last = credentials
                return true
            }
            guard isNew else { return [] }
            self.cache.withLock { $0.store(credentials, now: WallClock.nowSeconds()) }
            return [credentials]
        }
    }
}
