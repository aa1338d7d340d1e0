import ArgumentParser
import TokendClient

extension Tokenctl {
    /// `tokenctl token USER [--min-valid SECONDS] [--rejected-token-stdin]`.
    struct Token: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a fresh access token for a user, and nothing else.",
            discussion: """
                Prints the access token and a newline on stdout, for use in scripts: \
                curl -H "Authorization: Bearer $(tokenctl token alice)" …
                On failure nothing is printed on stdout; the reason goes to stderr and the exit \
                status says what kind of failure it was:
                \(TokenctlExitStatus.helpText)

                When an API refused the token, pass it back with --rejected-token-stdin (on \
                stdin, never as an argument) and tokend refreshes it once before answering.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The user identifier whose token to print.")
        var user: String

        @OptionGroup var validity: MinimumValidity

        @Flag(
            name: .customLong("rejected-token-stdin"),
            help: "Read a token an API refused from stdin, so tokend replaces it."
        )
        var rejectedTokenFromStandardInput = false

        func validate() throws {
            try UserArgument.validate(user)
        }

        func run() throws {
            var rejectedToken: String?
            if rejectedTokenFromStandardInput {
                let bytes: [UInt8]
                do {
                    bytes = try InputReader.readStandardInput(limit: 64 * 1024)
                } catch {
                    throw Terminal.failInput(error.description)
                }
                let token = String(decoding: bytes, as: UTF8.self).trimmingWhitespace()
                guard !token.isEmpty else { throw Terminal.failInput("--rejected-token-stdin: stdin is empty") }
                rejectedToken = token
            }
            let common = OneShotCommandLine.Common(
                user: user, socket: global.socket, timeoutSeconds: global.timeout, minValidSeconds: validity.seconds)
            let status = OneShotCommands.token(common, rejectedToken: rejectedToken)
            if status != TokenctlExitStatus.success { throw ExitCode(status) }
        }
    }
}

extension String {
    /// Without leading and trailing spaces, tabs and line breaks.
    func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" || $0 == "\r\n" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}
