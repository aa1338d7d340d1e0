import Foundation
import TokendTestSupport

/// A minimal HTTP/1.1 GET over TCP on loopback or a Unix socket, for the metrics endpoint.
struct HTTPResponse {
    var status: Int
    var contentType: String
    var body: String
}

func httpGet(port: Int, path: String) throws -> HTTPResponse {
    guard let fd = FreePort.connectLoopback(port) else { throw TestFailure("connect(127.0.0.1:\(port)) failed: errno \(errno)") }
    defer { close(fd) }
    return try httpExchange(fd, path: path)
}

func httpGet(unixSocket path: String, path requestPath: String) throws -> HTTPResponse {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    guard RawClient.connect(fd, path) == 0 else { throw TestFailure("connect(\(path)) failed: errno \(errno)") }
    return try httpExchange(fd, path: requestPath)
}

private func httpExchange(_ fd: Int32, path: String) throws -> HTTPResponse {
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let request = Array("GET \(path) HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\nConnection: close\r\n\r\n".utf8)
    guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else {
        throw TestFailure("send failed")
    }
    var response: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = recv(fd, &chunk, chunk.count, 0)
        if count == 0 { break }
        guard count > 0 else { throw TestFailure("recv failed: errno \(errno)") }
        response += chunk[..<count]
    }
    let text = String(decoding: response, as: UTF8.self)
    guard let split = text.range(of: "\r\n\r\n") else { throw TestFailure("not an HTTP response: \(text)") }
    let headerLines = text[..<split.lowerBound].split(separator: "\r\n")
    let status = headerLines.first.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
    let contentType =
        headerLines.first { $0.lowercased().hasPrefix("content-type:") }.map {
            String($0.dropFirst(13)).trimmingCharacters(in: .whitespaces)
        } ?? ""
    return HTTPResponse(status: status, contentType: contentType, body: String(text[split.upperBound...]))
}

/// A strict reader of the Prometheus text format: `# HELP`/`# TYPE` comments and
/// `name{labels} value` samples; anything else is an error.
enum PrometheusText {
    static func parse(_ text: String) throws -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            if line.hasPrefix("# TYPE ") || line.hasPrefix("# HELP ") { continue }
            guard let space = line.lastIndex(of: " ") else { throw TestFailure("not a sample: \(line)") }
            let series = String(line[..<space])
            let valueText = String(line[line.index(after: space)...])
            guard
                series.range(
                    of: #"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"]*",?)*\})?$"#,
                    options: .regularExpression) != nil
            else {
                throw TestFailure("not a series: \(series)")
            }
            guard let value = Double(valueText) ?? (valueText == "+Inf" ? .infinity : nil) else {
                throw TestFailure("not a value: \(line)")
            }
            samples[series] = value
        }
        return samples
    }
}
