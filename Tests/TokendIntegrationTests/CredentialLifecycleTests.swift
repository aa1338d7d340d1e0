import Foundation
import Testing

/// Adding, serving, persisting and removing credentials through the real daemon.
@Suite(.serialized)
struct CredentialLifecycleTests {
    @Test func addServeRestartRemove() async throws {
        let directory = try ScratchDirectory()
        var daemon = try DaemonProcess(directory: directory)
        try await daemon.start()
        var client = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("acc-")
        let refresh = Tokens.random("ref-")
        #expect(try client.call(Tokens.addCall(user: "alice", access: access, refresh: refresh, expiresIn: 3600)).errorName == nil)
        let served = try client.call(Tokens.tokenCall(user: "alice", minValid: 60))
        #expect(served.accessToken == access)
        let credentials = served.parameters["credentials"] as? [String: Any] ?? [:]
        let expiresAt = credentials["expiresAt"] as? Int ?? 0
        let now = Int(Date().timeIntervalSince1970)
        #expect(abs(expiresAt - (now + 3600)) <= 5)
        #expect(credentials["tokenType"] as? String == "Bearer")
        #expect(credentials["refreshToken"] == nil)

        // Adding again without replace is refused; with replace it succeeds.
        #expect(
            try client.call(Tokens.addCall(user: "alice", access: Tokens.random("x-"), refresh: nil)).errorName
                == "io.tokend.TokenProvider.CredentialExists")
        #expect(
            try client.call(Tokens.addCall(user: "bob", access: "tok", refresh: nil, provider: "missing")).errorName
                == "io.tokend.TokenProvider.UnknownProvider")

        // Durable: a restarted daemon serves the same token.
        try await daemon.stop()
        daemon = try DaemonProcess(configuration: DaemonProcess.configuration(), directory: directory)
        try await daemon.start()
        client = try RawClient(path: daemon.socketPath)
        #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken == access)

        #expect(
            try client.call(#"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"alice"}}"#).errorName
                == nil)
        #expect(try client.call(Tokens.tokenCall(user: "alice")).errorName == "io.tokend.TokenProvider.UnknownUser")
        #expect(
            try client.call(#"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"alice"}}"#).errorName
                == "io.tokend.TokenProvider.UnknownUser")
        try await daemon.stop()
    }

    @Test func tooShortLivedTokensGetRefreshFailedNotAHang() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        #expect(try client.call(Tokens.addCall(user: "short", access: Tokens.random("s-"), refresh: nil, expiresIn: 30)).errorName == nil)
        #expect(try client.call(Tokens.tokenCall(user: "short", minValid: 10)).accessToken != nil)
        let started = ContinuousClock.now
        let reply = try client.call(Tokens.tokenCall(user: "short", minValid: 600))
        #expect(reply.errorName == "io.tokend.TokenProvider.RefreshFailed")
        #expect(ContinuousClock.now - started < .seconds(5))
        // Already expired when added: never served.
        #expect(try client.call(Tokens.addCall(user: "dead", access: Tokens.random("d-"), refresh: nil, expiresIn: 0)).errorName == nil)
        #expect(try client.call(Tokens.tokenCall(user: "dead")).errorName == "io.tokend.TokenProvider.RefreshFailed")
        try await daemon.stop()
    }

    @Test func jwtIatAndMaxTokenAgeCapTheDeadline() async throws {
        // max_token_age = 1h: a JWT issued 50 minutes ago with a 1-day exp is served for 10 more minutes at most.
        let providers = DaemonProcess.defaultProviders + "\nmax_token_age = \"1h\"\n"
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(providers: providers))
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let now = Int(Date().timeIntervalSince1970)
        let jwt = makeUnsignedJWT(["sub": "carol", "iat": now - 3000, "exp": now + 86400])
        #expect(try client.call(Tokens.addCall(user: "carol", access: jwt, refresh: nil, expiresIn: 86400)).errorName == nil)
        let reply = try client.call(Tokens.tokenCall(user: "carol"))
        let credentials = reply.parameters["credentials"] as? [String: Any] ?? [:]
        #expect(credentials["issuedAt"] as? Int == now - 3000)
        #expect(credentials["expiresAt"] as? Int == now - 3000 + 3600)
        #expect(try client.call(Tokens.tokenCall(user: "carol", minValid: 900)).errorName == "io.tokend.TokenProvider.RefreshFailed")
        try await daemon.stop()
    }

    @Test func invalidTokensAreRefused() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        #expect(
            try client.call(Tokens.addCall(user: "empty", access: "", refresh: nil)).errorName
                == "io.tokend.TokenProvider.InvalidCredential")
        #expect(
            try client.call(Tokens.addCall(user: "ctl", access: "a\u{1}b", refresh: nil)).errorName
                == "io.tokend.TokenProvider.InvalidCredential")
        let noLifetime =
            #"{"method":"io.tokend.TokenProvider.AddCredential","parameters":{"userIdentifier":"n","provider":"example","accessToken":"opaque"}}"#
        #expect(try client.call(noLifetime).errorName == "io.tokend.TokenProvider.InvalidCredential")
        #expect(
            try client.call(Tokens.addCall(user: "bad name", access: "x", refresh: nil)).errorName == "org.varlink.service.InvalidParameter"
        )
        #expect(
            try client.call(Tokens.addCall(user: "r", access: "x", refresh: nil, readers: ["someone"])).errorName
                == "org.varlink.service.InvalidParameter")
        try await daemon.stop()
    }
}

func makeUnsignedJWT(_ claims: [String: Any]) -> String {
    func encode(_ object: [String: Any]) -> String {
        let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
    return encode(["alg": "RS256", "typ": "JWT"]) + "." + encode(claims) + ".c2lnbmF0dXJl"
}
