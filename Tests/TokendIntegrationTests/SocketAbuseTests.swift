import Foundation
import Testing
import TokendTestSupport

/// Abuse of the socket (issue 8, point 4): many connections, slowloris clients, clients that
/// never read. Bounded in count and time; no timing assertions (`bench/abuse-report` measures
/// latency and memory). Malformed, oversized, deeply nested and invalid UTF-8 messages are in
/// `VarlinkProtocolTests`.
@Suite(.serialized)
struct SocketAbuseTests {
    static let getInfo = #"{"method":"org.varlink.service.GetInfo"}"#

    /// The daemon's resident set in KiB (`VmRSS`), from `/proc`.
    static func residentKiB(_ pid: Int32) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? -1
    }

    /// Raises this process's soft descriptor limit (the daemon inherits it) and returns it.
    static func raiseDescriptorLimit(to wanted: rlim_t) -> Int {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < wanted {
            limit.rlim_cur = min(wanted, limit.rlim_max)
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return Int(limit.rlim_cur)
    }

    /// The idle connections are held by `Tests/interop/idle_connections.py`, a process of its
    /// own: thousands of descriptors in the test process would expose the other tests' child
    /// processes to a Foundation bug (see the script).
    @Test func thousandsOfIdleConnectionsAndWellBehavedClientsAreStillAnswered() async throws {
        let descriptors = Self.raiseDescriptorLimit(to: 8192)
        // 2,000 when the descriptor limit allows (it is inherited by the daemon and the
        // helper), else fewer.
        let count = min(2000, descriptors - 256)
        try #require(count >= 500, "descriptor limit \(descriptors) is too low for this test")
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: "max_connections = \(count + 16)"))
        try await daemon.start()
        let baseline = Self.residentKiB(daemon.process.processIdentifier)
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        holder.arguments = [Repository.root + "/Tests/interop/idle_connections.py", daemon.socketPath, "\(count)"]
        let input = Pipe()
        let output = Pipe()
        holder.standardInput = input
        holder.standardOutput = output
        try holder.run()
        defer {
            try? input.fileHandleForWriting.close()
            holder.waitUntilExit()
        }
        // Its report, once every connection is open and every 100th one was served.
        let reader = output.fileHandleForReading
        let line = try await onOwnThread { () -> String in
            var bytes = Data()
            while !bytes.contains(UInt8(ascii: "\n")) {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                bytes.append(chunk)
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        guard let report = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
            Issue.record("idle_connections.py reported no result: \(line)")
            return
        }
        #expect(report["opened"] as? Int == count)
        #expect(report["probed"] as? Int == (count + 99) / 100)
        #expect((report["errors"] as? [String])?.isEmpty == true, "\(report)")
        // A well-behaved client among them gets its answers.
        let client = try RawClient(path: daemon.socketPath)
        for _ in 0..<20 { #expect(try client.call(Self.getInfo).errorName == nil) }
        let loaded = Self.residentKiB(daemon.process.processIdentifier)
        print("socket abuse: \(count) idle connections, daemon RSS \(baseline) KiB → \(loaded) KiB")
        // Bounded: a few KiB per connection, far below 64 KiB each.
        #expect(loaded - baseline < count * 64, "RSS grew \(loaded - baseline) KiB for \(count) connections")
        #expect(daemon.process.isRunning)
        try await daemon.stop()
    }

    @Test func aSlowlorisClientIsDroppedByTheMessageTimeoutWhileIdleOnesAreNot() async throws {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: #"message_timeout = "1s""#))
        try await daemon.start()
        let idle = try RawClient(path: daemon.socketPath)
        #expect(try idle.call(Self.getInfo).errorName == nil)
        let bystander = try RawClient(path: daemon.socketPath)
        let slowloris = try RawClient(path: daemon.socketPath)
        // One byte every 200 ms of a valid call: finishing would take ~8 s, the limit is 1 s.
        let message = Array(Self.getInfo.utf8)
        var closed = false
        var sent = 0
        for byte in message {
            let n = [byte].withUnsafeBytes { Glibc.send(slowloris.fd, $0.baseAddress, 1, Int32(MSG_NOSIGNAL)) }
            if n <= 0 {
                closed = true
                break
            }
            sent += 1
            #expect(try bystander.call(Self.getInfo).errorName == nil, "others are served meanwhile")
            try await Task.sleep(for: .milliseconds(200))
        }
        if !closed {
            // All bytes but the NUL went out: the daemon must have closed the connection by now.
            closed = (try? slowloris.receive()) ?? nil == nil
        }
        #expect(closed, "the slowloris connection was closed (sent \(sent) of \(message.count) bytes)")
        #expect(sent < message.count, "closed before the message could complete")
        #expect(daemon.log.contains("message not completed within message_timeout"))
        // An idle connection (nothing begun) outlives the timeout.
        try await Task.sleep(for: .milliseconds(1500))
        #expect(try idle.call(Self.getInfo).errorName == nil, "idle connections are not timed out")
        try await daemon.stop()
    }

    @Test func nonReadingClientsDoNotGrowMemoryWithoutBound() async throws {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: "max_pipelined_calls = 64"))
        try await daemon.start()
        let pid = daemon.process.processIdentifier
        let bystander = try RawClient(path: daemon.socketPath)
        #expect(try bystander.call(Self.getInfo).errorName == nil)
        let baseline = Self.residentKiB(pid)
        // Eight clients pipeline calls with large replies (the interface description) and never
        // read: each is sent as much as the daemon will take, up to 40,000 calls (about 4.5 MB).
        let call = Array(
            (#"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"io.tokend.TokenProvider"}}"# + "\0").utf8)
        var hogs: [RawClient] = []
        var accepted: [Int] = []
        for _ in 0..<8 {
            let hog = try RawClient(path: daemon.socketPath)
            _ = fcntl(hog.fd, F_SETFL, fcntl(hog.fd, F_GETFL) | O_NONBLOCK)
            var sent = 0
            var stalls = 0
            while sent < 40_000, stalls < 20 {
                let n = call.withUnsafeBytes { Glibc.send(hog.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n == call.count {
                    sent += 1
                } else {
                    // Partial or refused: the kernel buffer is full. Give the daemon a moment; a
                    // daemon that buffered without bound would go on reading.
                    stalls += 1
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            accepted.append(sent)
            hogs.append(hog)
            #expect(try bystander.call(Self.getInfo).errorName == nil)
        }
        let loaded = Self.residentKiB(pid)
        print("socket abuse: non-readers had \(accepted) calls taken; daemon RSS \(baseline) KiB → \(loaded) KiB")
        #expect(accepted.allSatisfy { $0 < 40_000 }, "the daemon stopped reading from clients that do not read")
        // Each non-reader costs its socket buffers and at most max_pipelined_calls replies.
        #expect(loaded - baseline < 64 * 1024, "RSS grew \(loaded - baseline) KiB")
        #expect(daemon.process.isRunning)
        hogs.removeAll()
        #expect(try bystander.call(Self.getInfo).errorName == nil)
        try await daemon.stop()
    }
}
