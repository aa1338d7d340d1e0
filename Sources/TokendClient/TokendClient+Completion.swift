import NIOCore

extension TokendClient: TokenProvider {
    /// Asks for a valid access token for `userIdentifier`, for code written against the
    /// completion-handler contract (see ``TokenProvider``).
    ///
    /// The same as ``provideTokenReplacement(userIdentifier:minValidity:rejectedToken:completion:)``
    /// with no minimum validity and no rejected token.
    /// - Parameters:
    ///   - userIdentifier: whose token.
    ///   - completion: called exactly once, on an arbitrary thread, with the credentials or a
    ///     ``TokendClientError``.
    /// - Returns: the request, which can be cancelled.
    @discardableResult
    public func provideTokenReplacement(
        userIdentifier: String,
        completion: @escaping @Sendable (Result<Credentials, any Error>) -> Void
    ) -> TokenRequest {
        provideTokenReplacement(userIdentifier: userIdentifier, minValidity: .zero, completion: completion)
    }

    /// Asks for an access token for `userIdentifier` that stays valid for `minValidity`, and
    /// calls `completion` exactly once with the outcome.
    ///
    /// The work is ``credentials(for:minValidity:rejectedToken:)`` (cache, shared connection,
    /// call timeout) run in a task. The completion handler is called exactly once, whatever
    /// happens: the credentials; a ``TokendClientError`` mirroring the daemon's error
    /// (`unknownUser`, `reauthenticationRequired`, …); `daemonUnavailable` when the daemon is
    /// not running or the connection is lost mid-call (a call that was sent is never
    /// repeated); `timeout`; or `cancelled` when the returned request is cancelled. As a
    /// backstop, a request still unanswered after twice ``callTimeout`` plus a second (time to
    /// connect and to call) completes with `timeout`.
    ///
    /// - Parameters:
    ///   - userIdentifier: whose token.
    ///   - minValidity: how long the token must still be valid.
    ///   - rejectedToken: the token an API just refused, so tokend refreshes once (see
    ///     ``credentials(for:minValidity:rejectedToken:)``).
    ///   - completion: called exactly once, on an arbitrary thread (possibly before this
    ///     method returns; synchronously inside ``TokenRequest/cancel()`` when cancelled).
    /// - Returns: the request; cancel it to stop waiting.
    @discardableResult
    public func provideTokenReplacement(
        userIdentifier: String,
        minValidity: Duration,
        rejectedToken: String? = nil,
        completion: @escaping @Sendable (Result<Credentials, any Error>) -> Void
    ) -> TokenRequest {
        let request = TokenRequest(completion: completion)
        let work = LockedBox<Task<Void, Never>?>(nil)
        let limit = callTimeout * 2 + .seconds(1)
        let backstop = eventLoopGroup.next().scheduleTask(in: TimeAmount(limit)) {
            let timedOut = request.complete(
                with: .failure(
                    TokendClientError(
                        code: .timeout,
                        message: "tokend did not answer the token request within \(limit)",
                        method: TokenProviderMethod.provideTokenReplacement.rawValue
                    )
                )
            )
            if timedOut { work.value?.cancel() }
        }
        let task = Task {
            let result: Result<Credentials, any Error>
            do {
                result = .success(
                    try await credentials(for: userIdentifier, minValidity: minValidity, rejectedToken: rejectedToken)
                )
            } catch {
                result = .failure(error)
            }
            backstop.cancel()
            request.complete(with: result)
        }
        work.value = task
        request.setCancellationHandler {
            backstop.cancel()
            task.cancel()
        }
        return request
    }
}
