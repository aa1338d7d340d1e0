import TokendClient

/// What `tokenctl login`'s one-shot loopback listener (RFC 8252 §7.3) does with each HTTP
/// request it receives. Pure: the request's head in, a decision out.
public struct LoopbackRedirect: Sendable, Hashable {
    /// The path the login's redirect goes to, e.g. `/callback`.
    public var path: String
    /// Another path on the same listener that also ends the login (a HAT application's
    /// fallback), if any.
    public var fallbackPath: String?
    /// The `state` the redirect must carry (code flow); `nil` when the flow has none.
    public var state: String?

    public init(path: String, fallbackPath: String? = nil, state: String? = nil) {
        self.path = path.isEmpty ? "/" : path
        self.fallbackPath = fallbackPath
        self.state = state
    }

    public enum Decision: Sendable, Hashable {
        /// Not the redirect (a favicon, a probe): answer `status` and keep listening.
        case ignore(status: Int)
        /// The redirect: hand `target` (path and query) to tokend.
        case redirect(target: String)
        /// A redirect that does not belong to this login: stop, the login fails.
        case reject(reason: String)
    }

    /// Judges a request from its head (request line and headers).
    public func judge(head: String) -> Decision {
        guard let line = head.split(separator: "\r\n", maxSplits: 1, omittingEmptySubsequences: false).first else {
            return .ignore(status: 400)
        }
        let parts = line.split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else { return .ignore(status: 400) }
        guard parts[0] == "GET" else { return .ignore(status: 405) }
        let target = String(parts[1])
        guard target.hasPrefix("/"), target.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return .ignore(status: 400) }
        let requestPath = String(target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0])
        if let fallbackPath, requestPath == fallbackPath, requestPath != path { return .redirect(target: target) }
        guard requestPath == path else { return .ignore(status: 404) }
        if let state {
            let values = Self.queryValues("state", in: target)
            guard values.count == 1, values[0] == state else {
                return .reject(reason: "the redirect's state does not match this login (a forged or crossed login)")
            }
        }
        return .redirect(target: target)
    }

    /// The decoded values of `name` in the query of `target` (or of a URL).
    public static func queryValues(_ name: String, in target: String) -> [String] {
        let withoutFragment = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)[0]
        guard let mark = withoutFragment.firstIndex(of: "?") else { return [] }
        return withoutFragment[withoutFragment.index(after: mark)...].split(separator: "&").compactMap { pair -> String? in
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard kv[0] == name else { return nil }
            return percentDecode(kv.count > 1 ? kv[1] : "")
        }
    }

    /// `http://127.0.0.1:PORT/path` split into port and path, when `uri` is a plain-http
    /// loopback URL a listener can serve.
    public static func loopback(_ uri: String) -> (port: Int, path: String)? {
        let prefixes = ["http://127.0.0.1:", "http://localhost:"]
        guard let prefix = prefixes.first(where: { uri.hasPrefix($0) }) else { return nil }
        let rest = uri.dropFirst(prefix.count)
        let portText = rest.prefix { $0.isNumber }
        guard let port = Int(portText), (1...65535).contains(port) else { return nil }
        let afterPort = rest.dropFirst(portText.count)
        guard afterPort.isEmpty || afterPort.hasPrefix("/") || afterPort.hasPrefix("?") else { return nil }
        let path = afterPort.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
            .split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)[0]
        return (port, path.isEmpty ? "/" : String(path))
    }

    static func percentDecode(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "+") {
                bytes.append(UInt8(ascii: " "))
            } else if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(hex), let low = iterator.next().flatMap(hex) else { return nil }
                bytes.append(high << 4 | low)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }
}
