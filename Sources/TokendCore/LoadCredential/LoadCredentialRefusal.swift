/// Why a `LoadCredential=` connection got nothing. The service manager has no error channel:
/// the connection is closed with nothing written, and this goes to the log (never to the peer).
public enum LoadCredentialRefusal: Error, Sendable, Hashable, CustomStringConvertible {
    /// The connecting socket is bound to no name: it is not a service manager reading a credential.
    case unnamedPeer
    /// The connecting socket's name is not `\0<random>/unit/<unit>/<ID>` (what is wrong with it).
    case malformedName(String)
    /// `SO_PEERCRED` shows a uid other than 0: not the system manager. A user manager asks
    /// with its user's uid; it is not served, because any process of that user can start a
    /// unit of any name in it.
    case notTheSystemManager(uid: UInt32)
    /// The connecting process's unit could not be learned (no pidfd, it exited, `/proc` unreadable).
    case unitUnknown(ProgramFactsUnavailable)
    /// The connecting process runs in another unit than the one its name asks for (`nil`: in none).
    case otherUnit(asked: String, seen: String?)
    /// No credential of that name (after the `load_credential.ids` mapping).
    case noSuchCredential(String)
    /// The credential's readers do not name the unit with a plain `unit:` reader; `joinedOnly`
    /// when they name it only joined to a uid (`uid:N+unit:…`), which the service manager's
    /// helper (uid 0, not the service's user) cannot match.
    case notAReader(credential: String, unit: String, joinedOnly: Bool)
    /// The credential needs a new login.
    case reauthenticationRequired(String)
    /// A DPoP-bound token is useless without a proof per request, which only a client can ask.
    case dpopBound(String)
    /// The freshest token tokend could get is valid for less than `load_credential.min_valid`.
    case tooShortLived(remaining: Duration, minimum: Duration)
    /// Refreshing the token failed (the reason, without any token).
    case refreshFailed(String)
    /// No fresh enough token within `load_credential.timeout`.
    case timedOut(Duration)
    /// The stored token could not be read.
    case storeUnreadable
    /// As many deliveries as tokend runs at once are already waiting.
    case busy(limit: Int)

    public var description: String {
        switch self {
        case .unnamedPeer:
            "the connecting socket is not bound to a name (the service manager binds \\0<random>/unit/<unit>/<ID>)"
        case .malformedName(let why):
            "the connecting socket's name is not the service manager's \\0<random>/unit/<unit>/<ID>: \(why)"
        case .notTheSystemManager(let uid):
            "uid \(uid) is not the system manager's (0); user managers are not served, since any process of a user can start a unit of any name in its manager"
        case .unitUnknown(let why):
            "the connecting process's unit cannot be checked: \(why)"
        case .otherUnit(let asked, let seen):
            "the connecting process is in unit \(seen ?? "(none)"), not \(asked)"
        case .noSuchCredential(let name):
            "no credential '\(name)'"
        case .notAReader(let credential, let unit, let joinedOnly):
            joinedOnly
                ? "credential '\(credential)' names \(unit) only joined to a uid (uid:N+unit:…); LoadCredential= needs a plain unit:\(unit) reader, since the service manager reads the credential as root"
                : "credential '\(credential)' has no reader unit:\(unit)"
        case .reauthenticationRequired(let credential):
            "credential '\(credential)' needs a new login"
        case .dpopBound(let credential):
            "credential '\(credential)' holds a DPoP-bound token, which needs a proof per request (ProvideDPoPProof); use a client instead"
        case .tooShortLived(let remaining, let minimum):
            "the freshest token is valid for \(DurationFormat.humanReadable(remaining)), less than load_credential.min_valid (\(DurationFormat.humanReadable(minimum)))"
        case .refreshFailed(let why):
            "refreshing the token failed: \(why)"
        case .timedOut(let timeout):
            "no fresh token within load_credential.timeout (\(DurationFormat.humanReadable(timeout)))"
        case .storeUnreadable:
            "the stored token cannot be read"
        case .busy(let limit):
            "\(limit) deliveries are already under way"
        }
    }

    /// A short stable name of the reason, for log fields and queries.
    public var code: String {
        switch self {
        case .unnamedPeer: "unnamed_peer"
        case .malformedName: "malformed_name"
        case .notTheSystemManager: "not_system_manager"
        case .unitUnknown: "unit_unknown"
        case .otherUnit: "other_unit"
        case .noSuchCredential: "no_such_credential"
        case .notAReader: "not_a_reader"
        case .reauthenticationRequired: "reauthentication_required"
        case .dpopBound: "dpop_bound"
        case .tooShortLived: "too_short_lived"
        case .refreshFailed: "refresh_failed"
        case .timedOut: "timed_out"
        case .storeUnreadable: "store_unreadable"
        case .busy: "busy"
        }
    }
}
