import Foundation
import Testing

/// Every call is checked against the caller's uid and groups from the kernel.
@Suite(.serialized)
struct AuthorizationTests {
    static let nobody: UInt32 = 65534

    @Test func anotherUidIsDeniedWithPermissionDeniedAndTheDenialIsLogged() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let root = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("secret-")
        #expect(try root.call(Tokens.addCall(user: "root-only", access: access, refresh: nil)).errorName == nil)

        let reply = try await OtherUser.call(
            Tokens.tokenCall(user: "root-only"), socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
        #expect(reply.errorName == "io.tokend.TokenProvider.PermissionDenied")
        #expect(!String(describing: reply).contains(access))
        let status = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"root-only"}}"#, socket: daemon.socketPath,
            uid: Self.nobody, gid: Self.nobody)
        #expect(status.errorName == "io.tokend.TokenProvider.PermissionDenied")
        let remove = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"root-only"}}"#,
            socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
        #expect(remove.errorName == "io.tokend.TokenProvider.PermissionDenied")
        let rotate = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.RotateKey"}"#, socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
        #expect(rotate.errorName == "io.tokend.TokenProvider.PermissionDenied")
        // The list shows nothing the caller may not see.
        let list = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.Status"}"#, socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
        #expect((list.parameters["credentials"] as? [Any])?.isEmpty == true)
        // Still there for root.
        #expect(try root.call(Tokens.tokenCall(user: "root-only")).accessToken == access)
        try await Task.sleep(for: .milliseconds(100))
        #expect(daemon.log.contains("permission denied"))
        #expect(daemon.log.contains("uid=\(Self.nobody)"))
        #expect(daemon.log.contains("pid="))
        try await daemon.stop()
    }

    @Test func readersByUidAndBySupplementaryGroup() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let root = try RawClient(path: daemon.socketPath)
        let byUid = Tokens.random("uid-")
        let byGroup = Tokens.random("grp-")
        #expect(
            try root.call(Tokens.addCall(user: "for-nobody", access: byUid, refresh: nil, readers: ["uid:\(Self.nobody)"])).errorName == nil
        )
        #expect(try root.call(Tokens.addCall(user: "for-group", access: byGroup, refresh: nil, readers: ["gid:4242"])).errorName == nil)

        let mine = try await OtherUser.call(
            Tokens.tokenCall(user: "for-nobody"), socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
        #expect(mine.accessToken == byUid)
        // Group 4242 held only as a supplementary group (primary gid stays 65534).
        let viaGroup = try await OtherUser.call(
            Tokens.tokenCall(user: "for-group"), socket: daemon.socketPath, uid: 4000, gid: Self.nobody, groups: [100, 4242])
        #expect(viaGroup.accessToken == byGroup)
        let withoutGroup = try await OtherUser.call(
            Tokens.tokenCall(user: "for-group"), socket: daemon.socketPath, uid: 4000, gid: Self.nobody, groups: [100])
        #expect(withoutGroup.errorName == "io.tokend.TokenProvider.PermissionDenied")
        // Primary gid counts too.
        let viaPrimary = try await OtherUser.call(Tokens.tokenCall(user: "for-group"), socket: daemon.socketPath, uid: 4001, gid: 4242)
        #expect(viaPrimary.accessToken == byGroup)
        try await daemon.stop()
    }

    @Test func adminGroupHeldAsSupplementaryGroup() async throws {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: #"admin_groups = ["gid:4343"]"#))
        try await daemon.start()
        let call = Tokens.addCall(user: "admin-made", access: Tokens.random("adm-"), refresh: nil, readers: ["uid:1"])
        let denied = try await OtherUser.call(call, socket: daemon.socketPath, uid: 5000, gid: 5000)
        #expect(denied.errorName == "io.tokend.TokenProvider.PermissionDenied")
        let allowed = try await OtherUser.call(call, socket: daemon.socketPath, uid: 5000, gid: 5000, groups: [4343])
        #expect(allowed.errorName == nil)
        let removed = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"admin-made"}}"#,
            socket: daemon.socketPath, uid: 5000, gid: 5000, groups: [4343])
        #expect(removed.errorName == nil)
        try await daemon.stop()
    }

    @Test func selfEnrolmentIsLimitedToTheCallersOwnUid() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let own = Tokens.random("own-")
        // Readers default to the caller's own uid.
        let added = try await OtherUser.call(
            Tokens.addCall(user: "self-enrolled", access: own, refresh: nil), socket: daemon.socketPath, uid: 6000, gid: 6000)
        #expect(added.errorName == nil)
        let read = try await OtherUser.call(Tokens.tokenCall(user: "self-enrolled"), socket: daemon.socketPath, uid: 6000, gid: 6000)
        #expect(read.accessToken == own)
        // Naming anyone else as reader is an admin action.
        let widened = try await OtherUser.call(
            Tokens.addCall(user: "widened", access: Tokens.random("w-"), refresh: nil, readers: ["uid:6000", "uid:6001"]),
            socket: daemon.socketPath, uid: 6000, gid: 6000)
        #expect(widened.errorName == "io.tokend.TokenProvider.PermissionDenied")
        // Another uid may not remove it; the owner may.
        let stranger = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"self-enrolled"}}"#,
            socket: daemon.socketPath, uid: 6001, gid: 6001)
        #expect(stranger.errorName == "io.tokend.TokenProvider.PermissionDenied")
        let owner = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"self-enrolled"}}"#,
            socket: daemon.socketPath, uid: 6000, gid: 6000)
        #expect(owner.errorName == nil)
        try await daemon.stop()
    }

    @Test func selfEnrolmentCanBeTurnedOff() async throws {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: "allow_self_enrolment = false"))
        try await daemon.start()
        let added = try await OtherUser.call(
            Tokens.addCall(user: "self-enrolled", access: Tokens.random("x-"), refresh: nil), socket: daemon.socketPath, uid: 6000,
            gid: 6000)
        #expect(added.errorName == "io.tokend.TokenProvider.PermissionDenied")
        try await daemon.stop()
    }
}
