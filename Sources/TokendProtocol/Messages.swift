import TokendJSON

/// The method names of `io.tokend.TokenProvider`.
public enum TokenProviderMethod: String, Sendable, CaseIterable {
    case provideTokenReplacement = "io.tokend.TokenProvider.ProvideTokenReplacement"
    case provideDPoPProof = "io.tokend.TokenProvider.ProvideDPoPProof"
    case status = "io.tokend.TokenProvider.Status"
    case addCredential = "io.tokend.TokenProvider.AddCredential"
    case removeCredential = "io.tokend.TokenProvider.RemoveCredential"
    case rotateKey = "io.tokend.TokenProvider.RotateKey"
    case backup = "io.tokend.TokenProvider.Backup"
    case reload = "io.tokend.TokenProvider.Reload"
    case adoptStore = "io.tokend.TokenProvider.AdoptStore"
    case watch = "io.tokend.TokenProvider.Watch"
    case watchReloginWarnings = "io.tokend.TokenProvider.WatchReloginWarnings"
    case beginLogin = "io.tokend.TokenProvider.BeginLogin"
    case completeLogin = "io.tokend.TokenProvider.CompleteLogin"
    case cancelLogin = "io.tokend.TokenProvider.CancelLogin"
}

/// An access token and what a program needs to use it: the reply of `ProvideTokenReplacement`.
public struct Credentials: Sendable, Hashable, CustomStringConvertible {
    public var userIdentifier: String
    public var accessToken: String
    public var tokenType: String
    /// Seconds since the epoch after which tokend no longer serves this token.
    public var expiresAt: Int64
    public var issuedAt: Int64?
    public var scope: String?

    public init(
        userIdentifier: String, accessToken: String, tokenType: String, expiresAt: Int64, issuedAt: Int64? = nil, scope: String? = nil
    ) {
        self.userIdentifier = userIdentifier
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.scope = scope
    }

    /// Never shows the token.
    public var description: String {
        "Credentials(userIdentifier: \(userIdentifier), tokenType: \(tokenType), expiresAt: \(expiresAt), accessToken: <redacted>)"
    }

    public var json: JSONObject {
        var object: JSONObject = [
            "userIdentifier": .string(userIdentifier),
            "accessToken": .string(accessToken),
            "tokenType": .string(tokenType),
            "expiresAt": .int(expiresAt),
        ]
        object.setIfPresent("issuedAt", issuedAt.map(JSONValue.int))
        object.setIfPresent("scope", scope.map(JSONValue.string))
        return object
    }

    public init(json object: JSONObject) throws(VarlinkError) {
        let reader = ParameterReader(object)
        self.init(
            userIdentifier: try reader.string("userIdentifier"),
            accessToken: try reader.string("accessToken"),
            tokenType: try reader.string("tokenType"),
            expiresAt: try reader.int("expiresAt"),
            issuedAt: try reader.optionalInt("issuedAt"),
            scope: try reader.optionalString("scope")
        )
    }
}

/// The daemon-wide part of `Status`.
public struct DaemonStatus: Sendable, Hashable {
    public var version: String
    public var startedAt: Int64
    public var credentials: Int64
    public var valid: Int64
    public var refreshing: Int64
    public var retrying: Int64
    public var reauthenticationRequired: Int64
    public var expired: Int64
    public var nextRefreshAt: Int64?
    /// `sqlite` or `postgresql` (absent from older daemons).
    public var store: String?
    /// Why the store cannot be reached, when it cannot.
    public var storeProblem: String?
    /// With a shared store: this node's name, and the nodes seen recently.
    public var node: String?
    public var nodes: [String]?
    /// What the caller's uid holds against its per-uid limits (absent from older daemons).
    public var caller: QuotaUsage?
    /// For administrators: what in tokend's setup does not do what it says (a `socket_mode` the
    /// passed socket does not have, readers that can never match here); absent when nothing is.
    public var warnings: [String]?

