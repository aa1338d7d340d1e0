import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl watch USER [--show-token]`.
    struct Watch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a line each time a user's token changes.",
            discussion: """
                Prints the current token's expiry at once, then one line per new token as tokend \
                refreshes it, until the credential is removed or needs a new login, or until \
                interrupted:

                  2025-01-31T12:00:00Z alice expires in 59m 58s (at 2025-01-31T12:59:58Z)

                Times are in UTC. The token itself is shown only with --show-token. When tokend \
                restarts, watch reconnects and carries on. It exits with the status of the error \
                that ended the stream (see tokenctl --help).
                """
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The user identifier whose token to watch.")
        var user: String

        @Flag(
            name: .customLong("show-token"),
            help: "Also print each new access token (visible to anyone who sees the output).")
        var showToken = false

        func validate() throws {
            try UserArgument.validate(user)
        }

        func run() async throws {
            let client = global.makeClient()
            do {
                for try await credentials in client.updates(for: user) {
                    Terminal.writeOutput(WatchLine.render(credentials, now: Terminal.now(), showToken: showToken))
                }
            } catch {
                throw Terminal.fail(error)
            }
        }
    }
}
