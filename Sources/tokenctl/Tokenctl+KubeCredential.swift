import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl kube-credential USER`: a kubectl exec credential plugin.
    struct KubeCredential: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "kube-credential",
            abstract: "Be kubectl's exec credential plugin: print an ExecCredential with USER's token.",
            discussion: """
                In the kubeconfig:
                  users:
                  - name: alice
                    user:
                      exec:
                        apiVersion: client.authentication.k8s.io/v1beta1
                        command: tokenctl
                        args: [kube-credential, alice]
                        interactiveMode: Never
                Prints client.authentication.k8s.io/v1 or v1beta1, as $KUBERNETES_EXEC_INFO asks \
                (else --api-version, else v1beta1), with status.token and \
                status.expirationTimestamp. On failure it exits non-zero with the reason on \
                stderr, which kubectl shows.
                """
        )

        @OptionGroup var global: GlobalOptions

        @OptionGroup var helper: CredentialHelperOptions

        @Option(
            name: .customLong(KubernetesExecCredential.apiVersionOption.name),
            help: ArgumentHelp("The ExecCredential apiVersion when kubectl does not say.", valueName: "version"))
        var apiVersion: String?

        func run() throws {
            let status = OneShotCommands.kubeCredential(helper.common(global), apiVersion: apiVersion)
            if status != TokenctlExitStatus.success { throw ExitCode(status) }
        }
    }
}
