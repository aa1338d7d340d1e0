import ArgumentParser
import TokenctlSupport
import TokendClient

#if canImport(Glibc)
    import Glibc
#endif

/// Where tokenctl starts. The command lines that shells, git and kubectl run for every token
/// (``OneShotCommandLine``) are answered at once, on this thread: no argument parser, no
/// concurrency runtime, no event-loop group. Everything else goes to the full parser.
@main
enum TokenctlMain {
    static func main() {
        // Run through its link docker-credential-tokend, tokenctl is Docker's credential helper.
        var commandLine = CommandLine.arguments
        let programName = commandLine.isEmpty ? "tokenctl" : commandLine.removeFirst()
        let arguments = OneShotCommandLine.arguments(programName: programName, commandLine)
        if let command = OneShotCommandLine.parse(arguments) { exit(OneShotCommands.run(command)) }
        // The full parser's commands are async; the task ends the process when its command
        // ends. The main thread only waits: nothing in tokenctl runs on the main actor, and
        // `dispatchMain()` would end this thread with `pthread_exit`, whose unwinding indexes
        // every unwind entry of the statically linked executable first (~15 ms a run).
        Task.detached {
            await Tokenctl.main(arguments)
            exit(TokenctlExitStatus.success)
        }
        while true { pause() }
    }
}

/// `tokenctl`: asks tokend for tokens and manages its credentials, through `TokendClient`.
struct Tokenctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokenctl",
        abstract: "Query and control tokend, the daemon that keeps OAuth credentials fresh.",
        discussion: """
            tokenctl talks to tokend over its Varlink socket: --socket, else $TOKEND_SOCKET, \
            else \(TokendClient.defaultSocketPath).

            Exit status:
            \(TokenctlExitStatus.helpText)

            Shell completion: tokenctl --generate-completion-script bash (or zsh, fish) prints \
            a script to install, e.g. as /usr/share/bash-completion/completions/tokenctl.
            """,
        version: TokendVersion.string,
        subcommands: [
            Status.self, Token.self, Watch.self, Notify.self, Exec.self, Add.self, Login.self, Remove.self, RotateKey.self, Backup.self,
            Store.self,
            GitCredential.self,
            KubeCredential.self,
            DockerCredential.self,
            GoogleCredential.self,
        ],
        defaultSubcommand: Status.self
    )

    /// ArgumentParser's `main`, except that usage errors exit with 2 (see the exit status
    /// table) instead of `EX_USAGE` (64).
    static func main(_ commandLine: [String]) async {
        do {
            // Global options may stand before the subcommand, as with git, systemctl, kubectl.
            let arguments: [String]
            do {
                arguments = try GlobalArguments.normalize(
                    commandLine, subcommands: Set(configuration.subcommands.map { $0._commandName }),
                    optionsWithValue: ["--socket", "--timeout"], flags: ["--json"], defaultSubcommand: Status._commandName,
                    groups: [Store._commandName: Set(Store.configuration.subcommands.map { $0._commandName })])
            } catch {
                Terminal.writeError("tokenctl: \(error.description)")
                Terminal.exitProcess(TokenctlExitStatus.usage)
            }
            var command = try await asyncParseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            if exitCode(for: error) == .validationFailure {
                Terminal.writeError(fullMessage(for: error))
                Terminal.exitProcess(TokenctlExitStatus.usage)
            }
            exit(withError: error)
        }
    }
}
