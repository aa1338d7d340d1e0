import Foundation
import Testing
import TokendTestSupport

/// `tokenctl login` at a HAT PDA: the stand-in PDA (`Tests/idp/pda.py`) signs the tokens, and
/// the test plays the PDA's login page, which sends the browser to the application's redirect.
@Suite(.serialized)
struct HATLoginTests {
    struct Setup {
        let directory: ScratchDirectory
        let pda: StandInPDA
        let daemon: DaemonProcess

        static func start(redirect: String, fallback: String) async throws -> Setup {
            try requireVenv()
            let directory = try ScratchDirectory()
            let pda = StandInPDA()
            try await pda.start()
            let provider = """
                [providers.pda]
                kind = "hat"
                scheme = "http"
                address = "\(pda.address)"
                application = "\(pda.application)"
                redirect = "\(redirect)"
                fallback = "\(fallback)"
                """
            let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(providers: provider), directory: directory)
            try await daemon.start()
            return Setup(directory: directory, pda: pda, daemon: daemon)
        }

        func login(_ arguments: [String]) throws -> StreamingCommand {
            try StreamingCommand(Repository.binary("tokenctl"), ["login"] + arguments + ["--socket", daemon.socketPath])
        }

        func token(_ user: String) async throws -> CommandResult {
            try await runCommand(Repository.binary("tokenctl"), ["token", user, "--socket", daemon.socketPath])
        }

        func stop() async throws {
            try await daemon.stop()
            pda.stop()
        }
    }

    static func loopback() throws -> (redirect: String, fallback: String, port: Int) {
        let port = try FreePort.pick()
        return ("http://127.0.0.1:\(port)/hat/success", "http://127.0.0.1:\(port)/hat/failure", port)
    }

    @Test func loginThroughTheLoopbackRedirect() async throws {
        let (redirect, fallback, _) = try Self.loopback()
        let setup = try await Setup.start(redirect: redirect, fallback: fallback)
        let login = try setup.login(["bob", "--provider", "pda"])
        let url = try await login.line(after: "Open this URL in a browser to log in:")
        let encoded = { (text: String) in
            text.addingPercentEncoding(withAllowedCharacters: CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~")))!
        }
        #expect(
            url
                == "http://\(setup.pda.address)/#/hatlogin?name=\(setup.pda.application)&redirect=\(encoded(redirect))&fallback=\(encoded(fallback))"
        )
        _ = try await login.line(startingWith: "Waiting for the browser")
        let token = try await setup.pda.mint()
        let landing = try browserGet(redirect + "?token=" + token)
        #expect(landing.status == 200 && landing.body.contains("Logged in"), "\(landing) \(setup.daemon.log.suffix(1500))")
        let result = try await login.finish()
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(!result.stdout.contains(token) && !result.stderr.contains(token) && !setup.daemon.log.contains(token))
        let served = try await setup.token("bob")
        #expect(served.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == token, "\(served.stderr)")
        try await setup.stop()
    }

    @Test func loginByPastingTheRedirectURL() async throws {
        // A registered https redirect: nothing to listen on, the user pastes the final URL.
        let setup = try await Setup.start(redirect: "https://app.example/hat/success", fallback: "https://app.example/hat/failure")
        let login = try setup.login(["bob", "--provider", "pda"])
        _ = try await login.line(after: "Open this URL in a browser to log in:")
        let token = try await setup.pda.mint()
        login.write("https://app.example/hat/success?token=\(token)\n")
        let result = try await login.finish()
        #expect(result.status == 0, "\(result.stdout) \(result.stderr) \(setup.daemon.log.suffix(1500))")
        #expect(try await setup.token("bob").stdout.contains(token))
        try await setup.stop()
    }

    @Test func aRedirectToTheFallbackIsAFailedLogin() async throws {
        let (redirect, fallback, _) = try Self.loopback()
        let setup = try await Setup.start(redirect: redirect, fallback: fallback)
        let login = try setup.login(["bob", "--provider", "pda"])
        _ = try await login.line(startingWith: "Waiting for the browser")
        let landing = try browserGet(fallback + "?error=access_denied")
        #expect(landing.status == 400)
        let result = try await login.finish()
        #expect(result.status == 12 && result.stderr.contains("fallback URL"), "\(result.stderr)")
        #expect(try await setup.token("bob").status == 4, "nothing was stored")
        try await setup.stop()
    }

    @Test func aTokenThatFailsVerificationIsNotStored() async throws {
        // The login stores through AddCredential's path, which verifies HAT tokens.
        let setup = try await Setup.start(redirect: "https://app.example/hat/success", fallback: "https://app.example/hat/failure")
        let login = try setup.login(["bob", "--provider", "pda"])
        _ = try await login.line(after: "Open this URL in a browser to log in:")
        let forged = try await setup.pda.mint(alg: "RS256-wrong-key")
        login.write("https://app.example/hat/success?token=\(forged)\n")
        let result = try await login.finish()
        #expect(result.status == 11, "\(result.stdout) \(result.stderr)")
        #expect(!result.stderr.contains(forged))
        #expect(try await setup.token("bob").status == 4, "nothing was stored")
        try await setup.stop()
    }

    @Test func aTokenFromBeforeTheLoginIsRefused() async throws {
        let setup = try await Setup.start(redirect: "https://app.example/hat/success", fallback: "https://app.example/hat/failure")
        let login = try setup.login(["bob", "--provider", "pda"])
        _ = try await login.line(after: "Open this URL in a browser to log in:")
        let old = Int(Date().timeIntervalSince1970) - 3600
        let token = try await setup.pda.mint(iat: old, exp: old + 30 * 86400)
        login.write("https://app.example/hat/success?token=\(token)\n")
        let result = try await login.finish()
        #expect(result.status == 12 && result.stderr.contains("issued before this login began"), "\(result.stderr)")
        try await setup.stop()
    }
}
