import Testing
import TokendJSON
import TokendProtocol

struct LoginMessagesTests {
    @Test func beginLoginRoundTrips() throws {
        let request = BeginLoginRequest(
            userIdentifier: "alice", provider: "idp", flow: .code, redirectPort: 8123, readers: ["uid:1"], replace: true)
        #expect(try BeginLoginRequest(json: request.json) == request)
        let minimal = BeginLoginRequest(userIdentifier: "alice", provider: "idp")
        #expect(try BeginLoginRequest(json: minimal.json) == minimal)
    }

    @Test func badFlowsAndPortsAreInvalidParameters() {
        #expect(throws: VarlinkError.invalidParameter("flow")) {
            try BeginLoginRequest(json: ["userIdentifier": .string("a"), "provider": .string("p"), "flow": .string("implicit")])
        }
        #expect(throws: VarlinkError.invalidParameter("redirectPort")) {
            try BeginLoginRequest(json: ["userIdentifier": .string("a"), "provider": .string("p"), "redirectPort": .int(70000)])
        }
    }

    @Test func challengeRoundTrips() throws {
        let challenge = LoginChallenge(
            loginID: "L", flow: .device, verificationURI: "https://i/d", userCode: "U", startedAt: 1, expiresAt: 2, interval: 5)
        #expect(try LoginChallenge(json: challenge.json) == challenge)
    }

    @Test func loginErrorsAreDeclared() {
        for name in [TokendErrorName.loginFailed, .unknownLogin] {
            #expect(TokenProviderInterface.description.contains("\nerror \(name.rawValue.split(separator: ".").last!) ("))
        }
    }
}
