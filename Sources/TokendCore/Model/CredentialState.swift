/// Where a credential stands in its life.
public enum CredentialState: String, Sendable, Hashable, CaseIterable {
    /// The access token is usable and no refresh is under way.
    case valid
    /// A refresh grant is in flight.
    case refreshing
    /// The last refresh failed for a reason that may pass (network, 5xx, 429); it will be retried.
    case retrying
    /// Only a new login helps: the provider rejected the refresh token, or the login reached its
    /// absolute end (`max_session_age`).
    case reauthenticationRequired = "reauthentication_required"
    /// The access token is past its deadline and there is no way to refresh it right now.
    case expired

    /// Human wording for `tokenctl status`.
    public var displayName: String {
        switch self {
        case .valid: "valid"
        case .refreshing: "refreshing"
        case .retrying: "retrying"
        case .reauthenticationRequired: "reauthentication required"
        case .expired: "expired"
        }
    }
}
