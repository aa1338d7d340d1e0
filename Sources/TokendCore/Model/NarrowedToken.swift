/// An access token narrowed to a scope or resource (``TokenNarrowing``), got with the
/// credential's refresh token and kept beside it, sealed like its other tokens.
public struct NarrowedToken: Sendable, Hashable {
    /// ``TokenNarrowing/key`` of the request it answers.
    public var key: String
    /// The scope granted: the response's, else the one asked for (RFC 6749 §5.1).
    public var scope: String?
    public var resource: String?
    public var accessToken: SecretString
    public var tokenType: String
    public var issuedAt: Timestamp
    public var expiresAt: Timestamp
    /// The ``Enrolment/at`` of the login it was got from: a token that outlived its login (a
    /// store written by an older tokend, which kept the column across a new login) is ignored.
    public var enrolledAt: Timestamp

    public init(
        key: String, scope: String?, resource: String?, accessToken: SecretString, tokenType: String, issuedAt: Timestamp,
        expiresAt: Timestamp, enrolledAt: Timestamp
    ) {
        self.key = key
        self.scope = scope
        self.resource = resource
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.enrolledAt = enrolledAt
    }

    /// At most this many narrowed tokens per credential; a new one replaces the one that
    /// expires first. Programs ask for a handful of audiences; a caller cycling through scopes
    /// must not grow the store.
    public static let maxPerCredential = 16
}

extension Credential {
    /// The narrowed token answering `key`, if one of this login is kept.
    public func narrowedToken(for key: String) -> NarrowedToken? {
        narrowedTokens.first { $0.key == key && $0.enrolledAt == enrolment.at }
    }

    /// Keeps `token`, replacing the one for the same request, or — when
    /// ``NarrowedToken/maxPerCredential`` are kept — the one that expires first.
    public mutating func keep(_ token: NarrowedToken) {
        narrowedTokens.removeAll { $0.key == token.key }
        if narrowedTokens.count >= NarrowedToken.maxPerCredential,
            let first = narrowedTokens.indices.min(by: { narrowedTokens[$0].expiresAt < narrowedTokens[$1].expiresAt })
        {
            narrowedTokens.remove(at: first)
        }
        narrowedTokens.append(token)
    }
}
