import Foundation

/// A command that runs while the test talks to it: reads its output as it comes, writes to its
/// stdin, then collects its exit status. Used for `tokenctl login`, which waits for the user.
final class StreamingCommand: @unchecked Sendable {
    // @unchecked: the buffers are guarded by `lock`; the Process is touched by the owning test.
    private let process = Process()
    private let input = Pipe()
    private let buffers = Buffers()
    /// Signalled by each reader thread at end of file.
    private let finished = DispatchSemaphore(value: 0)

    private final class Buffers: @unchecked Sendable {
        // @unchecked: every access holds `lock`.
        let lock = NSLock()
        var out = ""
        var err = ""
        func append(_ data: Data, toOut: Bool) {
            lock.lock()
            defer { lock.unlock() }
            if toOut { out += String(decoding: data, as: UTF8.self) } else { err += String(decoding: data, as: UTF8.self) }
        }
        var snapshot: (String, String) {
            lock.lock()
            defer { lock.unlock() }
            return (out, err)
        }
    }

    init(_ executable: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        // Threads, not tasks: a blocking read would hold one of the few cooperative threads,
        // and the test's own tasks would starve.
        let buffers = self.buffers
        let finished = self.finished
        for (pipe, isOut) in [(out, true), (err, false)] {
            Thread.detachNewThread {
                while true {
                    let chunk = pipe.fileHandleForReading.availableData
                    if chunk.isEmpty { break }
                    buffers.append(chunk, toOut: isOut)
                }
                finished.signal()
            }
        }
    }

    var stdout: String { buffers.snapshot.0 }
    var stderr: String { buffers.snapshot.1 }

    /// The first stdout line that starts with `prefix`, without it; waits up to `timeout`.
    func line(startingWith prefix: String, timeout: Duration = .seconds(30)) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let line = stdout.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) {
                return String(line.dropFirst(prefix.count))
            }
            if !process.isRunning, !stdout.contains(prefix) {
                try await Task.sleep(for: .milliseconds(100))
                if let line = stdout.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) {
                    return String(line.dropFirst(prefix.count))
                }
                throw TestFailure("the command ended (\(process.terminationStatus)) without printing \(prefix): \(stdout) \(stderr)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("no line starting with \(prefix) within \(timeout): \(stdout) \(stderr)")
    }

    /// The stdout line after the one that equals `marker`.
    func line(after marker: String, timeout: Duration = .seconds(30)) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let lines = stdout.split(separator: "\n", omittingEmptySubsequences: false)
            if let index = lines.firstIndex(where: { $0 == marker }), index + 1 < lines.count, !lines[index + 1].isEmpty,
                stdout.hasSuffix("\n") || index + 2 < lines.count
            {
                return String(lines[index + 1])
            }
            if !process.isRunning { throw TestFailure("the command ended without printing \(marker): \(stdout) \(stderr)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("no line after \(marker) within \(timeout): \(stdout) \(stderr)")
    }

    func write(_ text: String) { input.fileHandleForWriting.write(Data(text.utf8)) }

    /// Waits for the exit (killing the command after `timeout`) and returns everything.
    func finish(timeout: Duration = .seconds(60)) async throws -> CommandResult {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            throw TestFailure("the command did not finish within \(timeout): \(stdout) \(stderr)")
        }
        for _ in 0..<2 {
            while finished.wait(timeout: .now()) == .timedOut { try await Task.sleep(for: .milliseconds(20)) }
        }
        return CommandResult(status: process.terminationStatus, stdout: stdout, stderr: stderr)
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}

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
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = port.bigEndian
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { throw TestFailure("connect(127.0.0.1:\(port)) failed: errno \(errno)") }
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
