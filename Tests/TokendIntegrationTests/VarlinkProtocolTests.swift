import Foundation
import Testing

/// The daemon's Varlink surface over raw bytes: introspection, errors for bad input, ordering.
@Suite(.serialized)
struct VarlinkProtocolTests {
    @Test func getInfoListsBothInterfaces() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let reply = try client.call(#"{"method":"org.varlink.service.GetInfo"}"#)
        #expect(reply.errorName == nil)
        let interfaces = reply.parameters["interfaces"] as? [String] ?? []
        #expect(interfaces.contains("io.tokend.TokenProvider"))
        #expect(interfaces.contains("org.varlink.service"))
        #expect(reply.parameters["product"] as? String == "tokend")
        try await daemon.stop()
    }

    @Test func interfaceDescriptionIsTheRepositoryFile() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let reply = try client.call(
            #"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"io.tokend.TokenProvider"}}"#)
        let file = try String(contentsOfFile: Repository.root + "/interfaces/io.tokend.TokenProvider.varlink", encoding: .utf8)
        #expect(reply.parameters["description"] as? String == file)
        let service = try client.call(
            #"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"org.varlink.service"}}"#)
        #expect((service.parameters["description"] as? String)?.contains("interface org.varlink.service") == true)
        let missing = try client.call(
            #"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"com.example.Nope"}}"#)
        #expect(missing.errorName == "org.varlink.service.InterfaceNotFound")
        try await daemon.stop()
    }

    @Test func badCallsGetTypedErrorsAndTheConnectionKeepsWorking() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let cases: [(String, String)] = [
            (#"{"method":"io.tokend.TokenProvider.Nope"}"#, "org.varlink.service.MethodNotFound"),
            (#"{"method":"com.example.Other.Method"}"#, "org.varlink.service.InterfaceNotFound"),
            (
                #"{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{"userIdentifier":42}}"#,
                "org.varlink.service.InvalidParameter"
            ),
            (#"{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{}}"#, "org.varlink.service.InvalidParameter"),
            (
                #"{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{"userIdentifier":"a","minValidSeconds":"x"}}"#,
                "org.varlink.service.InvalidParameter"
            ),
            (
                #"{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{"userIdentifier":"nobody-here"}}"#,
                "io.tokend.TokenProvider.UnknownUser"
            ),
            (
                #"{"method":"io.tokend.TokenProvider.AddCredential","parameters":{"userIdentifier":"x","provider":"p"}}"#,
                "org.varlink.service.InvalidParameter"
            ),
            (#"not json at all"#, "io.tokend.TokenProvider.InvalidMessage"),
            (#"[1,2,3]"#, "io.tokend.TokenProvider.InvalidMessage"),
            (#"{"parameters":{}}"#, "io.tokend.TokenProvider.InvalidMessage"),
            (#"{"method":"io.tokend.TokenProvider.Status","more":"yes"}"#, "io.tokend.TokenProvider.InvalidMessage"),
            (String(repeating: "[", count: 200) + String(repeating: "]", count: 200), "io.tokend.TokenProvider.InvalidMessage"),
        ]
        for (message, expected) in cases {
            let reply = try client.call(message)
            #expect(reply.errorName == expected, "\(message)")
        }
        // Invalid UTF-8 inside a string.
        try client.send(
            Array(#"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":""#.utf8) + [0xC3, 0x28] + Array(#""}}"#.utf8)
                + [0])
        let utf8Reply = try RawClient.object(try #require(try client.receive()))
        #expect(utf8Reply.errorName == "io.tokend.TokenProvider.InvalidMessage")
        // Still served after all of that.
        let info = try client.call(#"{"method":"org.varlink.service.GetInfo"}"#)
        #expect(info.errorName == nil)
        try await daemon.stop()
    }

    @Test func oversizedMessageIsRefusedAndClosedWhileOthersAreServed() async throws {
        let daemon = try DaemonProcess()  // max_message_bytes = 4096
        try await daemon.start()
        let bystander = try RawClient(path: daemon.socketPath)
        let abuser = try RawClient(path: daemon.socketPath)
        try abuser.send(String(repeating: "x", count: 10_000), terminate: false)
        let reply = try RawClient.object(try #require(try abuser.receive()))
        #expect(reply.errorName == "io.tokend.TokenProvider.InvalidMessage")
        #expect(try abuser.receive() == nil, "the connection is closed after an oversized message")
        #expect(try bystander.call(#"{"method":"org.varlink.service.GetInfo"}"#).errorName == nil)
        try await daemon.stop()
    }

    @Test func pipelinedCallsAreAnsweredInOrderEvenWhenAnEarlierOneWaits() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        // AddCredential waits for a durable store write; the calls after it could be answered at once.
        let access = Tokens.random("acc-")
        var batch = Tokens.addCall(user: "pipelined", access: access, refresh: Tokens.random("ref-")) + "\0"
        batch += #"{"method":"org.varlink.service.GetInfo"}"# + "\0"
        batch += Tokens.tokenCall(user: "pipelined") + "\0"
        batch += #"{"method":"io.tokend.TokenProvider.Nope"}"# + "\0"
        try client.send(Array(batch.utf8))
        let first = try RawClient.object(try #require(try client.receive()))
        let second = try RawClient.object(try #require(try client.receive()))
        let third = try RawClient.object(try #require(try client.receive()))
        let fourth = try RawClient.object(try #require(try client.receive()))
        #expect(first.errorName == nil && first.parameters.isEmpty, "AddCredential's empty reply comes first")
        #expect(second.parameters["interfaces"] != nil, "then GetInfo")
        #expect(third.accessToken == access, "then the token added by the first call")
        #expect(fourth.errorName == "org.varlink.service.MethodNotFound")
        try await daemon.stop()
    }

    @Test func onewayCallsGetNoReply() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        try client.send(#"{"method":"org.varlink.service.GetInfo","oneway":true}"#)
        try client.send(#"{"method":"io.tokend.TokenProvider.Nope","oneway":true}"#)
        let reply = try client.call(#"{"method":"io.tokend.TokenProvider.Status"}"#)
        #expect(reply.parameters["daemon"] != nil, "the first reply on the wire belongs to the first non-oneway call")
        try await daemon.stop()
    }

    @Test func statusStreamsWithMore() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        for i in 0..<250 {
            let reply = try client.call(Tokens.addCall(user: "user-\(i)", access: Tokens.random("a\(i)-"), refresh: nil))
            #expect(reply.errorName == nil)
        }
        try client.send(#"{"method":"io.tokend.TokenProvider.Status","more":true}"#)
        var users: [String] = []
        var sawDaemon = false
        while true {
            let reply = try RawClient.object(try #require(try client.receive()))
            if reply.parameters["daemon"] != nil { sawDaemon = true }
            for credential in reply.parameters["credentials"] as? [[String: Any]] ?? [] {
                users.append(credential["userIdentifier"] as? String ?? "")
                #expect(credential["accessToken"] == nil && credential["refreshToken"] == nil)
            }
            if reply["continues"] as? Bool != true { break }
        }
        #expect(sawDaemon)
        #expect(users.count == 250)
        #expect(Set(users).count == 250)
        try await daemon.stop()
    }

    @Test func clientsThatVanishOrNeverReadDoNotHurtOthers() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        // Half a message, then gone.
        do {
            let quitter = try RawClient(path: daemon.socketPath)
            try quitter.send(#"{"method":"org.varlink.serv"#, terminate: false)
        }
        // Pipelines thousands of calls and never reads a reply.
        let hog = try RawClient(path: daemon.socketPath)
        let call = Array(
            (#"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"io.tokend.TokenProvider"}}"# + "\0").utf8)
        var flags = fcntl(hog.fd, F_GETFL)
        flags |= O_NONBLOCK
        _ = fcntl(hog.fd, F_SETFL, flags)
        var sent = 0
        for _ in 0..<20_000 {
            let n = call.withUnsafeBytes { Glibc.send(hog.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }  // the daemon stopped reading from us: back-pressure works
            sent += 1
        }
        #expect(sent < 20_000, "the daemon should stop reading from a client that never reads")
        let bystander = try RawClient(path: daemon.socketPath)
        #expect(try bystander.call(#"{"method":"org.varlink.service.GetInfo"}"#).errorName == nil)
        #expect(daemon.process.isRunning)
        try await daemon.stop()
    }

    @Test func connectionsBeyondTheLimitAreRefusedWithTheReason() async throws {
        let daemon = try DaemonProcess(
            configuration: DaemonProcess.configuration().replacingOccurrences(of: "max_connections = 64", with: "max_connections = 4"))
        try await daemon.start()
        // The start-up probe's connection holds a slot until the daemon sees it close.
        try await Task.sleep(for: .milliseconds(500))
        var open: [RawClient] = []
        for _ in 0..<4 { open.append(try RawClient(path: daemon.socketPath)) }
        for client in open { #expect(try client.call(#"{"method":"org.varlink.service.GetInfo"}"#).errorName == nil) }
        let extra = try RawClient(path: daemon.socketPath)
        try? extra.send(#"{"method":"org.varlink.service.GetInfo"}"#)
        // Root is not limited per uid, but nobody passes max_connections: the fifth connection
        // gets the reason, then the end of the stream.
        let refusal = try #require(try extra.receive(), "the fifth connection is told why")
        let reply = try RawClient.object(refusal)
        #expect(reply.errorName == "io.tokend.TokenProvider.QuotaExceeded", "\(refusal)")
        #expect(reply.parameters["quota"] as? String == "connections" && reply.parameters["limit"] as? Int == 4, "\(refusal)")
        #expect((try? extra.receive()) ?? nil == nil, "then it is closed")
        open.removeLast()
        // The daemon notices the closed connection asynchronously; poll (bounded) for the slot.
        var served = false
        let deadline = ContinuousClock.now + .seconds(10)
        while !served, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            if let again = try? RawClient(path: daemon.socketPath),
                let reply = try? again.call(#"{"method":"org.varlink.service.GetInfo"}"#)
            {
                served = reply.errorName == nil
            }
        }
        #expect(served, "a slot freed up")
        #expect(daemon.log.contains("connection limit reached"))
        try await daemon.stop()
    }
}
