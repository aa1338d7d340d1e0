import TokendClient
import TokendJSON
import TokendProtocol

/// A token endpoint response (RFC 6749 §5.1) as `tokenctl add` reads it from stdin or a file:
/// `access_token`, and optionally `refresh_token`, `expires_in`, `token_type`, `scope`.
///
/// Checking happens here, before anything is sent, so a mistake (an error response, an empty
/// token, a pasted header) gets a precise message. Messages name fields, never their values.
public struct TokenResponseInput: Sendable, Hashable, CustomStringConvertible {
    public var accessToken: String
    public var refreshToken: String?
    public var tokenType: String?
    /// `expires_in`, in seconds.
    public var expiresIn: Int64?
    public var scope: String?

    /// The largest input accepted.
    public static let maximumBytes = 64 * 1024

    public init(
        accessToken: String,
        refreshToken: String? = nil,
        tokenType: String? = nil,
        expiresIn: Int64? = nil,
        scope: String? = nil
    ) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.scope = scope
    }

    /// Never shows the tokens.
    public var description: String {
        let expires = expiresIn.map(String.init) ?? "nil"
        return "TokenResponseInput(tokenType: \(tokenType ?? "nil"), expiresIn: \(expires), tokens: <redacted>)"
    }

    /// Why an input is not a usable token response.
    public struct ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    /// Parses a token endpoint's JSON response.
    /// - Parameter bytes: the input, UTF-8 JSON; surrounding whitespace is fine.
    /// - Returns: the response.
    /// - Throws: ``ParseError`` when the input is empty, too large, not a JSON object, an OAuth
    ///   error response, or lacks a non-empty `access_token`, or a field has the wrong type.
    public static func parse(_ bytes: some Collection<UInt8>) throws(ParseError) -> TokenResponseInput {
        guard bytes.count <= maximumBytes else {
            throw ParseError("the input is larger than \(maximumBytes / 1024) KiB")
        }
        guard bytes.contains(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }) else {
            throw ParseError("the input is empty; expected a token endpoint's JSON response")
        }
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes, maximumDepth: 16)
        } catch {
            // The parser's message has a reason and an offset, never input.
            throw ParseError("the input is not valid JSON (\(error)); expected a token endpoint's JSON response")
        }
        guard case .object(let object) = value else {
            throw ParseError("the input is \(value.typeName), not a JSON object")
        }
        if object["access_token"] == nil, let error = object["error"]?.stringValue {
            throw ParseError(
                "the input is an error response (error \"\(Self.printable(error, limit: 64))\"), not tokens"
            )
        }
        guard let access = object["access_token"] else { throw ParseError("the input has no access_token") }
        guard let accessToken = access.stringValue else {
            throw ParseError("access_token is \(access.typeName), expected a string")
        }
        guard !accessToken.isEmpty else { throw ParseError("access_token is empty") }
        guard isTokenText(accessToken) else { throw ParseError("access_token contains characters a token cannot have") }
        var input = TokenResponseInput(accessToken: accessToken)

        if let refresh = object["refresh_token"], !refresh.isNull {
            guard let text = refresh.stringValue else {
                throw ParseError("refresh_token is \(refresh.typeName), expected a string")
            }
            guard !text.isEmpty, isTokenText(text) else {
                throw ParseError("refresh_token is empty or contains characters a token cannot have")
            }
            input.refreshToken = text
        }
        if let type = object["token_type"], !type.isNull {
            guard let text = type.stringValue, !text.isEmpty, text.utf8.count <= 64, isTokenText(text) else {
                throw ParseError("token_type is not a short printable string")
            }
            input.tokenType = text
        }
        if let expires = object["expires_in"], !expires.isNull {
            // Some servers send expires_in as a string ("3600").
            let seconds = expires.int64Value ?? expires.stringValue.flatMap { Int64($0) }
            guard let seconds, seconds >= 0, seconds <= 100 * 365 * 86_400 else {
                throw ParseError("expires_in is not a number of seconds")
            }
            input.expiresIn = seconds
        }
        if let scope = object["scope"], !scope.isNull {
            guard let text = scope.stringValue, text.utf8.count <= 4096, isTokenText(text) else {
                throw ParseError("scope is not a printable string")
            }
            input.scope = text
        }
        return input
    }

    /// The `AddCredential` request that stores this response.
    /// - Parameters:
    ///   - userIdentifier: whose credential.
    ///   - provider: the configured provider that issued the tokens.
    ///   - readers: who may read it (`uid:N`, `user:NAME`, `group:NAME`); `nil` lets the daemon
    ///     default to the caller's uid.
    ///   - replace: overwrite an existing credential.
    public func request(userIdentifier: String, provider: String, readers: [String]? = nil, replace: Bool = false)
        -> AddCredentialRequest
    {
        AddCredentialRequest(
            userIdentifier: userIdentifier,
            provider: provider,
            accessToken: accessToken,
            refreshToken: refreshToken,
            tokenType: tokenType,
            expiresIn: expiresIn,
            scope: scope,
            readers: readers,
            replace: replace
        )
    }

    /// Tokens and the other fields are printable ASCII (RFC 6749 §A.12 `VSCHAR`).
    private static func isTokenText(_ text: String) -> Bool {
        text.utf8.count <= 16_384 && text.utf8.allSatisfy { $0 >= 0x20 && $0 <= 0x7E }
    }

    private static func printable(_ text: String, limit: Int) -> String {
        String(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7F }.prefix(limit).map(Character.init))
    }
}
