import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl status [USER] [--json]`.
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the daemon's status and the credentials you may see.",
            discussion: """
                The table shows, per credential: the user identifier, the provider, the state \
                (valid, refreshing, retrying, reauthentication_required, expired), how long the \
                current token stays valid, when the next refresh is due, how long until a new \
                login is needed (RELOGIN BY; - when nothing ends the login), and the last refresh \
                error. Tokens are never shown. --json prints the status as the daemon sent it.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Show only this user's credential.")
        var user: String?

        @Flag(name: .long, help: "Print the status as one line of JSON.")
        var json = false

        func run() async throws {
            let client = global.makeClient()
            let status: (daemon: DaemonStatus?, credentials: [CredentialStatus])
            do {
                status = try await client.status(userIdentifier: user)
            } catch {
                throw Terminal.fail(error)
            }
            await client.close()
            // Said on stderr, so the table (or the JSON) stays what scripts read.
            Terminal.warn(status.daemon?.warnings ?? [])
            if json {
                print(StatusTable.json(daemon: status.daemon, credentials: status.credentials))
            } else {
                print(
                    StatusTable.render(daemon: status.daemon, credentials: status.credentials, now: Terminal.now()),
                    terminator: ""
                )
            }
        }
    }
}
