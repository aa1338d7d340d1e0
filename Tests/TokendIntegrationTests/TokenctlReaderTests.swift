import Foundation
import Testing
import TokendTestSupport

/// `tokenctl --reader` parses with the daemon's grammar (`Reader`): `gid:N` goes through (it was
/// once refused by tokenctl alone), the canonical form is what the daemon stores, and a bad
/// reader is refused before any call with a one-line message naming `--reader`.
@Suite struct TokenctlReaderTests {
    @Test func gidReadersGoThroughAndAreStoredCanonically() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let gid = getgid()
        let added = try await runCommand(
            Repository.binary("tokenctl"),
            ["add", "--socket", daemon.socketPath, "alice", "--provider", "example", "--reader", "gid:\(gid)", "--reader", "uid:0042"],
            stdin: #"{"access_token":"reader-test-token","expires_in":3600}"#
        )
        #expect(added.status == 0, "\(added.stderr)")
        let client = try RawClient(path: daemon.socketPath)
        let reply = try client.call(#"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"alice"}}"#)
        let credentials = (reply["parameters"] as? [String: Any])?["credentials"] as? [[String: Any]]
        #expect(credentials?.first?["readers"] as? [String] == ["gid:\(gid)", "uid:42"], "\(reply)")
        _ = try await daemon.stop()
    }

    @Test(arguments: ["gid:-1", "uid:4294967295", "role:admin", "user:a b", "group:"])
    func aBadReaderIsRefusedBeforeAnyCall(reader: String) async throws {
        let socket = try ScratchDirectory().file("no-daemon.sock")  // nothing listens: no call is made
        let result = try await runCommand(
            Repository.binary("tokenctl"), ["add", "--socket", socket, "alice", "--provider", "example", "--reader", reader],
            stdin: #"{"access_token":"x"}"#
        )
        #expect(result.status == 2, "\(result)")
        let first = result.stderr.split(separator: "\n").first.map(String.init) ?? ""
        #expect(first.hasPrefix("Error: --reader: reader '"), "\(result.stderr)")
        #expect(!result.stderr.contains("not running"), "refused before connecting: \(result.stderr)")
    }
}
