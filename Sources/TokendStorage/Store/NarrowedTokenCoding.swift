import TokendCore
import TokendJSON

/// A credential's narrowed tokens as one secret (a JSON array), sealed in one column like the
/// credential's other tokens: a narrowed token is as secret as the token it narrows.
public enum NarrowedTokenCoding {
    /// The JSON text of `tokens`; nil when there are none (the column stays NULL).
    public static func encode(_ tokens: [NarrowedToken]) -> SecretString? {
        guard !tokens.isEmpty else { return nil }
        let array = JSONValue.array(
            tokens.map { token in
                var object: JSONObject = [
                    "key": .string(token.key), "accessToken": .string(token.accessToken.value), "tokenType": .string(token.tokenType),
                    "issuedAt": .int(token.issuedAt.millisecondsSince1970), "expiresAt": .int(token.expiresAt.millisecondsSince1970),
                    "enrolledAt": .int(token.enrolledAt.millisecondsSince1970),
                ]
                if let scope = token.scope { object["scope"] = .string(scope) }
                if let resource = token.resource { object["resource"] = .string(resource) }
                return .object(object)
            })
        return SecretString(JSONWriter.string(array))
    }

    /// The tokens in `secret`, as ``encode(_:)`` wrote them. Narrowed tokens can always be got
    /// again, so what cannot be read is left out rather than making the whole credential
    /// unreadable (its own token and refresh token must keep working).
    public static func decode(_ secret: SecretString) -> [NarrowedToken] {
        guard case .array(let values)? = try? JSONParser.parse(Array(secret.value.utf8)) else { return [] }
        var tokens: [NarrowedToken] = []
        for value in values {
            guard let object = value.objectValue, let key = object["key"]?.stringValue,
                let accessToken = object["accessToken"]?.stringValue, let tokenType = object["tokenType"]?.stringValue,
                let issuedAt = object["issuedAt"]?.int64Value, let expiresAt = object["expiresAt"]?.int64Value,
                let enrolledAt = object["enrolledAt"]?.int64Value
            else { continue }
            tokens.append(
                NarrowedToken(
                    key: key, scope: object["scope"]?.stringValue, resource: object["resource"]?.stringValue,
                    accessToken: SecretString(accessToken), tokenType: tokenType,
                    issuedAt: Timestamp(millisecondsSince1970: issuedAt), expiresAt: Timestamp(millisecondsSince1970: expiresAt),
                    enrolledAt: Timestamp(millisecondsSince1970: enrolledAt)))
        }
        return tokens
    }
}
