import TokendCore

/// One message on the `tokend_changes` channel, as the database triggers write it.
///
/// Pure. Payloads carry user identifiers, generations, node names and times, never a token:
///
/// - `C U <generation> <user>`: a credential was stored or updated.
/// - `C D <generation> <user>`: a credential was removed.
/// - `L <fencing> <expires_at ms> <holder or -> <user>`: a lease was taken (or released: `-`).
public enum ChangeNotification: Sendable, Hashable {
    case credentialUpdated(userIdentifier: String, generation: Int64)
    case credentialRemoved(userIdentifier: String, generation: Int64)
    case lease(userIdentifier: String, holder: String?, fencing: Int64, expiresAt: Timestamp)

    /// The notification in `payload`, or `nil` if it is not one (ignored, never a crash).
    public static func parse(_ payload: String) -> ChangeNotification? {
        let parts = payload.split(separator: " ", maxSplits: 4, omittingEmptySubsequences: false)
        switch parts.first {
        case "C":
            let fields = payload.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
            guard fields.count == 4, let generation = Int64(fields[2]), !fields[3].isEmpty else { return nil }
            let user = String(fields[3])
            switch fields[1] {
            case "U": return .credentialUpdated(userIdentifier: user, generation: generation)
            case "D": return .credentialRemoved(userIdentifier: user, generation: generation)
            default: return nil
            }
        case "L":
            guard parts.count == 5, let fencing = Int64(parts[1]), let expires = Int64(parts[2]), !parts[3].isEmpty, !parts[4].isEmpty
            else { return nil }
            return .lease(
                userIdentifier: String(parts[4]), holder: parts[3] == "-" ? nil : String(parts[3]), fencing: fencing,
                expiresAt: Timestamp(millisecondsSince1970: expires)
            )
        default:
            return nil
        }
    }

    /// The credential the notification is about.
    public var userIdentifier: String {
        switch self {
        case .credentialUpdated(let user, _), .credentialRemoved(let user, _), .lease(let user, _, _, _): user
        }
    }
}
