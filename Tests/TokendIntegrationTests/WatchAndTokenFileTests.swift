import Foundation
import Testing
import TokendTestSupport

/// `Watch` streams and token files: programs that wait for changes, and programs that can only
/// read a file.
@Suite(.serialized)
struct WatchAndTokenFileTests {
    static func watchCall(_ user: String, more: Bool = true) -> String {
        #"{"method":"io.tokend.TokenProvider.Watch","parameters":{"userIdentifier":"\#(user)"}\#(more ? #","more":true"# : "")}"#
    }

    @Test func watchStreamsEveryNewTokenAndEndsOnRemoval() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        let first = Tokens.random("first-")
        #expect(try admin.call(Tokens.addCall(user: "w", access: first, refresh: nil)).errorName == nil)
        let watcher = try RawClient(path: daemon.socketPath)
        try watcher.send(Self.watchCall("w"))
        let initial = try RawClient.object(try #require(try watcher.receive()))
        #expect(initial.accessToken == first)
        #expect(initial["continues"] as? Bool == true)
        // A replacement is a new token.
        let second = Tokens.random("second-")
        var replace = try RawClient.object(Tokens.addCall(user: "w", access: second, refresh: nil))
        var parameters = replace["parameters"] as! [String: Any]
        parameters["replace"] = true
        replace["parameters"] = parameters
        #expect(try admin.call(String(decoding: try JSONSerialization.data(withJSONObject: replace), as: UTF8.self)).errorName == nil)
        let update = try RawClient.object(try #require(try watcher.receive()))
        #expect(update.accessToken == second)
        #expect(update["continues"] as? Bool == true)
        // Removal ends the stream with an error.
        #expect(
            try admin.call(#"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"w"}}"#).errorName == nil)
        let last = try RawClient.object(try #require(try watcher.receive()))
        #expect(last.errorName == "io.tokend.TokenProvider.UnknownUser")
        #expect(last["continues"] == nil)
        // The connection serves the next call afterwards.
        #expect(try watcher.call(#"{"method":"org.varlink.service.GetInfo"}"#).errorName == nil)
        try await daemon.stop()
    }

    @Test func watchNeedsMoreAndPermission() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        #expect(try admin.call(Tokens.addCall(user: "w", access: Tokens.random("t-"), refresh: nil)).errorName == nil)
        #expect(try admin.call(Self.watchCall("w", more: false)).errorName == "org.varlink.service.ExpectedMore")
        #expect(try admin.call(Self.watchCall("nobody-here")).errorName == "io.tokend.TokenProvider.UnknownUser")
        let denied = try await OtherUser.call(Self.watchCall("w"), socket: daemon.socketPath, uid: 65534, gid: 65534)
        #expect(denied.errorName == "io.tokend.TokenProvider.PermissionDenied")
        try await daemon.stop()
    }

    @Test func aWatcherThatNeverReadsHoldsUpNobody() async throws {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: "max_message_bytes = 65536"))
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        #expect(try admin.call(Tokens.addCall(user: "w", access: Tokens.random("t-"), refresh: nil)).errorName == nil)
        let sleeper = try RawClient(path: daemon.socketPath)
        try sleeper.send(Self.watchCall("w"))
        // 300 replacements with 16 KiB tokens: far more than the socket buffers hold.
        var last = ""
        for i in 0..<300 {
            last = Tokens.random("big\(i)-", length: 16_000)
            var call = try RawClient.object(Tokens.addCall(user: "w", access: last, refresh: nil))
            var parameters = call["parameters"] as! [String: Any]
            parameters["replace"] = true
            call["parameters"] = parameters
            #expect(try admin.call(String(decoding: try JSONSerialization.data(withJSONObject: call), as: UTF8.self)).errorName == nil)
        }
        #expect(try admin.call(Tokens.tokenCall(user: "w")).accessToken == last)
        // When the sleeper finally reads, the newest token is among what it gets, and it got far
        // fewer messages than there were changes.
        var received: [String] = []
        while let message = try sleeper.receive() {
            let object = try RawClient.object(message)
            received.append(object.accessToken ?? "")
            if object.accessToken == last { break }
        }
        #expect(received.last == last)
        #expect(received.count < 300, "updates were coalesced: \(received.count)")
        try await daemon.stop()
    }

    @Test func tokenFilesChangeAtomicallyWithTheConfiguredModeAndGoAwayOnRemoval() async throws {
        let (directory, daemon) = try await DaemonProcess.startWithTokenFile(user: "filed", mode: "0640")
        let admin = try RawClient(path: daemon.socketPath)
        let path = directory.file("tokens/filed")
        var written: Set<String> = []
        let first = Tokens.random("file0-", length: 2000)
        written.insert(first)
        #expect(try admin.call(Tokens.addCall(user: "filed", access: first, refresh: nil)).errorName == nil)
        try await Self.waitFor { (try? String(contentsOfFile: path, encoding: .utf8)) == first }
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect(attributes[.posixPermissions] as? Int == 0o640)

        // A reader polling the file during 50 replacements only ever sees whole tokens.
        let stopReading = StopFlag()
        let reader = Task {
            await onOwnThread { () -> [String] in
                var seen: [String] = []
                let end = ContinuousClock.now + .seconds(60)
                // At least one read even if the thread first runs after it was told to stop (a loaded machine).
                while seen.isEmpty || !stopReading.isRaised, ContinuousClock.now < end {
                    if let text = try? String(contentsOfFile: path, encoding: .utf8) { seen.append(text) }
                }
                return seen
            }
        }
        var latest = first
        for i in 1...50 {
            latest = Tokens.random("file\(i)-", length: 2000)
            written.insert(latest)
            var call = try RawClient.object(Tokens.addCall(user: "filed", access: latest, refresh: nil))
            var parameters = call["parameters"] as! [String: Any]
            parameters["replace"] = true
            call["parameters"] = parameters
            #expect(try admin.call(String(decoding: try JSONSerialization.data(withJSONObject: call), as: UTF8.self)).errorName == nil)
        }
        let finalToken = latest
        try await Self.waitFor { (try? String(contentsOfFile: path, encoding: .utf8)) == finalToken }
        stopReading.raise()
        let seen = await reader.value
        #expect(!seen.isEmpty)
        #expect(seen.allSatisfy { written.contains($0) }, "a reader saw a partial or foreign file")

        #expect(
            try admin.call(#"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"filed"}}"#).errorName
                == nil)
        try await Self.waitFor { !FileManager.default.fileExists(atPath: path) }
        // No leftovers beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("tokens")).isEmpty)
        try await daemon.stop()
    }

    static func waitFor(_ condition: () -> Bool, timeout: Duration = .seconds(10)) async throws {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            guard ContinuousClock.now < deadline else { throw TestFailure("condition not met within \(timeout)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
