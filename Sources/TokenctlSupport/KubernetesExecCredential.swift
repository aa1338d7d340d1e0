import TokendClient
import TokendJSON

/// A Kubernetes `ExecCredential` (client-go's exec credential plugins), for
/// `tokenctl kube-credential`.
///
/// kubectl runs the plugin named in the kubeconfig's `users[].user.exec` and reads one
/// `ExecCredential` from its stdout. Which API version to answer in comes from
/// `$KUBERNETES_EXEC_INFO` (set by kubectl since 1.20); without it, from the version the
/// kubeconfig names (passed as `--api-version`), else `v1beta1`, which every kubectl with exec
/// plugins reads.
///
/// Pure: text in, text out.
public enum KubernetesExecCredential {
    public static let v1 = "client.authentication.k8s.io/v1"
    public static let v1beta1 = "client.authentication.k8s.io/v1beta1"
    public static let supported = [v1, v1beta1]

    /// Why no credential can be answered.
    public struct Problem: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
    }

    /// The API version to answer in.
    /// - Parameters:
    ///   - execInfo: `$KUBERNETES_EXEC_INFO`, if set.
    ///   - requested: `--api-version`, if given.
    public static func apiVersion(execInfo: String?, requested: String?) throws(Problem) -> String {
        var version = requested
        if let execInfo, !execInfo.isEmpty {
            guard case .object(let info)? = try? JSONParser.parse(Array(execInfo.utf8)),
                let stated = info["apiVersion"]?.stringValue
            else {
                throw Problem(description: "KUBERNETES_EXEC_INFO is not an ExecCredential with an apiVersion")
            }
            version = stated
        }
        let chosen = version ?? v1beta1
        guard supported.contains(chosen) else {
            throw Problem(description: "apiVersion \(chosen) is not supported (use \(supported.joined(separator: " or ")))")
        }
        return chosen
    }

    /// The `ExecCredential` JSON, with the token and its expiry in RFC 3339 (UTC).
    public static func render(apiVersion: String, credentials: Credentials) -> String {
        let object: JSONObject = [
            "apiVersion": .string(apiVersion),
            "kind": .string("ExecCredential"),
            "status": .object([
                "token": .string(credentials.accessToken),
                "expirationTimestamp": .string(WatchLine.timestamp(credentials.expiresAt)),
            ]),
        ]
        var bytes: [UInt8] = []
        JSONWriter.write(object, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}
