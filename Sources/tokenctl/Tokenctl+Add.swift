import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl add USER --provider NAME [--reader …] [--from-file PATH] [--replace]`.
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Store a credential from a token endpoint's JSON response.",
            discussion: """
                Reads the token endpoint's response (a JSON object with access_token and \
                optionally refresh_token, expires_in, token_type and scope) from stdin, or \
                from --from-file. Tokens are never taken from the command line, where other \
                users could see them.

                Example: tokenctl add alice --provider example --reader group:deploy < response.json

                Administrators may add any credential; other users only one whose only reader \
                is their own uid (the default when no --reader is given).
                """
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The user identifier the credential is for.")
        var user: String

        @Option(
            name: .long,
            help: ArgumentHelp("The provider in tokend's configuration that issued the tokens.", valueName: "name")
        )
        var provider: String

        @Option(
            name: .customLong("reader"),
            help: ArgumentHelp(
                ReaderOptions.help,
                valueName: "reader"
            )
        )
        var readers: [String] = []

        @Option(
            name: .customLong("from-file"),
            help: ArgumentHelp(
                "Read the token response from this file instead of stdin.",
                valueName: "path"
            )
        )
        var fromFile: String?

        @Flag(name: .long, help: "Replace the user's existing credential.")
        var replace = false

        func validate() throws {
            try UserArgument.validate(user)
            guard Identifier.isValid(provider) else {
                throw ValidationError(
                    "The provider name must be 1 to 255 printable ASCII characters without spaces or '/'."
                )
            }
            try ReaderOptions.validate(readers)
        }

        func run() async throws {
            let bytes: [UInt8]
            do {
                if let fromFile, fromFile != "-" {
                    bytes = try InputReader.readFile(fromFile, limit: TokenResponseInput.maximumBytes)
                } else {
                    if InputReader.standardInputIsTerminal {
                        Terminal.writeError("Paste the token endpoint's JSON response, then press Ctrl-D.")
                    }
                    bytes = try InputReader.readStandardInput(limit: TokenResponseInput.maximumBytes)
                }
            } catch {
                throw Terminal.failInput(error.description)
            }
            let input: TokenResponseInput
            do {
                input = try TokenResponseInput.parse(bytes)
            } catch {
                throw Terminal.failInput(error.description)
            }
            let request = input.request(
                userIdentifier: user,
                provider: provider,
                readers: ReaderOptions.canonical(readers),
                replace: replace
            )

            let client = global.makeClient()
            let warnings: [String]
            do {
                warnings = try await client.addCredential(request)
            } catch {
                var error = error
                if error.code == .credentialExists { error.message += "; use --replace to overwrite it" }
                throw Terminal.fail(error)
            }
            await client.close()
            print("Stored the credential of user '\(user)' (provider \(provider)).")
            Terminal.warn(warnings)
        }
    }
}
