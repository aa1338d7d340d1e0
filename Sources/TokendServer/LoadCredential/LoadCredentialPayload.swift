import TokendCore
import TokendJSON
import TokendProtocol

/// What a unit finds in `$CREDENTIALS_DIRECTORY/ID`.
enum LoadCredentialPayload {
    /// - `token`: the access token alone, without a newline (as a token file holds it);
    /// - `json`: the `Credentials` object `ProvideTokenReplacement` answers with, e.g.
    ///   `{"accessToken":"…","expiresAt":1767225600,"issuedAt":…,"tokenType":"Bearer","userIdentifier":"backup"}`.
    static func bytes(_ credentials: Credentials, format: LoadCredentialSettings.Format) -> [UInt8] {
        switch format {
        case .token:
            return Array(credentials.accessToken.utf8)
        case .json:
            var bytes: [UInt8] = []
            JSONWriter.write(credentials.json, into: &bytes)
            return bytes
        }
    }
}
