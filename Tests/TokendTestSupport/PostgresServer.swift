import Foundation

// Part of TokendTestSupport, the helpers every test target shares.

#if canImport(Glibc)
    import Glibc
#endif

/// A real PostgreSQL 15 server from Debian's `postgresql` package, for one test: its own data
/// directory under /tmp, listening on 127.0.0.1 on a free port, run as the `postgres` system user
/// that the package creates (via setpriv) (PostgreSQL refuses to run as root). Password authentication
/// (scram-sha-256) for the superuser `postgres`, so the password path is exercised too.
public final class PostgresServer: @unchecked Sendable {
    // @unchecked: owned by one test at a time.
    public static let binDirectory = "/usr/lib/postgresql/15/bin"
    public static let password = "tokend-test-db-password"
    public let directory: String
    /// Fixed once the server first started (a restart keeps it).
    public private(set) var port: Int
    private var server: Process?
    /// More `-c name=value` server settings for the next ``start()`` (e.g. `ssl=on`).
    public var serverOptions: [String] = []
    public var dataDirectory: String { directory + "/data" }
    public var logPath: String { directory + "/postgres.log" }
    public var url: String { "postgresql://postgres@127.0.0.1:\(port)/postgres" }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    /// Whether the binaries and the `postgres` user exist; tests that need a server are
    /// skipped with a clear message when they do not (`scripts/setup-host.sh` installs them).
    public static var isAvailable: Bool {
        FileManager.default.isExecutableFile(atPath: binDirectory + "/postgres") && getpwnam("postgres") != nil && geteuid() == 0
    }

