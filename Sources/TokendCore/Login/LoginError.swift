/// Why a login failed: a clear, token-free reason, and the provider's RFC 6749/8628 error code
/// when the provider gave one (`access_denied`, `expired_token`, …).
public struct LoginError: Error, Sendable, Hashable, CustomStringConvertible {
    public var reason: String
    public var oauthError: String?

    public init(_ reason: String, oauthError: String? = nil) {
        self.reason = reason
        self.oauthError = oauthError
    }

    public var description: String { reason }
}
