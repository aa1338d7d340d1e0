import Foundation
import Testing
import TokendCore

@testable import TokendConfig

/// A fresh directory under the system's temporary directory, removed by `remove()`.
struct TemporaryDirectory {
    let path: String

    init() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("tokend-config-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        // Resolve symlinks (e.g. /tmp on some systems) so expected paths compare equal.
        path = url.resolvingSymlinksInPath().path
    }

    func write(_ relativePath: String, _ contents: String) throws {
        try write(relativePath, Data(contents.utf8))
    }

    func write(_ relativePath: String, _ data: Data) throws {
        let url = URL(fileURLWithPath: path).appendingPathComponent(relativePath)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try data.write(to: url)
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

func loadError(_ path: String) -> ConfigurationError? {
    do {
        _ = try ConfigurationLoader.load(path: path)
        return nil
    } catch {
        return error
    }
}

struct ConfigurationLoaderTests {
    @Test func loadsTheExampleFromDisk() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try directory.write("etc/tokend.toml", exampleConfig)
        try directory.write("etc/example-client-secret", "from-disk-secret\n")

        let configuration = try ConfigurationLoader.load(path: directory.path + "/etc/tokend.toml")
        #expect(configuration.sourceFile == directory.path + "/etc/tokend.toml")
        #expect(configuration.socketPath == directory.path + "/run/tokend.sock")
        #expect(configuration.stateDirectory == directory.path + "/var")
        #expect(configuration.keyFile == directory.path + "/var/tokend.key")
        #expect(configuration.adminGroups == ["tokend-admin"])
        #expect(configuration.maxConnections == 1024)
        #expect(configuration.maxMessageBytes == 65536)
        let provider = try #require(configuration.providers["example"])
        guard case .oauth2(let settings) = provider.kind else { return }
        #expect(settings.clientSecret?.value == "from-disk-secret")
        #expect(settings.clientID == "tokend-example")
        #expect(provider.refreshPolicy.maxTokenAge == .seconds(30 * 86400))
    }

    @Test func pathIsNormalised() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try directory.write("etc/tokend.toml", "[daemon]\nsocket = \"s.sock\"\n")
        let configuration = try ConfigurationLoader.load(path: directory.path + "/etc/./other/../tokend.toml")
        #expect(configuration.sourceFile == directory.path + "/etc/tokend.toml")
        #expect(configuration.socketPath == directory.path + "/etc/s.sock")
    }

    @Test func relativePathIsResolvedAgainstTheWorkingDirectory() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try directory.write("conf/tokend.toml", "[daemon]\nsocket = \"s.sock\"\n")
        // Climb from the working directory to the root, then down again: relative, without chdir.
        let cwd = FileManager.default.currentDirectoryPath
        let depth = cwd.split(separator: "/").count
        let relative = String(repeating: "../", count: depth) + directory.path.dropFirst() + "/conf/tokend.toml"
        #expect(!relative.hasPrefix("/"))
        let configuration = try ConfigurationLoader.load(path: relative)
        #expect(configuration.sourceFile == directory.path + "/conf/tokend.toml")
        #expect(configuration.socketPath == directory.path + "/conf/s.sock")
    }

    @Test func missingFile() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/nope.toml"
        let error = try #require(loadError(path))
        #expect(error.file == path)
        #expect(error.key == "")
        #expect(error.problem == "cannot read the file: does not exist or is not readable")
    }

    @Test func fileThatIsNotUTF8() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try directory.write("tokend.toml", Data([0x5B, 0x64, 0x61, 0xFF, 0xFE, 0x5D]))
        let error = try #require(loadError(directory.path + "/tokend.toml"))
        #expect(error.problem == "cannot read the file: is not UTF-8 text")
    }

    @Test func missingSecretFileNamesTheKeyAndPath() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try directory.write("etc/tokend.toml", exampleConfig)
        let error = try #require(loadError(directory.path + "/etc/tokend.toml"))
        #expect(error.file == directory.path + "/etc/tokend.toml")
        #expect(error.key == "providers.example.client_secret_file")
        #expect(error.problem == "cannot read \(directory.path)/etc/example-client-secret: does not exist or is not readable")
    }

    @Test func syntaxErrorInAFileReportsLine() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try directory.write("tokend.toml", "# comment\n[daemon]\nsocket = /run/x\n")
        let error = try #require(loadError(directory.path + "/tokend.toml"))
        #expect(error.file == directory.path + "/tokend.toml")
        #expect(error.key == "")
        #expect(error.problem.hasPrefix("line 3, column "), "\(error.problem)")
    }

    @Test func validationErrorsFromAFileNameTheFile() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try directory.write("tokend.toml", "[daemon]\nmax_connections = \"x\"\n")
        let error = try #require(loadError(directory.path + "/tokend.toml"))
        #expect(error.description == "\(directory.path)/tokend.toml: daemon.max_connections: expected an integer, found a string")
    }
}
