import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl git-credential USER [--username NAME] OPERATION`: git's credential helper.
    struct GitCredential: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "git-credential",
            abstract: "Be git's credential helper: answer with USER's access token as the password.",
            discussion: """
                Configure it for the hosts that take the token, e.g.
                  git config --global credential.https://git.example.com.helper '!tokenctl git-credential alice'
                (add --socket PATH before alice when tokend does not listen on the default socket).
                git then runs it with get, store or erase: get prints username, password (the \
                access token, valid for at least --min-valid seconds) and password_expiry_utc; \
                store is ignored; erase tells tokend that the server refused the token, so the \
                next get brings a new one. Other operations are ignored. On failure nothing is \
                printed on stdout, git gets no credential, and the reason goes to stderr.
                """
        )

        @OptionGroup var global: GlobalOptions

        @OptionGroup var helper: CredentialHelperOptions

        @Argument(help: "What git asks: get, store or erase.")
        var operation: String

        @Option(
            name: .customLong(GitCredentialHelper.usernameOption.name),
            help: ArgumentHelp("The username sent with the token (default: git's, else oauth2).", valueName: "name"))
        var username: String?

        func run() throws {
            let status = OneShotCommands.gitCredential(helper.common(global), operation: operation, username: username)
            if status != TokenctlExitStatus.success { throw ExitCode(status) }
        }
    }
}
