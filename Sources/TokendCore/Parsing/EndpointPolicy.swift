/// Which URLs tokend will send credentials to.
public enum EndpointPolicy {
    public struct Violation: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
    }

    /// `https://` anywhere; plain `http://` only to a loopback host (127.0.0.0/8, `::1`,
    /// `localhost`), where no network is crossed (RFC 8252 §8.3 makes the same exception).
    public static func check(_ url: String) throws(Violation) -> ParsedURL {
        guard let parsed = ParsedURL(url) else { throw Violation(description: "\"\(url)\" is not an absolute http(s) URL") }
        if parsed.scheme == "https" { return parsed }
        guard parsed.scheme == "http" else {
            throw Violation(description: "\"\(url)\" uses \(parsed.scheme); only https (or http to loopback) is allowed")
        }
        guard isLoopback(parsed.host) else {
            throw Violation(
                description: "refusing plain http to \(parsed.host): tokens are only sent over https, except to loopback addresses")
        }
        return parsed
    }

    public static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host == "::1" || host == "[::1]" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4, octets.allSatisfy({ UInt8($0) != nil }) else { return false }
        return octets[0] == "127"
    }
}

/// The parts of an absolute http(s) URL that tokend needs to check.
public struct ParsedURL: Sendable, Hashable {
    public var scheme: String
    public var host: String
    public var port: Int?
    public var path: String

    public init?(_ text: String) {
        guard let separator = Self.find("://", in: text) else { return nil }
        scheme = text[..<separator].lowercased()
        guard !scheme.isEmpty else { return nil }
        let rest = text[text.index(separator, offsetBy: 3)...]
        let delimiters: Set<Character> = ["/", "?", "#"]
        let authorityEnd = rest.firstIndex { (character: Character) -> Bool in delimiters.contains(character) } ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        path = String(rest[authorityEnd...])
        // Userinfo in a token endpoint URL is a misconfiguration we refuse rather than guess at.
        guard !authority.contains("@"), !authority.isEmpty else { return nil }
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") {
                port = Int(after.dropFirst())
            } else if !after.isEmpty {
                return nil
            }
        } else {
            if let colon = authority.lastIndex(of: ":") {
                guard let value = Int(authority[authority.index(after: colon)...]), (1...65535).contains(value) else { return nil }
                port = value
                authority = authority[..<colon]
            }
            host = authority.lowercased()
        }
        guard !host.isEmpty else { return nil }
    }

    private static func find(_ needle: String, in text: String) -> String.Index? {
        var index = text.startIndex
        while index < text.endIndex {
            if text[index...].hasPrefix(needle) { return index }
            index = text.index(after: index)
        }
        return nil
    }
}
