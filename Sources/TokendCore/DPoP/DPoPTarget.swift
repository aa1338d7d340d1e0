/// The HTTP request a DPoP proof is made for (RFC 9449 §4.2): its method (`htm`) and its target
/// URI without query and fragment (`htu`). Pure: checks and normalises what a program asks for.
public struct DPoPTarget: Sendable, Hashable {
    /// The HTTP method, as sent: `GET`, `POST`, …
    public let method: String
    /// The target URI without its query and fragment.
    public let uri: String

    /// Why a method or URI cannot be the target of a proof: one line naming the parameter.
    public struct Problem: Error, Hashable, CustomStringConvertible {
        /// The parameter at fault: `httpMethod` or `httpUri`.
        public let parameter: String
        public let description: String
    }

    /// Longest URI accepted; a proof is a header, and servers cap headers at a few KiB.
    public static let maximumURILength = 2048

    /// Checks `method` (an RFC 9110 token of at most 32 characters) and `uri` (an absolute
    /// `https://` URI, or `http://` to a loopback host, with no user information), and drops the
    /// URI's query and fragment.
    /// - Throws: ``Problem`` naming the parameter.
    public init(method: String, uri: String) throws(Problem) {
        guard !method.isEmpty, method.utf8.count <= 32, method.utf8.allSatisfy(Self.isTokenCharacter) else {
            throw Problem(parameter: "httpMethod", description: "is not an HTTP method")
        }
        guard uri.utf8.count <= Self.maximumURILength else {
            throw Problem(parameter: "httpUri", description: "is longer than \(Self.maximumURILength) bytes")
        }
        guard uri.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw Problem(parameter: "httpUri", description: "holds spaces, control or non-ASCII characters")
        }
        var target = Substring(uri)
        if let end = target.firstIndex(where: { $0 == "?" || $0 == "#" }) { target = target[..<end] }
        guard let parsed = ParsedURL(String(target)), parsed.scheme == "https" || parsed.scheme == "http" else {
            throw Problem(parameter: "httpUri", description: "is not an absolute http or https URI without user information")
        }
        if parsed.scheme == "http", !EndpointPolicy.isLoopback(parsed.host) {
            throw Problem(parameter: "httpUri", description: "is cleartext http to a host other than the loopback")
        }
        self.method = method
        // RFC 9449 §4.3 compares htu after RFC 3986 §6.2.2–6.2.3 normalisation: the scheme and
        // host in lower case, no default port, "/" for an empty path. Servers should normalise
        // too; sending the normal form spares the ones that compare strings.
        let host = parsed.host.contains(":") ? "[\(parsed.host)]" : parsed.host
        let defaultPort = parsed.scheme == "https" ? 443 : 80
        let port = parsed.port.flatMap { $0 == defaultPort ? nil : ":\($0)" } ?? ""
        self.uri = "\(parsed.scheme)://\(host.lowercased())\(port)\(parsed.path.isEmpty ? "/" : parsed.path)"
    }

    /// RFC 9110 §5.6.2 `tchar`.
    static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        default: Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }
}

/// DPoP nonces (RFC 9449 §8.1): `1*NQCHAR`, visible ASCII without `"` and `\`; tokend takes
/// at most 512 of them.
public enum DPoPNonce {
    public static let maximumLength = 512

    public static func isValid(_ nonce: String) -> Bool {
        !nonce.isEmpty && nonce.utf8.count <= maximumLength
            && nonce.utf8.allSatisfy { $0 >= 0x21 && $0 <= 0x7E && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
    }
}
