/// A parsed `postgresql://user@host:port/database` address.
///
/// Pure. A password in the URL is refused: it would end up in configuration files, process
/// listings and logs; `password_file` is the place for it.
public struct PostgresURL: Sendable, Hashable, CustomStringConvertible {
    public var user: String
    public var host: String
    public var port: Int
    public var database: String

    public init(user: String, host: String, port: Int, database: String) {
        self.user = user
        self.host = host
        self.port = port
        self.database = database
    }

    /// Whether the host is this machine's loopback (`localhost`, `127.0.0.0/8`, `::1`): traffic
    /// that never leaves the host, where an unverified connection exposes nothing on a network.
    public var isLoopback: Bool {
        let name = host.lowercased()
        return name == "localhost" || name == "::1" || name.hasPrefix("127.")
    }

    /// Why a URL was refused (never echoes a password).
    public struct Problem: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
    }

    /// Parses `text`.
    ///
    /// - Throws: ``Problem`` naming what is wrong.
    public static func parse(_ text: String) throws(Problem) -> PostgresURL {
        let schemes = ["postgresql://", "postgres://"]
        guard let scheme = schemes.first(where: { text.hasPrefix($0) }) else {
            throw Problem(description: "must start with postgresql://")
        }
        var rest = Substring(text.dropFirst(scheme.count))
        if let query = rest.firstIndex(of: "?") {
            throw Problem(description: "query parameters (\(rest[query...].count - 1) characters after '?') are not supported")
        }
        guard let at = rest.lastIndex(of: "@") else { throw Problem(description: "names no user (postgresql://USER@HOST/DATABASE)") }
        let userPart = rest[..<at]
        if userPart.contains(":") { throw Problem(description: "must not contain a password; use password_file") }
        guard !userPart.isEmpty else { throw Problem(description: "names no user") }
        rest = rest[rest.index(after: at)...]
        guard let slash = rest.firstIndex(of: "/") else { throw Problem(description: "names no database (…/DATABASE)") }
        let database = String(rest[rest.index(after: slash)...])
        guard !database.isEmpty, !database.contains("/") else { throw Problem(description: "names no valid database") }
        let hostPort = rest[..<slash]
        var host = String(hostPort)
        var port = 5432
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else { throw Problem(description: "has an unterminated IPv6 address") }
            host = String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
            let after = hostPort[hostPort.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let value = Int(after.dropFirst()), (1...65535).contains(value) else {
                    throw Problem(description: "has an invalid port")
                }
                port = value
            }
        } else if let colon = hostPort.lastIndex(of: ":") {
            host = String(hostPort[..<colon])
            guard let value = Int(hostPort[hostPort.index(after: colon)...]), (1...65535).contains(value) else {
                throw Problem(description: "has an invalid port")
            }
            port = value
        }
        guard !host.isEmpty else { throw Problem(description: "names no host") }
        guard let user = String(userPart).removingPercentEncodingLeniently(), let databaseName = database.removingPercentEncodingLeniently()
        else {
            throw Problem(description: "has an invalid %-escape")
        }
        return PostgresURL(user: user, host: host, port: port, database: databaseName)
    }

    public var description: String { "postgresql://\(user)@\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database)" }
}

extension String {
    /// Decodes `%XX` escapes; `nil` for a malformed one.
    fileprivate func removingPercentEncodingLeniently() -> String? {
        var bytes: [UInt8] = []
        var iterator = utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next(), let low = iterator.next(),
                let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
            else { return nil }
            bytes.append(value)
        }
        return String(validating: bytes, as: UTF8.self)
    }
}
