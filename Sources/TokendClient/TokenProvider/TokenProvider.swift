/// Something that provides access tokens through a completion handler: the contract of the
/// iOS `TokenProvider.provideTokenReplacement(userIdentifier:completion:)`, so integrations
/// written against it port directly.
///
/// ``TokendClient`` conforms. The completion handler is called **exactly once** in every case:
/// with the credentials, or with an error — a typed error from the daemon, the daemon not
/// running, the connection lost mid-call (the daemon restarted), a timeout, or cancellation
/// through the returned ``TokenRequest``.
///
/// Two shapes of handler are accepted; pick by the closure's parameters:
///
/// ```swift
/// client.provideTokenReplacement(userIdentifier: "alice") { result in
///     switch result {
///     case .success(let credentials): use(credentials.accessToken)
///     case .failure(let error): report(error)  // a TokendClientError for TokendClient
///     }
/// }
/// client.provideTokenReplacement(userIdentifier: "alice") { credentials, error in
///     // exactly one of the two is non-nil, as in the seed contract
/// }
/// ```
public protocol TokenProvider: Sendable {
    /// Asks for a valid access token for `userIdentifier`.
    ///
    /// - Parameters:
    ///   - userIdentifier: whose token.
    ///   - completion: called exactly once, on an arbitrary thread (possibly before this method
    ///     returns), with the credentials or the error.
    /// - Returns: the request; ``TokenRequest/cancel()`` completes it with a `cancelled` error
    ///   at once unless it already completed. Ignoring it is fine.
    @discardableResult
    func provideTokenReplacement(
        userIdentifier: String,
        completion: @escaping @Sendable (Result<Credentials, any Error>) -> Void
    ) -> TokenRequest
}

extension TokenProvider {
    /// The seed's shape of ``provideTokenReplacement(userIdentifier:completion:)``: the handler
    /// gets the credentials or the error, exactly one of them non-`nil`, exactly once.
    ///
    /// - Parameters:
    ///   - userIdentifier: whose token.
    ///   - completion: called exactly once, on an arbitrary thread.
    /// - Returns: the request, which can be cancelled.
    @discardableResult
    public func provideTokenReplacement(
        userIdentifier: String,
        completion: @escaping @Sendable (Credentials?, (any Error)?) -> Void
    ) -> TokenRequest {
        provideTokenReplacement(userIdentifier: userIdentifier) { (result: Result<Credentials, any Error>) in
            switch result {
            case .success(let credentials): completion(credentials, nil)
            case .failure(let error): completion(nil, error)
            }
        }
    }
}
