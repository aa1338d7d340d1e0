import ArgumentParser
import TokenctlSupport
import TokendClient

#if canImport(Glibc)
    import Glibc
#endif

/// Options every subcommand takes.
struct GlobalOptions: ParsableArguments {
    @Option(
        name: .customLong(OneShotSyntax.socket.name),
        help: ArgumentHelp(
            "tokend's socket (default: $TOKEND_SOCKET, else \(TokendClient.defaultSocketPath)).",
            valueName: "path"
        )
    )
    var socket: String?

    @Option(
        name: .customLong(OneShotSyntax.timeout.name),
        help: ArgumentHelp("How long to wait for tokend's answer.", valueName: "seconds"))
    var timeout: Int = OneShotSyntax.defaultTimeoutSeconds

    func validate() throws {
        guard timeout > 0, timeout <= 3600 else {
            throw ValidationError("--timeout must be between 1 and 3600 seconds.")
        }
        if let socket, socket.isEmpty { throw ValidationError("--socket must not be empty.") }
    }

    /// A client for the chosen socket (as root, the administrators' socket beside it first).
    func makeClient(callTimeout: Duration? = nil) -> TokendClient {
        TokendClient(
            socketPath: socket, administratorsSocketPath: Self.administratorsSocket(explicit: socket),
            callTimeout: callTimeout ?? .seconds(timeout))
    }

    /// ``AdministratorsSocket/path(explicitSocket:environmentSocket:effectiveUID:)`` for this process.
    static func administratorsSocket(explicit socket: String?) -> String? {
        AdministratorsSocket.path(
            explicitSocket: socket, environmentSocket: getenv(TokendClient.socketEnvironmentVariable).map { String(cString: $0) },
            effectiveUID: geteuid())
    }
}
