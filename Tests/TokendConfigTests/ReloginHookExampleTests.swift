import Foundation
import Testing
import TokendTestSupport

/// `config/relogin-hook.example.sh`, shipped as `/usr/share/doc/tokend/examples/relogin-hook.sh`:
/// run with credential names a local user may choose, it runs nothing they hide in the name,
/// and the command it shows gives `tokenctl` the name as one argument.
struct ReloginHookExampleTests {
    static let path = ConfigurationReferenceTests.repositoryRoot.appendingPathComponent("config/relogin-hook.example.sh").path

    /// Names a user identifier may be (printable ASCII, no spaces, no '/') that a careless hook
    /// would run.
    static let hostileNames = [
        "$(touch${IFS}PWNED)", "`touch${IFS}PWNED`", "a;touch${IFS}PWNED", "a|touch${IFS}PWNED&", "it's\"q\"", "-n",
        "--help", "*", "$HOME", #"a\b"#, "a'$(touch${IFS}PWNED)'", "<PWNED",
    ]

    /// A program that writes each argument followed by a NUL to `FILE`.
    static func recorder(_ file: String) -> String { "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done >> \(file)\n" }

    static func arguments(_ file: String) -> [String] {
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        return text.split(separator: "\0", omittingEmptySubsequences: false).dropLast().map(String.init)
    }

    @Test(arguments: hostileNames)
    func aHostileCredentialNameIsOnlyEverData(name: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tokend-hook-\(UUID().uuidString)").path
        let stubs = directory + "/bin"
        try FileManager.default.createDirectory(atPath: stubs, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (program, file) in [("logger", "logger.args"), ("tokenctl", "tokenctl.args")] {
            // Written here, then installed by another process: a child that another test forks
            // while this one writes inherits the written file's descriptor, and while it holds it
            // an exec of that file fails (ETXTBSY), which the shell takes as "try the next PATH
            // entry", the real logger. The installed copy is a file no process of ours wrote.
            let source = directory + "/" + program + ".source"
            try Self.recorder(directory + "/" + file).write(toFile: source, atomically: false, encoding: .utf8)
            let installed = try await ChildProcess.run(
                "/usr/bin/install", ["-m", "0755", source, stubs + "/" + program], environment: [:], directory: directory,
                timeout: .seconds(30))
            try #require(installed.status == 0, "\(installed.stderr)")
        }
        let environment = [
            "PATH": stubs + ":/usr/bin:/bin", "TOKEND_CREDENTIAL": name, "TOKEND_PROVIDER": "example", "TOKEND_OWNER_UID": "0",
            "TOKEND_RELOGIN_BY": "1900000000", "TOKEND_RELOGIN_REASON": "session_end", "TOKEND_THRESHOLD": "1d",
        ]
        let run = try await ChildProcess.run(Self.path, [], environment: environment, directory: directory, timeout: .seconds(30))
        #expect(run.status == 0, "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/PWNED"), "the hook ran what the name held")

        // logger got the message as one argument after --, the name in it quoted.
        let logged = Self.arguments(directory + "/logger.args")
        #expect(logged.count == 4 && logged.prefix(3) == ["-t", "tokend-relogin", "--"], "\(logged)")
        let message = try #require(logged.last)
        #expect(message.hasPrefix("The tokend credential '"), "\(message)")
        // The command it shows, run by a shell, gives tokenctl the name as one argument.
        let shown = try #require(message.split(separator: "\n").last.map(String.init))
        #expect(shown.hasPrefix("Run: tokenctl login "), "\(shown)")
        let command = String(shown.dropFirst("Run: ".count))
        let copied = try await ChildProcess.run(
            "/bin/sh", ["-c", command], environment: ["PATH": stubs + ":/usr/bin:/bin"], directory: directory, timeout: .seconds(30))
        #expect(copied.status == 0, "\(copied.stderr)")
        let given = Self.arguments(directory + "/tokenctl.args")
        #expect(given == ["login", name] || given == ["login", "--", name], "\(given)")
        #expect(name.hasPrefix("-") == (given.count == 3), "a name that looks like an option comes after --")
        #expect(!FileManager.default.fileExists(atPath: directory + "/PWNED"), "the shown command ran what the name held")
    }
}
