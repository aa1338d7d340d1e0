import Foundation
import TokendTestSupport

/// One HTTP/1.1 GET on loopback that does not follow redirects: status, headers (lower-cased
/// names) and body. Plays the browser in login tests.
struct BrowserResponse {
    var status: Int
    var headers: [String: String]
    var body: String
}

func browserGet(_ url: String, timeout: Int = 30) throws -> BrowserResponse {
    guard url.hasPrefix("http://127.0.0.1:") else { throw TestFailure("not a loopback http URL: \(url)") }
    let rest = url.dropFirst("http://127.0.0.1:".count)
    let portText = rest.prefix { $0.isNumber }
    guard let port = UInt16(portText) else { throw TestFailure("no port in \(url)") }
    var target = String(rest.dropFirst(portText.count))
    if let hash = target.firstIndex(of: "#") { target = String(target[..<hash]) }
    if target.isEmpty { target = "/" }
    guard let fd = FreePort.connectLoopback(Int(port)) else { throw TestFailure("connect(127.0.0.1:\(port)) failed: errno \(errno)") }
    defer { close(fd) }
    var time = timeval(tv_sec: timeout, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
    let request = Array("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n".utf8)
    _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    var response: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = recv(fd, &chunk, chunk.count, 0)
        if count == 0 { break }
        guard count > 0 else { throw TestFailure("recv from \(port) failed: errno \(errno)") }
        response += chunk[..<count]
    }
    let text = String(decoding: response, as: UTF8.self)
    guard let split = text.range(of: "\r\n\r\n") else { throw TestFailure("not an HTTP response: \(text)") }
    let lines = text[..<split.lowerBound].split(separator: "\r\n")
    let status = lines.first.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
    var headers: [String: String] = [:]
    for line in lines.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    return BrowserResponse(status: status, headers: headers, body: String(text[split.upperBound...]))
}

extension IdentityProvider {
    /// Approves (or denies) a pending device login as alice would at the verification page.
    func approveDevice(userCode: String, deny: Bool = false) async throws {
        var arguments = [Self.script, "approve-device", "--state-dir", stateDirectory, "--user-code", userCode]
        if deny { arguments.append("--deny") }
        // Django's start-up alone takes seconds on a busy two-core machine.
        let result = try await runCommand(Self.python, arguments, timeout: .seconds(60))
        guard result.status == 0 else { throw TestFailure("approve-device failed: \(result.stderr)") }
    }

    /// Every refresh token the server issued to `client`.
    func refreshTokens(client: String) async throws -> [String] {
        let result = try await runCommand(Self.python, [Self.script, "refresh-tokens", "--state-dir", stateDirectory, "--client", client])
        guard result.status == 0 else { throw TestFailure("refresh-tokens failed: \(result.stderr)") }
        return result.stdout.split(separator: "\n").map(String.init).filter { !$0.isEmpty }
    }

    /// Device-flow polling counts: codes, polls, slow_down, too_early.
    func devicePolls() async throws -> [String: Int] {
        let result = try await runCommand(Self.python, [Self.script, "device-polls", "--state-dir", stateDirectory])
        guard result.status == 0 else { throw TestFailure("device-polls failed: \(result.stderr)") }
        return try RawClient.object(result.stdout).compactMapValues { $0 as? Int }
    }

    var baseURL: String { "\(scheme)://127.0.0.1:\(port)" }
}
