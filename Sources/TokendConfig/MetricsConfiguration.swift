/// Where tokend exposes its Prometheus metrics. Everything is off by default.
public struct MetricsConfiguration: Sendable, Hashable {
    /// Where the HTTP endpoint (`GET /metrics`) listens.
    public enum Listen: Sendable, Hashable, CustomStringConvertible {
        /// A loopback TCP address: `127.0.0.1:9464`, `[::1]:9464`, `localhost:9464`.
        case tcp(host: String, port: Int)
        /// A Unix socket: `unix:/run/tokend/metrics.sock`.
        case unix(path: String)

        public var description: String {
            switch self {
            case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            case .unix(let path): "unix:\(path)"
            }
        }
    }

    /// The endpoint's address; `nil` for no endpoint.
    public var listen: Listen?
    /// A file for node_exporter's textfile collector, rewritten atomically when something
    /// changes and at least every `textfileInterval`; `nil` for no file.
    public var textfile: String?
    /// The longest time between two writes of `textfile` (gauges such as the time to the next
    /// refresh move on their own).
    public var textfileInterval: Duration

    /// Whether metrics are collected at all.
    /// Whether per-credential gauges (`tokend_credential_relogin_deadline_seconds{credential}`)
    /// are exported besides the per-provider ones (`per_credential_labels`); off by default,
    /// as a label per credential multiplies the series.
    public var perCredentialLabels = false
    public var isEnabled: Bool { listen != nil || textfile != nil }

    /// Creates a configuration; the defaults expose nothing.
    public init(listen: Listen? = nil, textfile: String? = nil, textfileInterval: Duration = .seconds(60)) {
        self.listen = listen
        self.textfile = textfile
        self.textfileInterval = textfileInterval
    }

    /// Parses a `listen` value. Only loopback addresses are accepted: metrics are for the host's
    /// own collector, and a Unix socket covers the rest.
    ///
    /// - Parameters:
    ///   - text: `HOST:PORT` or `unix:PATH`.
    ///   - resolve: Turns a relative socket path into an absolute one.
    /// - Returns: The address, or a problem to report.
    public static func parseListen(_ text: String, resolve: (String) -> String) -> Result<Listen, ListenError> {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            guard !path.isEmpty else { return .failure(ListenError("\"\(text)\" has no socket path after unix:")) }
            let resolved = resolve(path)
            guard resolved.utf8.count < 108 else {
                return .failure(ListenError("the socket path \(resolved) is longer than 107 bytes"))
            }
            return .success(.unix(path: resolved))
        }
        let host: String
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                return .failure(ListenError("\"\(text)\" is not HOST:PORT, [IPV6]:PORT or unix:PATH"))
            }
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else {
                return .failure(ListenError("\"\(text)\" is not HOST:PORT, [IPV6]:PORT or unix:PATH"))
            }
            host = String(text[..<colon])
            portText = text[text.index(after: colon)...]
        }
        guard let port = Int(portText), (1...65535).contains(port) else {
            return .failure(ListenError("\"\(portText)\" is not a port number (1…65535)"))
        }
        guard isLoopback(host) else {
            return .failure(
                ListenError("\(host) is not a loopback address; metrics listen on 127.0.0.1, ::1 or a Unix socket"))
        }
        return .success(.tcp(host: host == "localhost" ? "127.0.0.1" : host, port: port))
    }

    static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host == "::1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4, octets.allSatisfy({ UInt8($0) != nil }) else { return false }
        return octets[0] == "127"
    }

    /// Why a `listen` value was refused.
    public struct ListenError: Error, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
