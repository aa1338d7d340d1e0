import TokendProtocol

/// The reasons a refusal's record gives (`AUDIT_REASON`), and which calls' refusals are
/// recorded: those that ask for a token.
enum AuditRefusal {
    /// The caller is not among the credential's readers; `why` says which program fact did
    /// not match, when a program reader was tried.
    static func notAReader(_ why: String?) -> String {
        why.map { "not a reader: \($0)" } ?? "not a reader"
    }

    /// No credential has that name (the caller was told `PermissionDenied`, or, an administrator,
    /// `UnknownUser`).
    static let noSuchCredential = "no such credential"

    /// The credential's login has ended: it has no token to give until someone logs in again.
    static let loginEnded = "the login has ended"

    /// Methods that release a token.
    static func isTokenMethod(_ method: String) -> Bool {
        method == TokenProviderMethod.provideTokenReplacement.rawValue || method == TokenProviderMethod.provideDPoPProof.rawValue
            || method == TokenProviderMethod.watch.rawValue
    }
}
