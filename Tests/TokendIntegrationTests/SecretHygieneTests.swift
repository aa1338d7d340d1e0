import Foundation
import Testing

/// Tokens never appear in logs, error replies or the files tokend writes; refresh tokens never
/// cross the socket.
@Suite(.serialized)
struct SecretHygieneTests {
    @Test func tokensAppearNowhereButInTheirReplies() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        var accessTokens: [String] = []
        var refreshTokens: [String] = []
        var replies: [String] = []
        for i in 0..<20 {
            let access = Tokens.random("ACCESS\(i)x")
            let refresh = Tokens.random("REFRESH\(i)x")
            accessTokens.append(access)
            refreshTokens.append(refresh)
            try client.send(Tokens.addCall(user: "u\(i)", access: access, refresh: refresh, expiresIn: i == 0 ? 5 : 3600))
            replies.append(try #require(try client.receive()))
        }
        // Every kind of reply: tokens, errors about tokens, status.
        for i in 0..<20 {
            try client.send(Tokens.tokenCall(user: "u\(i)", minValid: 60, rejected: refreshTokens[i]))
            replies.append(try #require(try client.receive()))
        }
        try client.send(Tokens.addCall(user: "u1", access: accessTokens[1], refresh: refreshTokens[1]))
        replies.append(try #require(try client.receive()))
        try client.send(#"{"method":"io.tokend.TokenProvider.Status","more":true}"#)
        while let reply = try client.receive() {
            replies.append(reply)
            if !reply.contains(#""continues":true"#) { break }
        }
        try await daemon.stop()

        let everything = replies.joined(separator: "\n")
        for refresh in refreshTokens { #expect(!everything.contains(refresh), "a refresh token crossed the socket") }
        // Access tokens appear only inside credentials replies of their own user.
        let errorReplies = replies.filter { $0.contains(#""error""#) }
        for access in accessTokens {
            #expect(!errorReplies.joined().contains(access), "an access token appeared in an error reply")
        }
        let log = daemon.log
        #expect(log.contains("credential added"))
        for token in accessTokens + refreshTokens { #expect(!log.contains(token), "a token appeared in the log") }
        // Files: database, WAL, journal, key, everything in the state directory.
        let files = try FileManager.default.subpathsOfDirectory(atPath: daemon.stateDirectory)
        #expect(files.contains("tokend.sqlite"))
        for file in files {
            guard let data = FileManager.default.contents(atPath: daemon.stateDirectory + "/" + file) else { continue }
            for token in accessTokens + refreshTokens {
                #expect(data.range(of: Data(token.utf8)) == nil, "\(file) contains a token in plain text")
            }
        }
    }
}