    /// Makes the data directory (initdb) and starts the server.
    public init() async throws {
        guard let account = getpwnam("postgres") else { throw Failure(description: "there is no postgres system user") }
        var template = Array("/tmp/tokend-pg-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure(description: "mkdtemp failed") }
        directory = String(cString: made)
        chown(directory, account.pointee.pw_uid, account.pointee.pw_gid)
        chmod(directory, 0o700)
        port = try FreePort.pick()
        let passwordFile = directory + "/pw"
        try Self.password.write(toFile: passwordFile, atomically: false, encoding: .utf8)
        chown(passwordFile, account.pointee.pw_uid, account.pointee.pw_gid)
        let dataDirectory = self.dataDirectory
        let initdb = try await StartupSlots.run {
            try await Self.asPostgres(
                "initdb",
                ["-D", dataDirectory, "-U", "postgres", "--auth=scram-sha-256", "--pwfile=\(passwordFile)", "--no-sync", "-E", "UTF8"],
                timeout: 120
            )
        }
        guard initdb.status == 0 else { throw Failure(description: "initdb failed: \(initdb.output)") }
        // A port picked free can be taken by another test's server before postgres binds it
        // (two suites at once make it likely): start again on another port, three attempts at most.
        for attempt in 1...3 {
            do {
                try await start()
                return
            } catch let failure as Failure where attempt < 3 && failure.description.contains("Address already in use") {
                port = try FreePort.pick()
            }
        }
    }

    /// Starts (or restarts) the server on the same port and data directory: `postgres` itself,
    /// exec'd by setpriv as the postgres user, so this process's child is the server.
    public func start() async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments =
            [
                "--reuid=postgres", "--regid=postgres", "--clear-groups", "--", Self.binDirectory + "/postgres", "-D", dataDirectory,
                "-c", "listen_addresses=127.0.0.1", "-p", "\(port)", "-k", directory, "-c", "fsync=off", "-c", "max_connections=100",
            ] + serverOptions.flatMap { ["-c", $0] }
        process.currentDirectoryURL = URL(fileURLWithPath: "/tmp")
        FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        try process.run()
        server = process
        // Ready when it accepts a connection on its port (bounded: 60 s).
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            guard process.isRunning else { throw Failure(description: "postgres exited: \(self.log)") }
            if FreePort.isListening(port), (try? await psql("SELECT 1")) == "1" { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw Failure(description: "postgres did not start within 60 s: \(self.log)")
    }

    /// Makes a CA and a server certificate signed by it for `subjectAltName` with openssl, in the
    /// server's directory, and restarts the server with TLS on. Returns the CA file's path.
    public func enableTLS(subjectAltName: String = "IP:127.0.0.1", name: String = "ca") async throws -> String {
        func openssl(_ arguments: [String]) async throws {
            let result = try await ChildProcess.run("/usr/bin/openssl", arguments, directory: directory, timeout: .seconds(60))
            guard result.status == 0 else { throw Failure(description: "openssl \(arguments[0]) failed: \(result.stderr)") }
        }
        try await openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "\(name).key", "-out",
            "\(name).crt", "-days", "2", "-subj", "/CN=tokend test \(name)", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ])
        try "subjectAltName=\(subjectAltName)\nextendedKeyUsage=serverAuth\n".write(
            toFile: directory + "/server.ext", atomically: false, encoding: .utf8)
        try await openssl([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=tokend test database",
        ])
        try await openssl([
            "x509", "-req", "-in", "server.csr", "-CA", "\(name).crt", "-CAkey", "\(name).key", "-CAcreateserial", "-out", "server.crt",
            "-days", "2", "-extfile", "server.ext",
        ])
        guard let account = getpwnam("postgres") else { throw Failure(description: "no postgres user") }
        for file in ["server.key", "server.crt"] {
            chown(directory + "/" + file, account.pointee.pw_uid, account.pointee.pw_gid)
            chmod(directory + "/" + file, 0o600)
        }
        try await stop()
        serverOptions = ["ssl=on", "ssl_cert_file=\(directory)/server.crt", "ssl_key_file=\(directory)/server.key"]
        try await start()
        return directory + "/\(name).crt"
    }

    /// Stops the server (fast shutdown, SIGINT: connections are closed at once) and waits for it.
    public func stop() async throws {
        guard let server, server.isRunning else { return }
        kill(server.processIdentifier, SIGINT)
        let deadline = Date().addingTimeInterval(60)
        while server.isRunning, Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        if server.isRunning {
            kill(server.processIdentifier, SIGKILL)
            throw Failure(description: "postgres did not stop within 60 s")
        }
    }

    /// Runs SQL with psql as the superuser.
    @discardableResult
    public func psql(_ sql: String) async throws -> String {
        let result = try await Self.run(
            Self.binDirectory + "/psql",
            ["-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-At", "-c", sql],
            environment: ["PGPASSWORD": Self.password], timeout: 60
        )
        guard result.status == 0 else { throw Failure(description: "psql failed: \(result.output)") }
        return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs one of PostgreSQL's client programs (`pg_dump`, `pg_restore`, `createdb`) against
    /// the server as the superuser; `-h`, `-p` and `-U` are added.
    @discardableResult
    public func client(_ program: String, _ arguments: [String]) async throws -> String {
        let result = try await Self.run(
            Self.binDirectory + "/" + program, ["-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres"] + arguments,
            environment: ["PGPASSWORD": Self.password], timeout: 120
        )
        guard result.status == 0 else { throw Failure(description: "\(program) failed: \(result.output)") }
        return result.output
    }

    /// Stops the server and removes its directory.
    public func shutdown() async {
        _ = try? await stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    deinit {
        // A test that failed before `shutdown()` must not leave a server behind.
        if let server, server.isRunning { kill(server.processIdentifier, SIGQUIT) }
    }

    // MARK: Helpers

    private static func asPostgres(_ program: String, _ arguments: [String], timeout: Double) async throws -> (
        status: Int32, output: String
    ) {
        try await run(
            "/usr/bin/setpriv", ["--reuid=postgres", "--regid=postgres", "--clear-groups", "--", binDirectory + "/" + program] + arguments,
            environment: [:], timeout: timeout)
    }

    private static func run(_ executable: String, _ arguments: [String], environment: [String: String], timeout: Double) async throws
        -> (status: Int32, output: String)
    {
        do {
            let result = try await ChildProcess.run(
                executable, arguments, environment: environment, directory: "/tmp", timeout: .milliseconds(Int(timeout * 1000)))
            return (result.status, result.stdout + result.stderr)
        } catch let failure as ChildProcess.Failure {
            throw Failure(description: failure.description)
        }
    }
}
