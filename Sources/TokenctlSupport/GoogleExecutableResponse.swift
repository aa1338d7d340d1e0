import TokendClient
import TokendJSON

/// The response of an executable-sourced Google external-account credential
/// (`credential_source.executable`), for `tokenctl google-credential`.
///
/// Google's client libraries run the command named in the credential configuration (only when
/// `GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1`), read one JSON object from its stdout, and
/// exchange the subject token it carries at the security token service (RFC 8693). A success
/// carries `token_type`, the token as `id_token`, and `expiration_time`; a failure carries
/// `success: false` with a `code` and a `message`.
///
/// Pure: values in, text out.
public enum GoogleExecutableResponse {
    /// The subject token types a token from tokend can be presented as.
    public enum TokenType: String, Sendable, Hashable, CaseIterable {
        /// A JWT access token (the default): `urn:ietf:params:oauth:token-type:jwt`.
        case jwt
        /// An OpenID Connect ID token: `urn:ietf:params:oauth:token-type:id_token`.
        case idToken = "id_token"

        /// The RFC 8693 token type URN the configuration's `subject_token_type` must name.
        public var urn: String { "urn:ietf:params:oauth:token-type:" + rawValue }
    }

    /// The response version this implements.
    public static let version = 1

    /// The success response.
    public static func success(_ credentials: Credentials, tokenType: TokenType) -> String {
        render([
            "version": .int(Int64(version)), "success": .bool(true), "token_type": .string(tokenType.urn),
            "id_token": .string(credentials.accessToken), "expiration_time": .int(credentials.expiresAt),
        ])
    }

    /// The failure response: `code` is the kind of failure (tokend's error code, or `usage`),
    /// `message` what to do about it.
    public static func failure(code: String, message: String) -> String {
        render(["version": .int(Int64(version)), "success": .bool(false), "code": .string(code), "message": .string(message)])
    }

    private static func render(_ object: JSONObject) -> String {
        var bytes: [UInt8] = []
        JSONWriter.write(object, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}