    public init(
        version: String, startedAt: Int64, credentials: Int64 = 0, valid: Int64 = 0, refreshing: Int64 = 0, retrying: Int64 = 0,
        reauthenticationRequired: Int64 = 0, expired: Int64 = 0, nextRefreshAt: Int64? = nil
    ) {
        self.version = version
        self.startedAt = startedAt
        self.credentials = credentials
        self.valid = valid
        self.refreshing = refreshing
        self.retrying = retrying
        self.reauthenticationRequired = reauthenticationRequired
        self.expired = expired
        self.nextRefreshAt = nextRefreshAt
    }

    public var json: JSONObject {
        var object: JSONObject = [
            "version": .string(version), "startedAt": .int(startedAt), "credentials": .int(credentials),
            "valid": .int(valid), "refreshing": .int(refreshing), "retrying": .int(retrying),
            "reauthenticationRequired": .int(reauthenticationRequired), "expired": .int(expired),
        ]
        object.setIfPresent("nextRefreshAt", nextRefreshAt.map(JSONValue.int))
        object.setIfPresent("store", store.map(JSONValue.string))
        object.setIfPresent("storeProblem", storeProblem.map(JSONValue.string))
        object.setIfPresent("node", node.map(JSONValue.string))
        object.setIfPresent("nodes", nodes.map { .array($0.map(JSONValue.string)) })
        object.setIfPresent("caller", caller.map { .object($0.json) })
        object.setIfPresent("warnings", warnings.map { .array($0.map(JSONValue.string)) })
        return object
    }

    public init(json object: JSONObject) throws(VarlinkError) {
        let r = ParameterReader(object)
        self.init(
            version: try r.string("version"), startedAt: try r.int("startedAt"), credentials: try r.int("credentials"),
            valid: try r.int("valid"), refreshing: try r.int("refreshing"), retrying: try r.int("retrying"),
            reauthenticationRequired: try r.int("reauthenticationRequired"), expired: try r.int("expired"),
            nextRefreshAt: try r.optionalInt("nextRefreshAt")
        )
        store = try r.optionalString("store")
        storeProblem = try r.optionalString("storeProblem")
        node = try r.optionalString("node")
        nodes = try r.optionalStringArray("nodes")
        warnings = try r.optionalStringArray("warnings")
        if let usage = object["caller"] {
            guard case .object(let usageObject) = usage else { throw .invalidParameter("caller") }
            caller = try QuotaUsage(json: usageObject)
        }
    }
}

/// A uid's use of its per-uid limits, in `Status`.
public struct QuotaUsage: Sendable, Hashable {
    public var uid: Int64
    /// Administrators are not limited by the per-uid limits (only by `max_connections`).
    public var administrator: Bool
    public var connections: Int64
    public var maxConnections: Int64
    public var credentials: Int64
    public var maxCredentials: Int64
    public var callsInFlight: Int64
    public var maxCallsInFlight: Int64
    /// The systemd unit tokend saw for the calling process (for `unit:` readers); `nil` when
    /// it has none or could not be read.
    public var unit: String?
    /// The executable tokend saw for the calling process (for `exe:` readers).
    public var executable: String?

    public init(
        uid: Int64, administrator: Bool, connections: Int64, maxConnections: Int64, credentials: Int64, maxCredentials: Int64,
        callsInFlight: Int64, maxCallsInFlight: Int64, unit: String? = nil, executable: String? = nil
    ) {
        self.unit = unit
        self.executable = executable
        self.uid = uid
        self.administrator = administrator
        self.connections = connections
        self.maxConnections = maxConnections
        self.credentials = credentials
        self.maxCredentials = maxCredentials
        self.callsInFlight = callsInFlight
        self.maxCallsInFlight = maxCallsInFlight
    }

