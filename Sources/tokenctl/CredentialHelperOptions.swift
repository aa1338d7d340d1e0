import ArgumentParser
import TokenctlSupport
import TokendClient

/// The user and `--min-valid` of the credential helpers (`git-credential`, `kube-credential`):
/// the token they hand over must outlast the program's next requests.
struct CredentialHelperOptions: ParsableArguments {
    @Argument(help: "The user identifier whose token the program uses.")
    var user: String

    @Option(
        name: .customLong(OneShotSyntax.helperMinValid.name),
        help: ArgumentHelp("The token must stay valid this long.", valueName: "seconds"))
    var minValid: Int = OneShotSyntax.helperMinValidSeconds

    func validate() throws {
        try UserArgument.validate(user)
        guard minValid >= 0 else { throw ValidationError("--min-valid must not be negative.") }
    }

    /// What the one-shot commands need.
    func common(_ global: GlobalOptions) -> OneShotCommandLine.Common {
        OneShotCommandLine.Common(user: user, socket: global.socket, timeoutSeconds: global.timeout, minValidSeconds: minValid)
    }
}
