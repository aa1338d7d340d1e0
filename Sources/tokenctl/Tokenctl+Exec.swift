import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl exec USER [--env NAME] [--min-valid SECONDS] -- COMMAND [ARGUMENT…]`.
    struct Exec: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a command with a fresh access token in an environment variable.",
            discussion: """
                Fetches the user's token, then replaces tokenctl with the command (execve), with \
                the token in the variable chosen with --env (default \(ExecEnvironment.defaultName)) \
                and nowhere else: not in its arguments, not on stdout. The command is looked up \
                in $PATH and gets tokenctl's stdin, stdout, stderr and environment, so its exit \
                status is the exit status.

                Example: tokenctl exec alice --env GITHUB_TOKEN -- gh api user

                If the token cannot be had, the command is not run and tokenctl exits with the \
                status of the error (see tokenctl --help); 126 and 127 mean the command could \
                not be run or not be found.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The user identifier whose token the command gets.")
        var user: String

        @Option(
            name: .customLong("env"),
            help: ArgumentHelp("The environment variable that receives the token.", valueName: "name")
        )
        var variable: String = ExecEnvironment.defaultName

        @OptionGroup var validity: MinimumValidity

        @Argument(
            parsing: .postTerminator,
            help: ArgumentHelp("The command to run and its arguments, after --.", valueName: "command")
        )
        var command: [String] = []

        func validate() throws {
            try UserArgument.validate(user)
            guard ExecEnvironment.isValidName(variable) else {
                throw ValidationError("--env must be a variable name: a letter or '_', then letters, digits and '_'.")
            }
            guard let program = command.first, !program.isEmpty else {
                throw ValidationError("Give the command to run after --, e.g. tokenctl exec \(user) -- env.")
            }
        }

        func run() async throws {
            let client = global.makeClient()
            let credentials: Credentials
            do {
                credentials = try await client.credentials(for: user, minValidity: validity.duration)
            } catch {
                throw Terminal.fail(error)
            }
            await client.close()
            let environment = ExecEnvironment.environment(
                ProcessEnvironment.current(),
                setting: variable,
                to: credentials.accessToken
            )
            let failure = ProcessEnvironment.execute(command, environment: environment)
            Terminal.writeError("tokenctl: cannot run \(command[0]): \(failure.message)")
            Terminal.exitProcess(failure.status)
        }
    }
}
