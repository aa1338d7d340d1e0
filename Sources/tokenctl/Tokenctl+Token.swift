import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl token USER [--min-valid SECONDS] [--rejected-token-stdin]`.
    struct Token: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a fresh access token for a user, and nothing else.",
            discussion: """
                Prints the access token and a newline on stdout, for use in scripts: \
                curl -H @<(printf 'Authorization: Bearer %s\\n' "$(tokenctl token alice)") … \
                (curl reads the header from a file, so the token is not on its command line).
                On failure nothing is printed on stdout; the reason goes to stderr and the exit \
                status says what kind of failure it was:
                \(TokenctlExitStatus.helpText)

                When an API refused the token, pass it back with --rejected-token-stdin (on \
                stdin, never as an argument) and tokend refreshes it once before answering.

                --scope and --resource print a token narrowed to a subset of the credential's \
                scope or to one API (RFC 8707), which tokend gets from the provider and keeps \
                beside the credential; the provider must allow it (narrowed_tokens = true).

                For a DPoP-bound credential (a provider with dpop = true), --dpop METHOD URL \
                prints the two headers of one request instead, "Authorization: DPoP <token>" \
                and "DPoP: <proof>", one per line; the proof is made by tokend with the \
                credential's key and is good for that one request. With curl: \
                curl -H @<(tokenctl token alice --dpop GET "$url") "$url"
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

        @Option(help: ArgumentHelp("A token narrowed to these scope values (space-separated).", valueName: "scope"))
        var scope: String?

        @Option(help: ArgumentHelp("A token narrowed to this API, an absolute URI (RFC 8707).", valueName: "uri"))
        var resource: String?

        @Option(
            name: .customLong("dpop"), parsing: .upToNextOption,
            help: ArgumentHelp(
                "Print 'Authorization: DPoP <token>' and 'DPoP: <proof>' for one request.", valueName: "method> <url"))
        var dpop: [String] = []

        @Option(name: .customLong("dpop-nonce"), help: "The resource server's DPoP-Nonce, when it demanded one (with --dpop).")
        var dpopNonce: String?

        func validate() throws {
            try UserArgument.validate(user)
            if !dpop.isEmpty, dpop.count != 2 {
                throw ValidationError("--dpop takes two values, the HTTP method and the URL (e.g. --dpop GET https://api.example/items)")
            }
            if dpopNonce != nil, dpop.isEmpty { throw ValidationError("--dpop-nonce needs --dpop") }
            if !dpop.isEmpty, scope != nil || resource != nil {
                throw ValidationError("--dpop cannot be used with --scope or --resource: narrowed tokens are bearer tokens")
            }
            if !dpop.isEmpty, rejectedTokenFromStandardInput {
                throw ValidationError("--dpop and --rejected-token-stdin cannot be used together")
            }
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
            let status =
                dpop.isEmpty
                ? OneShotCommands.token(common, rejectedToken: rejectedToken, scope: scope, resource: resource)
                : OneShotCommands.dpopHeaders(common, method: dpop[0], url: dpop[1], nonce: dpopNonce)
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