    public var json: JSONObject {
        var object: JSONObject = [
            "uid": .int(uid), "administrator": .bool(administrator), "connections": .int(connections),
            "maxConnections": .int(maxConnections),
            "credentials": .int(credentials), "maxCredentials": .int(maxCredentials), "callsInFlight": .int(callsInFlight),
            "maxCallsInFlight": .int(maxCallsInFlight),
        ]
        if let unit { object["unit"] = .string(unit) }
        if let executable { object["executable"] = .string(executable) }
        return object
    }

    public init(json object: JSONObject) throws(VarlinkError) {
        let r = ParameterReader(object)
        self.init(
            uid: try r.int("uid"), administrator: try r.optionalBool("administrator") ?? false, connections: try r.int("connections"),
            maxConnections: try r.int("maxConnections"), credentials: try r.int("credentials"), maxCredentials: try r.int("maxCredentials"),
            callsInFlight: try r.int("callsInFlight"), maxCallsInFlight: try r.int("maxCallsInFlight"),
            unit: try r.optionalString("unit"), executable: try r.optionalString("executable")
        )
    }
}

/// One credential in `Status`, without its tokens.
public struct CredentialStatus: Sendable, Hashable {
    public var userIdentifier: String
    public var provider: String
    /// `valid`, `refreshing`, `retrying`, `reauthentication_required` or `expired`.
    public var state: String
    public var expiresAt: Int64
    public var issuedAt: Int64
    public var sessionStartedAt: Int64
    public var sessionEndsAt: Int64?
    public var nextRefreshAt: Int64?
    public var lastRefreshAt: Int64?
    public var refreshCount: Int64
    public var lastError: String?
    public var readers: [String]
    public var enrolledByUid: Int64
    /// With a shared store: the node refreshing this credential now, and its lease's end.
    public var leaseHolder: String?
    public var leaseExpiresAt: Int64?
    /// The token lives no longer than its provider's `refresh_margin`; it is refreshed at about
    /// two thirds of its lifetime instead. Absent (nil) otherwise.
    public var shorterThanMargin: Bool?
    /// The access token's type: `Bearer`, or `DPoP` for tokens bound to the credential's key,
    /// which take a proof per request (`ProvideDPoPProof`).
    public var tokenType: String?
    /// Seconds since the epoch after which no refresh can keep the credential alive (a new login
    /// is needed); nil when no such end is known.
    public var reloginBy: Int64?
    /// Why ``reloginBy``: `max_token_age`, `session_end`, `refresh_token_expiry` or `token_expiry`.
    public var reloginReason: String?

    public init(
        userIdentifier: String, provider: String, state: String, expiresAt: Int64, issuedAt: Int64, sessionStartedAt: Int64,
        sessionEndsAt: Int64? = nil, nextRefreshAt: Int64? = nil, lastRefreshAt: Int64? = nil, refreshCount: Int64 = 0,
        lastError: String? = nil, readers: [String] = [], enrolledByUid: Int64 = 0
    ) {
        self.userIdentifier = userIdentifier
        self.provider = provider
        self.state = state
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.sessionStartedAt = sessionStartedAt
        self.sessionEndsAt = sessionEndsAt
        self.nextRefreshAt = nextRefreshAt
        self.lastRefreshAt = lastRefreshAt
        self.refreshCount = refreshCount
        self.lastError = lastError
        self.readers = readers
        self.enrolledByUid = enrolledByUid
    }

