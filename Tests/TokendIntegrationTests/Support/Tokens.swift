import Foundation

/// Random, recognisable token strings, so a test can search logs and files for them.
enum Tokens {
    static func random(_ prefix: String, length: Int = 40) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        return prefix + String((0..<max(0, length - prefix.count)).map { _ in alphabet.randomElement()! })
    }

    /// A token endpoint response as `tokenctl add` reads it.
    static func response(access: String, refresh: String?, expiresIn: Int = 3600) -> String {
        var object: [String: Any] = ["access_token": access, "token_type": "Bearer", "expires_in": expiresIn]
        if let refresh { object["refresh_token"] = refresh }
        return String(decoding: try! JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    /// An `AddCredential` call as raw JSON.
    static func addCall(
        user: String, access: String, refresh: String?, expiresIn: Int = 3600, readers: [String]? = nil, provider: String = "example",
        scope: String? = nil
    ) -> String {
        var parameters: [String: Any] = ["userIdentifier": user, "provider": provider, "accessToken": access, "expiresIn": expiresIn]
        if let refresh { parameters["refreshToken"] = refresh }
        if let scope { parameters["scope"] = scope }
        if let readers { parameters["readers"] = readers }
        let call: [String: Any] = ["method": "io.tokend.TokenProvider.AddCredential", "parameters": parameters]
        return String(decoding: try! JSONSerialization.data(withJSONObject: call), as: UTF8.self)
    }

    static func tokenCall(
        user: String, minValid: Int? = nil, rejected: String? = nil, scope: String? = nil, resource: String? = nil
    ) -> String {
        var parameters: [String: Any] = ["userIdentifier": user]
        if let minValid { parameters["minValidSeconds"] = minValid }
        if let rejected { parameters["rejectedToken"] = rejected }
        if let scope { parameters["scope"] = scope }
        if let resource { parameters["resource"] = resource }
        let call: [String: Any] = ["method": "io.tokend.TokenProvider.ProvideTokenReplacement", "parameters": parameters]
        return String(decoding: try! JSONSerialization.data(withJSONObject: call), as: UTF8.self)
    }
}

extension Dictionary where Key == String, Value == Any {
    var errorName: String? { self["error"] as? String }
    var parameters: [String: Any] { self["parameters"] as? [String: Any] ?? [:] }
    var accessToken: String? { (parameters["credentials"] as? [String: Any])?["accessToken"] as? String }
}
