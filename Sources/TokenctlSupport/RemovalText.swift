import TokendClient
import TokendProtocol

/// What `tokenctl remove` says: that the credential is gone, and what became of its tokens at
/// the provider — plainly when they were not revoked, since whoever removes a leaked credential
/// must know whether the leaked tokens still work.
public enum RemovalText {
    public static func describe(_ result: RemovalResult, user: String) -> String {
        let removed = "Removed the credential of user '\(StatusTable.clean(user))'"
        let problem = result.problem.map { ": \(StatusTable.clean($0))" } ?? ""
        switch result.revocation {
        case .revoked?:
            return removed + "; its tokens were revoked at the provider."
        case .notRevoked?:
            return removed + "; its tokens were not revoked at the provider" + problem
                + ". They may still work until they expire; to revoke them too, add the credential again and run "
                + "'tokenctl remove --revoke-anyway' (administrators only)."
        case .unsupported?:
            return removed + "; the provider has no revocation endpoint, so its tokens were not revoked and work until they expire."
        case .failed?:
            return removed + "; revoking its tokens at the provider failed" + problem + ". They may still work until they expire."
        case nil:
            return removed + "."
        }
    }
}