    public var json: JSONObject {
        var object: JSONObject = [
            "userIdentifier": .string(userIdentifier), "provider": .string(provider), "state": .string(state),
            "expiresAt": .int(expiresAt), "issuedAt": .int(issuedAt), "sessionStartedAt": .int(sessionStartedAt),
        ]
        object.setIfPresent("sessionEndsAt", sessionEndsAt.map(JSONValue.int))
        object.setIfPresent("nextRefreshAt", nextRefreshAt.map(JSONValue.int))
        object.setIfPresent("lastRefreshAt", lastRefreshAt.map(JSONValue.int))
        object["refreshCount"] = .int(refreshCount)
        object.setIfPresent("lastError", lastError.map(JSONValue.string))
        object["readers"] = .array(readers.map(JSONValue.string))
        object["enrolledByUid"] = .int(enrolledByUid)
        object.setIfPresent("leaseHolder", leaseHolder.map(JSONValue.string))
        object.setIfPresent("leaseExpiresAt", leaseExpiresAt.map(JSONValue.int))
        object.setIfPresent("shorterThanMargin", shorterThanMargin.map(JSONValue.bool))
        object.setIfPresent("tokenType", tokenType.map(JSONValue.string))
        object.setIfPresent("reloginBy", reloginBy.map(JSONValue.int))
        object.setIfPresent("reloginReason", reloginReason.map(JSONValue.string))
        return object
    }

    public init(json object: JSONObject) throws(VarlinkError) {
        let r = ParameterReader(object)
        self.init(
            userIdentifier: try r.string("userIdentifier"), provider: try r.string("provider"), state: try r.string("state"),
            expiresAt: try r.int("expiresAt"), issuedAt: try r.int("issuedAt"), sessionStartedAt: try r.int("sessionStartedAt"),
            sessionEndsAt: try r.optionalInt("sessionEndsAt"), nextRefreshAt: try r.optionalInt("nextRefreshAt"),
            lastRefreshAt: try r.optionalInt("lastRefreshAt"), refreshCount: try r.optionalInt("refreshCount") ?? 0,
            lastError: try r.optionalString("lastError"), readers: try r.optionalStringArray("readers") ?? [],
            enrolledByUid: try r.optionalInt("enrolledByUid") ?? 0
        )
        leaseHolder = try r.optionalString("leaseHolder")
        leaseExpiresAt = try r.optionalInt("leaseExpiresAt")
        shorterThanMargin = try r.optionalBool("shorterThanMargin")
        tokenType = try r.optionalString("tokenType")
        reloginBy = try r.optionalInt("reloginBy")
        reloginReason = try r.optionalString("reloginReason")
    }
}

/// The parameters of `AddCredential`: a token endpoint response plus where it belongs.
public struct AddCredentialRequest: Sendable, Hashable, CustomStringConvertible {
    public var userIdentifier: String
    public var provider: String
    public var accessToken: String
    public var refreshToken: String?
    public var tokenType: String?
    public var expiresIn: Int64?
    public var scope: String?
    public var readers: [String]?
    public var replace: Bool

    public init(
        userIdentifier: String, provider: String, accessToken: String, refreshToken: String? = nil, tokenType: String? = nil,
        expiresIn: Int64? = nil, scope: String? = nil, readers: [String]? = nil, replace: Bool = false
    ) {
        self.userIdentifier = userIdentifier
        self.provider = provider
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.scope = scope
        self.readers = readers
        self.replace = replace
    }

    public var description: String { "AddCredentialRequest(userIdentifier: \(userIdentifier), provider: \(provider), tokens: <redacted>)" }

    public var json: JSONObject {
        var object: JSONObject = [
            "userIdentifier": .string(userIdentifier), "provider": .string(provider), "accessToken": .string(accessToken),
        ]
        object.setIfPresent("refreshToken", refreshToken.map(JSONValue.string))
        object.setIfPresent("tokenType", tokenType.map(JSONValue.string))
        object.setIfPresent("expiresIn", expiresIn.map(JSONValue.int))
        object.setIfPresent("scope", scope.map(JSONValue.string))
        object.setIfPresent("readers", readers.map { .array($0.map(JSONValue.string)) })
        if replace { object["replace"] = .bool(true) }
        return object
    }

