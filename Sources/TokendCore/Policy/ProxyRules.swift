/// An HTTP proxy that tunnels to providers with `CONNECT` (RFC 9110 §9.3.6).
public struct ProxyServer: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// `user:password` for `Proxy-Authorization: Basic`; never in a message.
    public var credentials: SecretString?

    public init(host: String, port: Int, credentials: SecretString? = nil) {
        self.host = host
        self.port = port
        self.credentials = credentials
    }

    /// `http://host:port`, without the credentials: what messages and logs show.
    public var description: String { "http://\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    /// Parses `http://[user:password@]host[:port]` (the port defaults to 1080, as curl's does).
    /// - Throws: a one-line problem that never quotes the credentials.
    public static func parse(_ text: String, allowCredentials: Bool) throws(ProxyProblem) -> ProxyServer {
        var rest = text.trimming(" \t")
        if rest.lowercased().hasPrefix("https://") || rest.lowercased().hasPrefix("socks") {
            throw ProxyProblem("only http:// proxies are supported (tokend tunnels through them with CONNECT)")
        }
        if rest.lowercased().hasPrefix("http://") { rest = rest.dropFirst(7) }
        if rest.contains("://") { throw ProxyProblem("only http:// proxies are supported (tokend tunnels through them with CONNECT)") }
        if let slash = rest.firstIndex(of: "/") {
            guard rest[slash...].allSatisfy({ $0 == "/" }) else { throw ProxyProblem("a proxy URL has no path") }
            rest = rest[..<slash]
        }
        var credentials: SecretString?
        if let at = rest.lastIndex(of: "@") {
            guard allowCredentials else {
                throw ProxyProblem("has a user name or password in it; put them in proxy_credentials_file instead")
            }
            credentials = SecretString(String(rest[..<at]).removingPercentEncoding())
            rest = rest[rest.index(after: at)...]
        }
        let host: Substring
        var port = 1080
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw ProxyProblem("the host is not a valid IPv6 address") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let number = Int(after.dropFirst()) else { throw ProxyProblem("the port is not a number") }
                port = number
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            guard let number = Int(rest[rest.index(after: colon)...]) else { throw ProxyProblem("the port is not a number") }
            port = number
        } else {
            host = rest
        }
        guard !host.isEmpty, !host.contains(where: { $0 == " " || $0 == "@" }) else { throw ProxyProblem("has no host") }
        guard (1...65535).contains(port) else { throw ProxyProblem("the port \(port) is out of range") }
        return ProxyServer(host: String(host).lowercased(), port: port, credentials: credentials)
    }
}

/// Why a proxy setting is unusable: one line, never with the credentials.
public struct ProxyProblem: Error, Sendable, Hashable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// How a provider reaches its servers.
public enum ProxySetting: Sendable, Hashable {
    /// As the environment says (`https_proxy`, `no_proxy`), like curl and most tools.
    case environment
    /// Straight to the server, whatever the environment says.
    case direct
    /// Through this proxy, whatever the environment says.
    case server(ProxyServer)
}

/// The proxy variables of tokend's environment (systemd `Environment=`), read once at start.
///
/// Like curl: the lower-case variable wins over the upper-case one; `no_proxy` is a comma
/// list of host names (matching the host and its subdomains; a leading dot is optional), IP
/// addresses, or `*` for everything, each with an optional port, which is ignored. `http_proxy`
/// does not apply: tokend sends cleartext HTTP only to loopback addresses, which go direct.
public struct ProxyEnvironment: Sendable, Hashable {
    public var httpsProxy: ProxyServer?
    public var noProxy: [String]

    public init(httpsProxy: ProxyServer? = nil, noProxy: [String] = []) {
        self.httpsProxy = httpsProxy
        self.noProxy = noProxy
    }

    /// Reads `https_proxy`/`HTTPS_PROXY` and `no_proxy`/`NO_PROXY`.
    /// - Throws: a problem naming the variable.
    public init(environment: [String: String]) throws(ProxyProblem) {
        let (proxyName, proxyValue) = Self.variable("https_proxy", in: environment)
        if let proxyValue, !proxyValue.isEmpty {
            do {
                httpsProxy = try ProxyServer.parse(proxyValue, allowCredentials: true)
            } catch {
                throw ProxyProblem("\(proxyName): \(error.description)")
            }
        }
        let (_, noProxyValue) = Self.variable("no_proxy", in: environment)
        noProxy = (noProxyValue ?? "").split(separator: ",").map { Self.normalize(String($0)) }.filter { !$0.isEmpty }
    }

    private static func variable(_ lower: String, in environment: [String: String]) -> (String, String?) {
        if let value = environment[lower] { return (lower, value) }
        return (lower.uppercased(), environment[lower.uppercased()])
    }

    /// An entry without spaces, port or leading dot, lower-cased; IPv6 brackets kept off.
    private static func normalize(_ entry: String) -> String {
        var text = String(entry.trimming(" \t")).lowercased()
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            return String(text[text.index(after: text.startIndex)..<close])
        }
        if text.filter({ $0 == ":" }).count == 1, let colon = text.firstIndex(of: ":") { text = String(text[..<colon]) }
        while text.hasPrefix(".") { text.removeFirst() }
        return text
    }

    /// Whether `no_proxy` exempts `host`.
    public func bypasses(_ host: String) -> Bool {
        let host = String(host.lowercased().trimming("[]"))
        return noProxy.contains { entry in
            entry == "*" || host == entry || host.hasSuffix("." + entry)
        }
    }

    /// The proxy for a request to `host` over `scheme` under `setting`, or nil to go direct.
    /// Cleartext `http` always goes direct: tokend allows it only to loopback addresses.
    public func route(scheme: String, host: String, setting: ProxySetting) -> ProxyServer? {
        guard scheme.lowercased() == "https" else { return nil }
        switch setting {
        case .direct: return nil
        case .server(let server): return server
        case .environment:
            guard let httpsProxy, !bypasses(host) else { return nil }
            return httpsProxy
        }
    }
}

extension StringProtocol {
    /// The text without leading and trailing characters of `characters`.
    fileprivate func trimming(_ characters: String) -> Substring {
        let drop = Set(characters)
        var slice = self[...]
        while let first = slice.first, drop.contains(first) { slice.removeFirst() }
        while let last = slice.last, drop.contains(last) { slice.removeLast() }
        return Substring(slice)
    }
}

extension String {
    /// `%XX` sequences decoded (proxy user names and passwords in URLs); invalid ones kept.
    fileprivate func removingPercentEncoding() -> String {
        var bytes: [UInt8] = []
        var iterator = Array(utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "%"), iterator.count >= 2,
                let value = UInt8(String(decoding: iterator.prefix(2), as: UTF8.self), radix: 16)
            {
                bytes.append(value)
                iterator = iterator.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
