import NIOCore

/// What the router decided for one call. Messages are encoded JSON without their NUL.
enum CallOutcome {
    /// One reply, known now (the hot path: a cached token, or an error).
    case reply([UInt8])
    /// Several replies known now (a `more` call answered from memory); all but the last carry
    /// `continues`.
    case replies([[UInt8]])
    /// No reply (a `oneway` call).
    case none
    /// Replies that need waiting for (a refresh, a store write), completed on some event loop.
    /// The future never fails: errors arrive as error replies, timeouts included.
    case deferred(EventLoopFuture<[[UInt8]]>)
    /// A `Watch`: the first reply now, then one per change until the credential goes away.
    /// Holds its connection (later calls wait) until its last reply, as Varlink `more` calls do.
    case watch(userIdentifier: String, initial: ViewEntry)
    /// A stream of messages (`WatchReloginWarnings`): `subscribe` registers the connection's
    /// delivery (each message a complete reply with `continues`) and returns the first reply
    /// and how to unsubscribe. It ends only with its connection.
    case stream(subscribe: @Sendable (_ deliver: @escaping @Sendable ([UInt8]) -> Void) -> (first: [UInt8], cancel: @Sendable () -> Void))
}
