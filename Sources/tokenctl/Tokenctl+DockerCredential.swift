import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl docker-credential OPERATION`, also run as `docker-credential-tokend OPERATION`:
    /// Docker's credential helper, for docker, skopeo, podman and buildah.
    struct DockerCredential: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "docker-credential",
            abstract: "Be the container tools' credential helper: answer with the mapped user's token as the secret.",
            discussion: """
                Installed as docker-credential-tokend (a link to tokenctl), it is named in the \
                tools' configuration, e.g. in ~/.docker/config.json or containers-auth.json:
                  {"credHelpers": {"registry.example.com": "tokend"}}
                Which credential serves which registry comes from \
                $XDG_CONFIG_HOME/tokend/docker-credentials (else \
                ~/.config/tokend/docker-credentials), one line per registry:
                  registry.example.com  alice  [USERNAME]
                (USERNAME defaults to oauth2). The socket is $TOKEND_SOCKET, else the default. \
                get reads the registry on stdin and prints {"ServerURL","Username","Secret"} \
                with the access token, valid for at least --min-valid seconds; a registry not in \
                the file gets "\(DockerCredentialHelper.notFound)" and exit status 1, so the \
                tool goes on without credentials. erase tells tokend that the registry refused \
                the current token, so the next get brings a new one. store is accepted and \
                ignored. list prints the mapped registries whose credential tokend gives you.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "What the tool asks: get, store, erase or list.")
        var operation: String

        @Option(
            name: .customLong(DockerCredentialHelper.syntax.minValid.name),
            help: ArgumentHelp("The token must stay valid this long.", valueName: "seconds"))
        var minValid: Int = OneShotSyntax.helperMinValidSeconds

        func validate() throws {
            guard minValid >= 0 else { throw ValidationError("--min-valid must not be negative.") }
        }

        func run() throws {
            let common = OneShotCommandLine.Common(
                user: "", socket: global.socket, timeoutSeconds: global.timeout, minValidSeconds: minValid)
            let status = OneShotCommands.dockerCredential(common, operation: operation)
            if status != TokenctlExitStatus.success { throw ExitCode(status) }
        }
    }
}
