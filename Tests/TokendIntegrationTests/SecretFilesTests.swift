import Foundation
import Testing

/// Token bytes on disk only where the user asked (issue 8, point 6): the configured token file
/// holds its credential's access token; no other file tokend writes (database, WAL, temporary
/// files, other token files, the log) holds any token in plain text, and tokend's own argv and
/// environment carry none.
@Suite(.serialized)
struct SecretFilesTests {
    @Test func tokensAreOnDiskOnlyInTheConfiguredSink() async throws {
        let (directory, daemon) = try await DaemonProcess.startWithTokenFile(user: "filed", mode: "0600")
        let client = try RawClient(path: daemon.socketPath)
        let filedAccess = Tokens.random("FILEDACC-")
        let filedRefresh = Tokens.random("FILEDREF-")
        let otherAccess = Tokens.random("OTHERACC-")
        let otherRefresh = Tokens.random("OTHERREF-")
        #expect(try client.call(Tokens.addCall(user: "filed", access: filedAccess, refresh: filedRefresh)).errorName == nil)
        #expect(try client.call(Tokens.addCall(user: "other", access: otherAccess, refresh: otherRefresh)).errorName == nil)
        // Replace both once, so temporary files and rewrites happen too.
        let filedAccess2 = Tokens.random("FILEDACC2-")
        let otherAccess2 = Tokens.random("OTHERACC2-")
        let replace = { (user: String, access: String, refresh: String) in
            var object =
                try! JSONSerialization.jsonObject(with: Data(Tokens.addCall(user: user, access: access, refresh: refresh).utf8))
                as! [String: Any]
            var parameters = object["parameters"] as! [String: Any]
            parameters["replace"] = true
            object["parameters"] = parameters
            return String(decoding: try! JSONSerialization.data(withJSONObject: object), as: UTF8.self)
        }
        #expect(try client.call(replace("filed", filedAccess2, filedRefresh)).errorName == nil)
        #expect(try client.call(replace("other", otherAccess2, otherRefresh)).errorName == nil)
        try await Task.sleep(for: .milliseconds(300))
        // tokend's own command line and environment (read while it runs).
        let pid = daemon.process.processIdentifier
        let cmdline = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") ?? Data()
        let environ = FileManager.default.contents(atPath: "/proc/\(pid)/environ") ?? Data()
        try await daemon.stop()

        let all = [filedAccess, filedRefresh, otherAccess, otherRefresh, filedAccess2, otherAccess2]
        for token in all {
            #expect(cmdline.range(of: Data(token.utf8)) == nil && environ.range(of: Data(token.utf8)) == nil)
        }
        let files = try FileManager.default.subpathsOfDirectory(atPath: directory.path)
        var sinkHolds = false
        for file in files {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory.file(file), isDirectory: &isDirectory), !isDirectory.boolValue,
                let data = FileManager.default.contents(atPath: directory.file(file))
            else { continue }
            for token in all {
                let found = data.range(of: Data(token.utf8)) != nil
                if file == "tokens/filed", token == filedAccess2 {
                    sinkHolds = found
                } else {
                    #expect(!found, "\(file) holds a token in plain text")
                }
            }
        }
        #expect(sinkHolds, "the configured token file holds its credential's current access token")
        #expect(files.contains("state/tokend.sqlite"))
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.file("tokens")) == ["filed"],
            "no other token file, no temporary left over")
    }
}
