import Foundation
import Testing
import TokendTestSupport

/// Settings and requests that would do nothing are said to do nothing: at start in the journal,
/// at enrolment in the reply, and in `tokenctl`'s output.
@Suite(.serialized)
struct SilentControlTests {
    static let statusCall = #"{"method":"io.tokend.TokenProvider.Status","parameters":{}}"#

    /// `tokenctl ARGUMENTS` as root on `socket`.
    static func tokenctl(_ socket: String, _ arguments: [String], stdin: String? = nil) async throws -> CommandResult {
        try await runCommand(
            "/usr/bin/env", ["TOKEND_SOCKET=\(socket)", Repository.binary("tokenctl")] + arguments, stdin: stdin, timeout: .seconds(30))
    }

    /// The daemon's warnings in `Status`, as an administrator sees them.
    static func warnings(_ socket: String) throws -> [String] {
        let reply = try RawClient(path: socket).call(statusCall)
        return (reply.parameters["daemon"] as? [String: Any])?["warnings"] as? [String] ?? []
    }

    // MARK: socket_mode

    /// With socket activation tokend does not make the socket: a `socket_mode` that the passed
    /// socket does not have is said at start, in `Status` and by `tokenctl status`, naming
    /// `SocketMode=`. Without `socket_mode`, nothing is said.
    @Test func aSocketModeThePassedSocketDoesNotHaveIsSaid() async throws {
        let daemon = try PassedSocketsDaemon(configuration: DaemonProcess.configuration(extraDaemon: #"socket_mode = "0600""#))
        let socket = daemon.directory.file("passed.sock")
        try await daemon.start(sockets: [.init(path: socket, name: "varlink", mode: 0o666)])
        defer { _ = Task { try? await daemon.stop() } }
        #expect(daemon.log.contains("daemon.socket_mode"), "\(daemon.log)")
        let line = daemon.log.split(separator: "\n").first { $0.contains("daemon.socket_mode") }.map(String.init) ?? ""
        #expect(line.contains("0600") && line.contains("0666") && line.contains("SocketMode="), "\(line)")
        let said = try Self.warnings(socket)
        #expect(said.contains { $0.contains("socket_mode") }, "\(said)")
        let status = try await Self.tokenctl(socket, ["status"])
        #expect(status.status == 0, "\(status)")
        #expect(status.stderr.contains("warning:") && status.stderr.contains("socket_mode"), "\(status)")
        try await daemon.stop()

        let quiet = try PassedSocketsDaemon()
        let other = quiet.directory.file("passed.sock")
        try await quiet.start(sockets: [.init(path: other, name: "varlink", mode: 0o660)])
        defer { _ = Task { try? await quiet.stop() } }
        #expect(!quiet.log.contains("socket_mode"), "\(quiet.log)")
        #expect(try Self.warnings(other).isEmpty)
        try await quiet.stop()
    }

    // MARK: Program readers that can never match

    /// On a kernel without `SO_PEERPIDFD` (before 6.5, emulated with a seccomp filter), a
    /// program reader grants nothing: tokend says so when it is enrolled (in the reply and in
    /// `tokenctl add`'s output), at every start, and in `Status`. A uid reader is not mentioned.
    @Test(.enabled(if: PassedSocketsDaemon.canHidePeerPidfd, "the seccomp filter is written for x86_64"))
    func programReadersOnAKernelWithoutPeerPidfdAreSaidToGrantNothing() async throws {
        let daemon = try PassedSocketsDaemon()
        let socket = daemon.directory.file("passed.sock")
        try await daemon.start(sockets: [.init(path: socket, name: "varlink", mode: 0o666)], hidePeerPidfd: true)
        let response = #"{"access_token":"at-prog","refresh_token":"rt-prog","expires_in":3600,"token_type":"Bearer"}"#
        let added = try await Self.tokenctl(
            socket, ["add", "backup", "--provider", "example", "--reader", "uid:0+exe:/usr/bin/python3"], stdin: response)
        #expect(added.status == 0, "\(added)")
        #expect(added.stderr.contains("warning:") && added.stderr.contains("SO_PEERPIDFD"), "\(added)")
        // The filter stands for the old kernel: tokend learns no program of its callers.
        let usage = (try RawClient(path: socket).call(Self.statusCall).parameters["daemon"] as? [String: Any])?["caller"] as? [String: Any]
        #expect(usage != nil && usage?["executable"] == nil, "\(String(describing: usage))")
        let reply = try RawClient(path: socket).call(
            Tokens.addCall(user: "plain", access: Tokens.random("a-"), refresh: "r", readers: ["uid:1000"]))
        #expect(reply.errorName == nil && (reply.parameters["warnings"] as? [String] ?? []).isEmpty, "\(reply)")
        try await daemon.stop()

        let again = try PassedSocketsDaemon(directory: daemon.directory)
        try await again.start(sockets: [.init(path: socket, name: "varlink", mode: 0o666)], hidePeerPidfd: true)
        defer { _ = Task { try? await again.stop() } }
        let lines = again.log.split(separator: "\n").filter { $0.contains("SO_PEERPIDFD") }
        #expect(lines.contains { $0.contains("backup") } && !lines.contains { $0.contains("plain") }, "\(again.log)")
        let said = try Self.warnings(socket)
        #expect(said.contains { $0.contains("SO_PEERPIDFD") }, "\(said)")
        try await again.stop()
    }

    /// tokend running as a user without `CAP_SYS_PTRACE` (as the shipped unit runs it) cannot read
    /// another user's `/proc/PID/exe`: an `exe:` reader for another uid can never match, and one
    /// without a uid matches only tokend's own; both are said when enrolled. One for tokend's
    /// own uid is not mentioned.
    @Test func exeReadersTokendCannotCheckAreSaidWhenEnrolled() async throws {
        let uid: UInt32 = 65534
        let daemon = try PassedSocketsDaemon()
        #expect(chown(daemon.directory.path, uid, uid) == 0 && chown(daemon.directory.file("client-secret"), uid, uid) == 0)
        let socket = daemon.directory.file("passed.sock")
        try await daemon.start(sockets: [.init(path: socket, name: "varlink", mode: 0o666)], uid: uid)
        defer { _ = Task { try? await daemon.stop() } }
        let client = try RawClient(path: socket)
        func warnings(_ reader: String, _ user: String) throws -> [String] {
            let reply = try client.call(Tokens.addCall(user: user, access: Tokens.random("a-"), refresh: "r", readers: [reader]))
            #expect(reply.errorName == nil, "\(reply)")
            return reply.parameters["warnings"] as? [String] ?? []
        }
        let other = try warnings("uid:1000+exe:/usr/bin/python3", "other")
        #expect(other.count == 1 && other[0].contains("never") && other[0].contains("CAP_SYS_PTRACE"), "\(other)")
        let anyone = try warnings("exe:/usr/bin/python3", "anyone")
        #expect(anyone.count == 1 && anyone[0].contains("uid \(uid)"), "\(anyone)")
        #expect(try warnings("uid:\(uid)+exe:/usr/bin/python3", "own").isEmpty)
        #expect(try warnings("uid:1000+unit:backup.service", "unit").isEmpty)
        try await daemon.stop()
    }

    // MARK: Removal of tokens tokend never got from the provider

    /// `tokenctl remove` of a credential whose tokens came from `AddCredential` (tokend never
    /// refreshed it) says that nothing was revoked and how to revoke anyway; the token stays
    /// active at the IdP. `--revoke-anyway` (administrators) revokes it.
    @Test func removingACredentialTokendNeverRefreshedSaysItWasNotRevoked() async throws {
        let setup = try await IdPDaemon.start()
        let socket = setup.daemon.socketPath
        let root = try RawClient(path: socket)
        let minted = try await setup.idp.mint(count: 2)
        for (user, tokens) in zip(["leaked", "revoked"], minted) {
            let added = try root.call(
                Tokens.addCall(user: user, access: tokens["access_token"] as! String, refresh: tokens["refresh_token"] as? String))
            #expect(added.errorName == nil, "\(added)")
        }
        let removed = try await Self.tokenctl(socket, ["remove", "leaked"])
        #expect(removed.status == 0, "\(removed)")
        #expect(removed.stdout.contains("not revoked") && removed.stdout.contains("--revoke-anyway"), "\(removed)")
        #expect(try await setup.idp.postCount(path: "/o/revoke_token/") == 0)
        #expect(try await setup.idp.tokenInfo(accessToken: minted[0]["access_token"] as! String)["active"] as? Bool == true)

        let anyway = try await Self.tokenctl(socket, ["remove", "--revoke-anyway", "revoked"])
        #expect(anyway.status == 0, "\(anyway)")
        #expect(anyway.stdout.contains("revoked"), "\(anyway)")
        #expect(try await setup.idp.postCount(path: "/o/revoke_token/") == 1)
        #expect(try await setup.idp.tokenInfo(accessToken: minted[1]["access_token"] as! String)["active"] as? Bool != true)

        // Not for a user who is not an administrator, even on their own credential.
        let own = try await OtherUser.call(
            Tokens.addCall(user: "mine", access: Tokens.random("a-"), refresh: "r"), socket: socket, uid: 7400, gid: 7400)
        #expect(own.errorName == nil, "\(own)")
        let refused = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"mine","revokeAnyway":true}}"#,
            socket: socket, uid: 7400, gid: 7400)
        #expect(refused.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(refused)")
        try await setup.daemon.stop()
        await setup.idp.stop()
    }
}
