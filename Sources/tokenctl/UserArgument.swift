import ArgumentParser
import TokenctlSupport
import TokendClient

/// Checks a user identifier given on the command line, with the message every subcommand uses.
enum UserArgument {
    static func validate(_ user: String) throws {
        guard Identifier.isValid(user) else {
            throw ValidationError("The user identifier must be 1 to 255 printable ASCII characters without spaces or '/'.")
        }
    }
}

/// `--min-valid SECONDS`, shared by `token` and `exec`.
struct MinimumValidity: ParsableArguments {
    @Option(
        name: .customLong(OneShotSyntax.token.minValid.name),
        help: ArgumentHelp(
            "The token must stay valid for at least this long; tokend refreshes first if needed.",
            valueName: "seconds"
        )
    )
    var seconds: Int = OneShotSyntax.tokenMinValidSeconds

    var duration: Duration { .seconds(seconds) }

    func validate() throws {
        guard seconds >= 0 else { throw ValidationError("--min-valid must not be negative.") }
    }
}
