/// Query strings of browser logins: building them (RFC 3986 percent-encoding) and reading them
/// back out of a redirect URL.
public enum LoginURL {
    /// `text` with everything but RFC 3986 unreserved characters percent-encoded.
    public static func percentEncode(_ text: String) -> String {
        var result = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                result += "%" + String(UnicodeScalar(hex[Int(byte >> 4)])) + String(UnicodeScalar(hex[Int(byte & 0x0F)]))
            }
        }
        return result
    }

    /// `base` with `items` appended as a query (`?` or `&` as needed).
    public static func appendingQuery(_ base: String, _ items: [(String, String)]) -> String {
        let query = items.map { percentEncode($0.0) + "=" + percentEncode($0.1) }.joined(separator: "&")
        return base + (base.contains("?") ? "&" : "?") + query
    }

    /// Decodes `%XX` and `+` (form encoding, which some servers use in redirects); `nil` for a
    /// malformed escape or bytes that are not UTF-8.
    public static func percentDecode(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "+"): bytes.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
                bytes.append(high << 4 | low)
            default: bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// The query parameters of `url` (between `?` and `#`), decoded, in order; `nil` when one
    /// of them is malformed. A URL without a query has none.
    public static func queryItems(of url: String) -> [(name: String, value: String)]? {
        let withoutFragment = url.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)[0]
        guard let mark = withoutFragment.firstIndex(of: "?") else { return [] }
        var items: [(name: String, value: String)] = []
        for pair in withoutFragment[withoutFragment.index(after: mark)...].split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = percentDecode(parts[0]), let value = percentDecode(parts.count > 1 ? parts[1] : "") else { return nil }
            items.append((name, value))
        }
        return items
    }

    /// The one value of `name` in `items`, or `nil` when absent.
    /// - Throws: when the parameter is given twice: which copy counts would be a guess an
    ///   attacker could exploit.
    public static func value(_ name: String, in items: [(name: String, value: String)]) throws(LoginError) -> String? {
        let values = items.filter { $0.name == name }.map(\.value)
        guard values.count <= 1 else { throw LoginError("the redirect carries the parameter \(name) more than once") }
        return values.first
    }

    /// `scheme://host:port/path` of an absolute http(s) URL, without query or fragment, with
    /// the default port made explicit; `nil` when it is not one. Two URLs with the same origin
    /// and path are the same redirect target.
    public static func target(of url: String) -> String? {
        guard let parsed = ParsedURL(url) else { return nil }
        let port = parsed.port ?? (parsed.scheme == "https" ? 443 : parsed.scheme == "http" ? 80 : 0)
        let path = parsed.path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
            .split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)[0]
        return "\(parsed.scheme)://\(parsed.host):\(port)\(path.isEmpty ? "/" : String(path))"
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