    public init(json object: JSONObject) throws(VarlinkError) {
        let r = ParameterReader(object)
        self.init(
            userIdentifier: try r.string("userIdentifier"), provider: try r.string("provider"), accessToken: try r.string("accessToken"),
            refreshToken: try r.optionalString("refreshToken"), tokenType: try r.optionalString("tokenType"),
            expiresIn: try r.optionalInt("expiresIn"), scope: try r.optionalString("scope"),
            readers: try r.optionalStringArray("readers"), replace: try r.optionalBool("replace") ?? false
        )
    }
}

/// Limits on identifiers that cross the socket.
public enum Identifier {
    /// A user identifier or provider name: 1–255 bytes of printable ASCII without spaces or
    /// slashes, so it is safe in logs, file names and status tables.
    public static func isValid(_ identifier: String) -> Bool {
        let utf8 = identifier.utf8
        return !utf8.isEmpty && utf8.count <= 255 && utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") }
    }
}

/// The reply of `ProvideDPoPProof`: a DPoP-bound access token and a proof (RFC 9449) for one
/// HTTP request made with it.
public struct DPoPProof: Sendable, Hashable, CustomStringConvertible {
    public var credentials: Credentials
    /// The `DPoP` header's value: a signed JWT for one request; make a new one for the next.
    public var proof: String

    public init(credentials: Credentials, proof: String) {
        self.credentials = credentials
        self.proof = proof
    }

    /// The two headers the request carries: `Authorization: DPoP <token>` and `DPoP: <proof>`.
    public var headers: [(name: String, value: String)] {
        [("Authorization", "DPoP \(credentials.accessToken)"), ("DPoP", proof)]
    }

    public var description: String { "DPoPProof(\(credentials), proof: <redacted>)" }

    /// The call for `userIdentifier`'s proof of `httpMethod` `httpURI`.
    public static func call(
        userIdentifier: String, httpMethod: String, httpURI: String, nonce: String?, minValidSeconds: Int64
    ) -> VarlinkCall {
        var parameters: JSONObject = [
            "userIdentifier": .string(userIdentifier), "httpMethod": .string(httpMethod), "httpUri": .string(httpURI),
        ]
        if let nonce { parameters["nonce"] = .string(nonce) }
        if minValidSeconds > 0 { parameters["minValidSeconds"] = .int(minValidSeconds) }
        return VarlinkCall(method: TokenProviderMethod.provideDPoPProof.rawValue, parameters: parameters)
    }
}

/// What `RemoveCredential` did about the credential's tokens at the provider (RFC 7009).
public enum Revocation: String, Sendable, Hashable, CaseIterable {
    /// The provider revoked them.
    case revoked
    /// Not asked: the tokens came from `AddCredential` and tokend never got tokens from the
    /// provider for this credential (`revokeAnyway` asks anyway).
    case notRevoked = "not_revoked"
    /// The provider has no revocation endpoint (or its kind revokes nothing).
    case unsupported
    /// Asked, and the provider could not be reached or refused; the credential is removed anyway.
    case failed
}

/// The reply of `RemoveCredential`.
public struct RemovalResult: Sendable, Hashable {
    /// What happened at the provider (absent from older daemons).
    public var revocation: Revocation?
    /// Why the tokens were not revoked, for `failed` and `notRevoked`.
    public var problem: String?

    public init(revocation: Revocation?, problem: String? = nil) {
        self.revocation = revocation
        self.problem = problem
    }

    public var json: JSONObject {
        var object: JSONObject = [:]
        object.setIfPresent("revocation", revocation.map { .string($0.rawValue) })
        object.setIfPresent("revocationProblem", problem.map(JSONValue.string))
        return object
    }

    /// Reads a reply; an unknown `revocation` (a newer daemon) reads as absent.
    public init(json object: JSONObject) throws(VarlinkError) {
        let r = ParameterReader(object)
        revocation = try r.optionalString("revocation").flatMap(Revocation.init(rawValue:))
        problem = try r.optionalString("revocationProblem")
    }
}
