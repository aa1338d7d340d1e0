import ArgumentParser
import TokenctlSupport
import TokendClient

extension GoogleExecutableResponse.TokenType: ExpressibleByArgument {}

extension Tokenctl {
    /// `tokenctl google-credential USER`: the executable of a Google external-account
    /// credential (workload identity federation).
    struct GoogleCredential: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "google-credential",
            abstract: "Be a Google external-account credential's executable: print USER's token as the subject token.",
            discussion: """
                In the external_account credential configuration:
                  "credential_source": {"executable": {
                    "command": "/usr/bin/tokenctl google-credential alice",
                    "timeout_millis": 5000}}
                with "subject_token_type": "urn:ietf:params:oauth:token-type:jwt" (or id_token, \
                with --token-type id_token). Google's libraries run it only when \
                GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1. It prints \
                {"version":1,"success":true,"token_type":...,"id_token":...,"expiration_time":...} \
                with the access token, valid for at least --min-valid seconds. On failure it \
                prints {"version":1,"success":false,"code":...,"message":...}, writes the reason \
                on stderr and exits non-zero. Leave output_file out: it would keep the token in a \
                plain file.
                """
        )

        @OptionGroup var global: GlobalOptions

        @OptionGroup var helper: CredentialHelperOptions

        @Option(
            name: .customLong(GoogleExecutableResponse.tokenTypeOption.name),
            help: ArgumentHelp("How the token is presented: jwt or id_token.", valueName: "type"))
        var tokenType: GoogleExecutableResponse.TokenType = .jwt

        func run() throws {
            let status = OneShotCommands.googleCredential(helper.common(global), tokenType: tokenType)
            if status != TokenctlExitStatus.success { throw ExitCode(status) }
        }
    }
}
