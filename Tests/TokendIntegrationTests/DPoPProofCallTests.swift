import Foundation
import Testing
import TokendTestSupport

/// `ProvideDPoPProof` against the real daemon, without a provider: a credential added for a
/// provider with `dpop = true` gets a key at enrolment; proofs are made with it, checked here
/// claim by claim; callers are authorised as for tokens; bad requests get typed errors; the key
/// is sealed in the store, survives a restart and a key rotation, and goes with the credential.
@Suite(.serialized)
struct DPoPProofCallTests {
    static let providers =
        DaemonProcess.defaultProviders + "\ndpop = true\ndpop_bind_on_refresh = true\n\n" + """
            [providers.plain]
            kind = "oauth2"
            token_endpoint = "http://127.0.0.1:9/o/token/"
            client_id = "tokend-test"
            client_secret_file = "client-secret"
            """

    /// A daemon holding `alice` (DPoP-bound, reader uid 7100 too) and `bob` (bearer).
    static func start(extra: String = "") async throws -> (DaemonProcess, RawClient, aliceToken: String) {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(providers: providers) + extra)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let token = Tokens.random("dpop-at-")
        for (user, provider, type, readers) in [
            ("alice", "example", "DPoP", ["uid:0", "uid:7100"]), ("bob", "plain", "Bearer", ["uid:0"]),
        ] {
            let reply = try client.call(
                call(
                    "AddCredential",
                    [
                        "userIdentifier": user, "provider": provider, "accessToken": user == "alice" ? token : Tokens.random("at-"),
                        "refreshToken": Tokens.random("rt-"), "tokenType": type, "expiresIn": 3600, "readers": readers,
                    ]))
            try #require(reply.errorName == nil, "\(reply)")
        }
        return (daemon, client, token)
    }

    static func call(_ method: String, _ parameters: [String: Any]) -> String {
        let call: [String: Any] = ["method": "io.tokend.TokenProvider.\(method)", "parameters": parameters]
        return String(decoding: try! JSONSerialization.data(withJSONObject: call), as: UTF8.self)
    }

    static func proofCall(
        _ user: String = "alice", method: String = "GET", uri: String = "https://api.example/items?page=2", nonce: String? = nil
    )
        -> String
    {
        var parameters: [String: Any] = ["userIdentifier": user, "httpMethod": method, "httpUri": uri]
        if let nonce { parameters["nonce"] = nonce }
        return call("ProvideDPoPProof", parameters)
    }

    /// The proof's header and claims, with the SHA-256 of `token` (base64url) and the RFC 7638
    /// thumbprint of the header's key, computed independently of tokend.
    static func inspect(_ proof: String, token: String) async throws -> [String: Any] {
        let script = """
            import base64, hashlib, json, sys
            proof, token = sys.stdin.read().split("\\n")[:2]
            def part(text): return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            header, claims = part(proof.split(".")[0]), part(proof.split(".")[1])
            b64 = lambda data: base64.urlsafe_b64encode(data).rstrip(b"=").decode()
            jwk = header["jwk"]
            canonical = json.dumps({"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"], "y": jwk["y"]}, separators=(",", ":"), sort_keys=True)
            print(json.dumps({"header": header, "claims": claims, "ath": b64(hashlib.sha256(token.encode()).digest()),
                              "jkt": b64(hashlib.sha256(canonical.encode()).digest()), "parts": len(proof.split("."))}))
            """
        let result = try await runCommand("/usr/bin/python3", ["-c", script], stdin: proof + "\n" + token + "\n")
        try #require(result.status == 0, "\(result.stderr)")
        return try RawClient.object(result.stdout)
    }

    /// How many rows of the SQLite store at `path` hold a DPoP key.
    static func keysStored(_ path: String) async throws -> String {
        let script = """
            import sqlite3, sys
            db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
            print(db.execute("SELECT count(*) FROM credentials WHERE dpop_key IS NOT NULL").fetchone()[0])
            """
        let result = try await runCommand("/usr/bin/python3", ["-c", script, path])
        try #require(result.status == 0, "\(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The thumbprint of the key of alice's next proof.
    static func keyThumbprint(_ client: RawClient, token: String) async throws -> String {
        let reply = try client.call(proofCall())
        let proof = try #require(reply.parameters["proof"] as? String, "\(reply)")
        return try #require(try await inspect(proof, token: token)["jkt"] as? String)
    }

    @Test func proofsAreMadeWithTheCredentialsKeyForTheRequestAndTheToken() async throws {
        let (daemon, client, token) = try await Self.start()
        let reply = try client.call(Self.proofCall(uri: "https://api.example/items?page=2#frag"))
        #expect(reply.errorName == nil, "\(reply)")
        let credentials = try #require(reply.parameters["credentials"] as? [String: Any])
        #expect(credentials["tokenType"] as? String == "DPoP" && credentials["accessToken"] as? String == token)
        let proof = try #require(reply.parameters["proof"] as? String)
        let seen = try await Self.inspect(proof, token: token)
        let header = try #require(seen["header"] as? [String: Any])
        let claims = try #require(seen["claims"] as? [String: Any])
        #expect(seen["parts"] as? Int == 3)
        #expect(header["typ"] as? String == "dpop+jwt" && header["alg"] as? String == "ES256")
        #expect((header["jwk"] as? [String: Any])?["d"] == nil, "the private key stays in tokend")
        #expect(claims["htm"] as? String == "GET" && claims["htu"] as? String == "https://api.example/items")
        #expect(claims["ath"] as? String == seen["ath"] as? String, "bound to the token it came with")
        #expect(claims["nonce"] == nil)
        let iat = try #require(claims["iat"] as? Int)
        #expect(abs(iat - Int(Date().timeIntervalSince1970)) < 30)
        // Another call: a new jti, the same key; a nonce when given.
        let again = try client.call(Self.proofCall(method: "POST", uri: "https://api.example/items", nonce: "server-nonce-1"))
        let second = try await Self.inspect(try #require(again.parameters["proof"] as? String), token: token)
        let secondClaims = try #require(second["claims"] as? [String: Any])
        #expect(secondClaims["jti"] as? String != claims["jti"] as? String)
        #expect(secondClaims["nonce"] as? String == "server-nonce-1" && secondClaims["htm"] as? String == "POST")
        #expect(second["jkt"] as? String == seen["jkt"] as? String)
        // Status says which credentials take proofs.
        #expect(try OAuthRefreshTests.status(client, "alice")["tokenType"] as? String == "DPoP")
        #expect(try OAuthRefreshTests.status(client, "bob")["tokenType"] as? String == "Bearer")
        // Through tokenctl: the two headers, one per line.
        let headers = try await runCommand(
            Repository.binary("tokenctl"), ["token", "alice", "--dpop", "GET", "https://api.example/x", "--socket", daemon.socketPath])
        #expect(headers.status == 0, "\(headers.stderr)")
        let lines = headers.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2 && lines.first == "Authorization: DPoP \(token)" && lines.last?.hasPrefix("DPoP: ey") == true, "\(lines)")
        #expect(try await daemon.stop() == 0)
        #expect(!daemon.log.contains(proof) && !daemon.log.contains(token))
    }

    @Test func callersAndRequestsAreCheckedWithTypedErrors() async throws {
        let (daemon, client, _) = try await Self.start()
        let cases: [(String, String, String?)] = [
            (Self.proofCall("bob"), "io.tokend.TokenProvider.InvalidCredential", nil),
            (Self.proofCall("carol"), "io.tokend.TokenProvider.UnknownUser", nil),
            (Self.proofCall(uri: "ftp://api.example/x"), "org.varlink.service.InvalidParameter", "httpUri"),
            (Self.proofCall(uri: "http://api.example/x"), "org.varlink.service.InvalidParameter", "httpUri"),
            (Self.proofCall(method: "GE T"), "org.varlink.service.InvalidParameter", "httpMethod"),
            (Self.proofCall(nonce: "with space"), "org.varlink.service.InvalidParameter", "nonce"),
            (
                Self.call("ProvideDPoPProof", ["userIdentifier": "alice", "httpMethod": 7, "httpUri": "https://a.example/"]),
                "org.varlink.service.InvalidParameter", "httpMethod"
            ),
        ]
        for (call, error, parameter) in cases {
            let reply = try client.call(call)
            #expect(reply.errorName == error, "\(call): \(reply)")
            if let parameter { #expect(reply.parameters["parameter"] as? String == parameter, "\(call): \(reply)") }
        }
        // The reason for a bearer credential names it and says what to do.
        let bearer = try client.call(Self.proofCall("bob"))
        #expect((bearer.parameters["reason"] as? String)?.contains("not DPoP-bound") == true, "\(bearer)")
        // Authorised like tokens: a reader may, another uid may not.
        let reader = try await OtherUser.call(Self.proofCall(), socket: daemon.socketPath, uid: 7100, gid: 7100)
        #expect(reader.errorName == nil && reader.parameters["proof"] is String, "\(reader)")
        let stranger = try await OtherUser.call(Self.proofCall(), socket: daemon.socketPath, uid: 7300, gid: 7300)
        #expect(stranger.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(stranger)")
        // tokenctl's usage errors name what was wrong (exit status 2).
        for arguments in [["--dpop", "GET"], ["--dpop-nonce", "n"], ["--dpop", "GET", "https://a.example/", "--rejected-token-stdin"]] {
            let usage = try await runCommand(
                Repository.binary("tokenctl"), ["token", "alice"] + arguments + ["--socket", daemon.socketPath])
            #expect(usage.status == 2 && usage.stderr.contains("--dpop"), "\(arguments): \(usage)")
        }
        #expect(try await daemon.stop() == 0)
    }

    /// The key is sealed in the store (no PEM, no private key in the file), the same key signs
    /// after a restart and after the master key is rotated, and removal deletes it.
    @Test func theKeyIsSealedDurableThroughRotationAndRemovedWithTheCredential() async throws {
        let (daemon, client, token) = try await Self.start()
        let before = try await Self.keyThumbprint(client, token: token)
        let rotated = try await runCommand(Repository.binary("tokenctl"), ["rotate-key", "--socket", daemon.socketPath])
        #expect(rotated.status == 0, "\(rotated.stderr)")
        #expect(try await daemon.stop() == 0)
        let store = daemon.stateDirectory + "/tokend.sqlite"
        for file in try FileManager.default.contentsOfDirectory(atPath: daemon.stateDirectory) where file.hasPrefix("tokend.sqlite") {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: daemon.stateDirectory + "/" + file))
            #expect(bytes.range(of: Data("PRIVATE KEY".utf8)) == nil, "no PEM in \(file)")
        }
        #expect(try await Self.keysStored(store) == "1")
        let restarted = try DaemonProcess(
            configuration: DaemonProcess.configuration(providers: Self.providers), directory: daemon.directory)
        try await restarted.start()
        let after = try await Self.keyThumbprint(try RawClient(path: restarted.socketPath), token: token)
        #expect(after == before, "the same key after a rotation and a restart")
        let removed = try await runCommand(Repository.binary("tokenctl"), ["remove", "alice", "--socket", restarted.socketPath])
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(try await restarted.stop() == 0)
        #expect(try await Self.keysStored(store) == "0")
        #expect(!restarted.log.contains("PRIVATE KEY"))
    }
}
