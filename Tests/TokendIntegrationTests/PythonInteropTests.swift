import Foundation
import Testing

/// The daemon driven by the `varlink` package from PyPI, a client this project did not write.
@Suite(.serialized)
struct PythonInteropTests {
    @Test func thePyPIVarlinkClientSpeaksToTokend() async throws {
        try requireVenv()
        let daemon = try DaemonProcess()
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        let token = Tokens.random("py-")
        #expect(try admin.call(Tokens.addCall(user: "py", access: token, refresh: nil)).errorName == nil)
        let result = try await runCommand(
            IdentityProvider.python, [Repository.root + "/Tests/interop/varlink_interop.py", daemon.socketPath, "py"], timeout: .seconds(60)
        )
        try #require(result.status == 0, "\(result.stderr)")
        let output = try RawClient.object(result.stdout)
        let info = output["info"] as? [String: Any] ?? [:]
        #expect(info["product"] as? String == "tokend")
        #expect((info["interfaces"] as? [String])?.contains("io.tokend.TokenProvider") == true)
        let interface = output["interface"] as? [String: Any] ?? [:]
        #expect(interface["name"] as? String == "io.tokend.TokenProvider")
        #expect((interface["methods"] as? [String])?.contains("Watch") == true)
        #expect(output["token"] as? String == token)
        let error = output["error"] as? [String: Any] ?? [:]
        #expect(error["name"] as? String == "io.tokend.TokenProvider.UnknownUser")
        let watched = output["watch"] as? [String] ?? []
        #expect(watched.count == 2, "\(output)")
        #expect(watched.first == token)
        #expect(watched.last == output["replacedWith"] as? String)
        try await daemon.stop()
    }
}
