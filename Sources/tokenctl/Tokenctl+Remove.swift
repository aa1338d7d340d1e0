import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl remove USER`.
    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a user's credential from tokend."
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The user identifier whose credential to delete.")
        var user: String

        @Flag(
            name: .long,
            help: ArgumentHelp(
                "Revoke the tokens at the provider even if they came from 'tokenctl add' (administrators only).",
                discussion: """
                    tokend revokes only tokens it got from the provider itself (a login or a refresh): \
                    revoking tokens someone added could end a grant behind another credential. For a \
                    leaked credential that tokend never refreshed, this revokes them anyway.
                    """))
        var revokeAnyway = false

        func validate() throws {
            try UserArgument.validate(user)
        }

        func run() async throws {
            let client = global.makeClient()
            let result: RemovalResult
            do {
                result = try await client.removeCredential(user, revokeAnyway: revokeAnyway)
            } catch {
                throw Terminal.fail(error)
            }
            await client.close()
            print(RemovalText.describe(result, user: user))
        }
    }
}
