import NIOHTTP1
import TokendCore

/// Where a form POST goes: the parts of an endpoint URL a connection and a request need.
/// Pure; built once per endpoint string and cached by ``FormPostClient``.
struct FormPostTarget: Sendable, Hashable {
    var tls: Bool
    var host: String
    var port: Int
    /// The request target: path and query, never the fragment; "/" when the URL has none.
    var requestTarget: String
    /// The `Host` header: the port only when it is not the scheme's default; IPv6 in brackets.
    var hostHeader: String
    /// The TLS server name: the host, unless it is an IP address (SNI carries names only).
    var serverName: String?
    /// `host:port` (IPv6 in brackets): the target of a proxy's `CONNECT`.
    var authority: String { (host.contains(":") ? "[\(host)]" : host) + ":\(port)" }

    init?(_ url: String) {
        guard let parsed = ParsedURL(url), parsed.scheme == "https" || parsed.scheme == "http" else { return nil }
        tls = parsed.scheme == "https"
        host = parsed.host
        let defaultPort = tls ? 443 : 80
        port = parsed.port ?? defaultPort
        var target = parsed.path
        if let hash = target.firstIndex(of: "#") { target = String(target[..<hash]) }
        if target.isEmpty || target.first == "?" { target = "/" + target }
        requestTarget = target
        let bracketed = host.contains(":") ? "[\(host)]" : host
        hostHeader = port == defaultPort ? bracketed : "\(bracketed):\(port)"
        serverName = Self.isIPAddress(host) ? nil : host
    }

    static func isIPAddress(_ host: String) -> Bool {
        if host.contains(":") { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets.allSatisfy { UInt8($0) != nil }
    }

    /// The request head for a form POST of `bodyLength` bytes with `headers`.
    func head(headers: [(String, String)], bodyLength: Int) -> HTTPRequestHead {
        var fields = HTTPHeaders()
        fields.reserveCapacity(headers.count + 2)
        fields.add(name: "Host", value: hostHeader)
        for (name, value) in headers { fields.add(name: name, value: value) }
        fields.add(name: "Content-Length", value: String(bodyLength))
        return HTTPRequestHead(version: .http1_1, method: .POST, uri: requestTarget, headers: fields)
    }
}

/// A whole response to a form POST.
struct FormPostResponse: Sendable {
    var status: Int
    var retryAfter: String?
    /// The server's `DPoP-Nonce` header (RFC 9449 §8), if it sent one.
    var dpopNonce: String? = nil
    var body: [UInt8]
}

/// Why a form POST failed, and whether the request can have reached the server.
struct FormPostFailure: Error, Sendable, CustomStringConvertible {
    enum Kind: Sendable, Hashable {
        /// No connection (refused, unreachable, connect timeout).
        case connect
        /// The TLS handshake failed (untrusted certificate, wrong name, …).
        case tls
        /// The proxy refused or failed to open a tunnel (no credentials, 403, 407, 502, …).
        case proxy
        /// The deadline passed before the whole answer arrived.
        case timeout
        /// The server closed the connection before the whole answer arrived.
        case closed
        /// The answer's body is larger than the limit.
        case tooBig
        /// The URL cannot be used (not http(s), no host).
        case badURL
        /// The client is shutting down.
        case shutDown
        /// Anything else the connection reported.
        case other
    }

    var kind: Kind
    /// False when the failure came before a byte of the request went out: the server cannot
    /// have acted on it.
    var requestSent: Bool
    var detail: String

    var description: String { detail }
}
