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

        func validate() throws {
            try UserArgument.validate(user)
        }

        func run() async throws {
            let client = global.makeClient()
            do {
                try await client.removeCredential(user)
            } catch {
                throw Terminal.fail(error)
            }
            await client.close()
            print("Removed the credential of user '\(user)'.")
        }
    }
}
