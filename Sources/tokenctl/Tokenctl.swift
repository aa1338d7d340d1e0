import ArgumentParser
import TokendClient

/// `tokenctl`: asks tokend for tokens and manages its credentials, through `TokendClient`.
@main
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
        subcommands: [Status.self, Token.self, Watch.self, Exec.self, Add.self, Login.self, Remove.self, RotateKey.self],
        defaultSubcommand: Status.self
    )

    /// ArgumentParser's `main`, except that usage errors exit with 2 (see the exit status
    /// table) instead of `EX_USAGE` (64).
    static func main() async {
        do {
            var command = try await asyncParseAsRoot(nil)
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
