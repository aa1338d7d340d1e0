import Foundation
import Testing

/// Every method, called by another uid, another gid and through a supplementary group (issue 8,
/// point 5), and what a passed connection carries: the identity of the process that connected.
@Suite(.serialized)
struct AuthorizationMatrixTests {
    /// The credential `shared` is read by uid 7100 and by group 7200.
    static let readerUid: UInt32 = 7100, readerGid: UInt32 = 7200, outsider: UInt32 = 7300, otherGid: UInt32 = 7999

    static func calls(for user: String) -> [(method: String, json: String)] {
        [
            ("ProvideTokenReplacement", Tokens.tokenCall(user: user)),
            ("Watch", #"{"method":"io.tokend.TokenProvider.Watch","parameters":{"userIdentifier":"\#(user)"},"more":true}"#),
            ("Status", #"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"\#(user)"}}"#),
        ]
    }

    static func manageCalls(for user: String) -> [(method: String, json: String)] {
        var calls: [(method: String, json: String)] = [
            ("AddCredential(replace)", Self.replacing(Tokens.addCall(user: user, access: Tokens.random("steal-"), refresh: nil))),
            ("AddCredential", Tokens.addCall(user: user, access: Tokens.random("steal-"), refresh: nil)),
            ("RemoveCredential", #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"\#(user)"}}"#),
            ("RotateKey", #"{"method":"io.tokend.TokenProvider.RotateKey"}"#),
        ]
        calls.append(
            (
                "BeginLogin(replace)",
                #"{"method":"io.tokend.TokenProvider.BeginLogin","parameters":{"userIdentifier":"\#(user)","provider":"example","flow":"code","redirectPort":40000,"replace":true}}"#
            ))
        calls.append(
            (
                "BeginLogin",
                #"{"method":"io.tokend.TokenProvider.BeginLogin","parameters":{"userIdentifier":"\#(user)","provider":"example","flow":"code","redirectPort":40000}}"#
            ))
        return calls
    }

    /// `call` with `"replace": true` among its parameters.
    static func replacing(_ call: String) -> String {
        var object = try! JSONSerialization.jsonObject(with: Data(call.utf8)) as! [String: Any]
        var parameters = object["parameters"] as! [String: Any]
        parameters["replace"] = true
        object["parameters"] = parameters
        return String(decoding: try! JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    /// A daemon with one credential, `shared`, that root added for the reader uid and the
    /// reader group: the daemon, root's connection and the access token.
    static func daemonSharing(refresh: String?) async throws -> (DaemonProcess, RawClient, String) {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let root = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("shared-")
        let added = try root.call(
            Tokens.addCall(user: "shared", access: access, refresh: refresh, readers: ["uid:\(readerUid)", "gid:\(readerGid)"]))
        #expect(added.errorName == nil, "\(added)")
        return (daemon, root, access)
    }

    @Test func everyMethodForAnotherUidAndGidIsPermissionDenied() async throws {
        let (daemon, root, access) = try await Self.daemonSharing(refresh: Tokens.random("r-"))

        // Callers that are neither the reader uid nor in the reader group, by primary or
        // supplementary group: another uid, another primary gid, other supplementary groups.
        let strangers: [(uid: UInt32, gid: UInt32, groups: [UInt32])] = [
            (Self.outsider, Self.outsider, []),
            (Self.outsider, Self.otherGid, [Self.otherGid - 1]),
            (Self.readerUid + 1, Self.readerGid + 1, [Self.readerGid - 1, Self.otherGid]),
        ]
        for stranger in strangers {
            for (method, json) in Self.calls(for: "shared") + Self.manageCalls(for: "shared") {
                let reply = try await OtherUser.call(
                    json, socket: daemon.socketPath, uid: stranger.uid, gid: stranger.gid, groups: stranger.groups)
                #expect(reply.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(method) as \(stranger): \(reply)")
                #expect(!String(describing: reply).contains(access), "\(method) leaked the token")
            }
            let list = try await OtherUser.call(
                #"{"method":"io.tokend.TokenProvider.Status"}"#, socket: daemon.socketPath, uid: stranger.uid, gid: stranger.gid,
                groups: stranger.groups)
            #expect((list.parameters["credentials"] as? [Any])?.isEmpty == true, "the list hides it from \(stranger)")
        }
        // Nothing the strangers tried changed the credential.
        #expect(try root.call(Tokens.addCall(user: "probe", access: Tokens.random("p-"), refresh: nil)).errorName == nil)
        let status = try root.call(#"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"shared"}}"#)
        #expect((status.parameters["credentials"] as? [[String: Any]])?.count == 1)
        let reader = try await OtherUser.call(
            Tokens.tokenCall(user: "shared"), socket: daemon.socketPath, uid: Self.readerUid, gid: Self.otherGid)
        #expect(reader.accessToken == access, "the credential is unchanged: \(reader)")
        try await daemon.stop()
    }

    /// Every method that names a credential, for a caller that may not use it: the answer for
    /// someone else's credential and for one that does not exist is the same, error name and
    /// parameters alike (the name asked for aside), so it tells nothing about what exists.
    /// (`AddCredential` and `BeginLogin` are left out: adding under a free name succeeds.)
    static func namedCalls(for user: String) -> [(method: String, json: String)] {
        let dpop =
            #"{"method":"io.tokend.TokenProvider.ProvideDPoPProof","parameters":{"userIdentifier":"\#(user)","httpMethod":"GET","httpUri":"https://api.example/x"}}"#
        return calls(for: user) + [
            ("ProvideTokenReplacement(minValid)", Tokens.tokenCall(user: user, minValid: 7200)),
            ("ProvideTokenReplacement(rejected)", Tokens.tokenCall(user: user, rejected: "old")),
            ("ProvideTokenReplacement(scope)", Tokens.tokenCall(user: user, scope: "read")),
            ("ProvideDPoPProof", dpop),
            ("RemoveCredential", #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"\#(user)"}}"#),
        ]
    }

    @Test func aMissingCredentialAndSomeoneElsesGetTheSameAnswerOnEveryMethod() async throws {
        let (daemon, _, _) = try await Self.daemonSharing(refresh: Tokens.random("r-"))
        func normalized(_ reply: [String: Any], _ user: String) -> String {
            var parameters = reply.parameters
            if parameters["userIdentifier"] as? String == user { parameters["userIdentifier"] = "NAME" }
            let data = try! JSONSerialization.data(withJSONObject: parameters, options: [.sortedKeys])
            return "\(reply.errorName ?? "no error") \(String(decoding: data, as: UTF8.self))"
        }
        for ((method, existing), (_, missing)) in zip(Self.namedCalls(for: "shared"), Self.namedCalls(for: "missing")) {
            let someoneElses = try await OtherUser.call(existing, socket: daemon.socketPath, uid: Self.outsider, gid: Self.outsider)
            let absent = try await OtherUser.call(missing, socket: daemon.socketPath, uid: Self.outsider, gid: Self.outsider)
            #expect(someoneElses.errorName != nil, "\(method): \(someoneElses)")
            #expect(normalized(someoneElses, "shared") == normalized(absent, "missing"), "\(method)")
        }
        try await daemon.stop()
    }

    @Test func readersByUidPrimaryGidAndSupplementaryGroupMayReadButNotManage() async throws {
        let (daemon, root, access) = try await Self.daemonSharing(refresh: nil)
        let readers: [(uid: UInt32, gid: UInt32, groups: [UInt32])] = [
            (Self.readerUid, Self.otherGid, []),  // by uid
            (Self.outsider, Self.readerGid, []),  // by primary gid
            (Self.outsider, Self.otherGid, [100, Self.readerGid]),  // by supplementary group
        ]
        for reader in readers {
            let token = try await OtherUser.call(
                Tokens.tokenCall(user: "shared"), socket: daemon.socketPath, uid: reader.uid, gid: reader.gid, groups: reader.groups)
            #expect(token.accessToken == access, "ProvideTokenReplacement as \(reader): \(token)")
            let watch = try await OtherUser.call(
                Self.calls(for: "shared")[1].json, socket: daemon.socketPath, uid: reader.uid, gid: reader.gid, groups: reader.groups)
            #expect(
                (watch.parameters["credentials"] as? [String: Any])?["accessToken"] as? String == access, "Watch as \(reader): \(watch)")
            let status = try await OtherUser.call(
                Self.calls(for: "shared")[2].json, socket: daemon.socketPath, uid: reader.uid, gid: reader.gid, groups: reader.groups)
            #expect((status.parameters["credentials"] as? [Any])?.count == 1, "Status as \(reader): \(status)")
            // Reading is not managing: a credential shared with a group is an administrator's.
            for (method, json) in Self.manageCalls(for: "shared") {
                let reply = try await OtherUser.call(
                    json, socket: daemon.socketPath, uid: reader.uid, gid: reader.gid, groups: reader.groups)
                #expect(reply.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(method) as \(reader): \(reply)")
            }
        }
        #expect(try root.call(Tokens.tokenCall(user: "probe-missing")).errorName == "io.tokend.TokenProvider.UnknownUser")
        try await daemon.stop()
    }

    /// A connection's identity is the one the kernel recorded at `connect()` (`SO_PEERCRED`):
    /// a connection opened by root and kept after the process drops to uid 65534 still acts as
    /// root, and a connection opened by uid 65534 and passed to a root process (`SCM_RIGHTS`)
    /// still acts as 65534, even after the process that opened it has exited (its pid may be
    /// reused: tokend never looks a pid up).
    @Test func aPassedConnectionKeepsTheIdentityOfTheProcessThatConnected() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let root = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("root-")
        #expect(try root.call(Tokens.addCall(user: "root-only", access: access, refresh: nil)).errorName == nil)
        let script = #"""
            import json, os, socket, sys
            path, call = sys.argv[1], sys.argv[2].encode()
            \#(OtherUser.pythonExchange)
            def ask(s):
                return json.loads(exchange(s, call) or b"{}")
            def connect():
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(10)
                s.connect(path)
                return s
            out = {}
            # 1. A connection opened by a child running as 65534, passed to this root process.
            parent_end, child_end = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
                s = connect()
                socket.send_fds(child_end, [b"x"], [s.fileno()])
                os._exit(0)
            _, fds, _, _ = socket.recv_fds(parent_end, 1, 1)
            os.waitpid(pid, 0)  # the connecting process is gone; its pid is free for reuse
            passed = socket.socket(fileno=fds[0])
            passed.settimeout(10)  # the descriptor arrives non-blocking, as the child left it
            out["passedToRoot"] = ask(passed)
            out["rootOwn"] = ask(connect())
            # 2. A connection opened as root, kept after dropping to 65534.
            kept = connect()
            os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
            out["keptAfterDrop"] = ask(kept)
            out["newAfterDrop"] = ask(connect())
            print(json.dumps(out))
            """#
        let result = try await runCommand("/usr/bin/python3", ["-c", script, daemon.socketPath, Tokens.tokenCall(user: "root-only")])
        #expect(result.status == 0, "\(result.stderr)")
        let out = try RawClient.object(result.stdout)
        func error(_ key: String) -> String? { (out[key] as? [String: Any])?["error"] as? String }
        func token(_ key: String) -> String? {
            ((out[key] as? [String: Any])?["parameters"] as? [String: Any]).flatMap {
                ($0["credentials"] as? [String: Any])?["accessToken"] as? String
            }
        }
        #expect(
            error("passedToRoot") == "io.tokend.TokenProvider.PermissionDenied",
            "a passed descriptor does not gain the receiver's rights: \(out)")
        #expect(token("rootOwn") == access)
        #expect(token("keptAfterDrop") == access, "the connection keeps its connect-time identity: \(out)")
        #expect(error("newAfterDrop") == "io.tokend.TokenProvider.PermissionDenied")
        try await daemon.stop()
    }
}
