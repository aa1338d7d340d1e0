import TokendClient

/// The command line of one one-shot subcommand (`token` and the credential helpers), declared
/// once: the full parser's `@Option`s take their long names and defaults from it
/// (`.customLong(syntax.option.name)`), and the fast parser, ``OneShotCommandLine/parse(_:)``,
/// reads it. `OneShotSyntaxTests` checks that every table names exactly the long options the
/// full parser declares for its subcommand, so the two cannot drift apart.
public struct OneShotSyntax: Sendable {
    /// A long option, `--name VALUE` or `--name=VALUE`.
    public struct Option: Sendable, Hashable {
        /// The long name, without `--`.
        public let name: String
        /// The default as the full parser prints it in its help, if the option has one.
        public let defaultValue: String?

        public init(_ name: String, default defaultValue: String? = nil) {
            self.name = name
            self.defaultValue = defaultValue
        }
    }

    /// What the fast parser read, for ``make``.
    public struct Reading: Sendable {
        /// The operands after the user identifier (the operation, for git and docker).
        public let operands: [String]
        /// The options given, in command-line order, each once.
        let values: [OptionValue]

        /// The value given for `option`, if any.
        public subscript(option: Option) -> String? { values.value(of: option.name) }
    }

    /// One `--name value` the fast parser read.
    ///
    /// An array of these rather than a `[String: String]`: a one-shot process pays for every
    /// generic type it touches first, and a dictionary's storage makes the runtime look up
    /// `String: Hashable` among every conformance in the executable (with the parse error's
    /// `Result`, ~40 % of a one-shot run's CPU in `perf record`; decision 7 has the figures); a
    /// handful of options is searched faster in order anyway.
    struct OptionValue: Sendable {
        let name: String
        let value: String
    }

    /// The subcommand's name, e.g. `git-credential`.
    public let subcommand: String
    /// Whether the first operand is the user identifier (every one but `docker-credential`,
    /// whose user comes from the mapping file).
    public let takesUser: Bool
    /// How many operands follow the user identifier.
    public let operands: Int
    /// `--min-valid`, with this subcommand's default.
    public let minValid: Option
    /// The subcommand's own options that the fast parser reads, besides `--min-valid` and the
    /// global ones.
    public let options: [Option]
    /// Long options the full parser declares that the fast parser leaves to it: a command line
    /// with one of them is not read here.
    public let fullParserOnly: [String]
    /// The command line from what was read; `nil` when a value is not one the full parser takes.
    public let make: @Sendable (OneShotCommandLine.Common, Reading) -> OneShotCommandLine?

    public init(
        subcommand: String, takesUser: Bool = true, operands: Int = 0, minValid: Option, options: [Option] = [],
        fullParserOnly: [String] = [], make: @escaping @Sendable (OneShotCommandLine.Common, Reading) -> OneShotCommandLine?
    ) {
        self.subcommand = subcommand
        self.takesUser = takesUser
        self.operands = operands
        self.minValid = minValid
        self.options = options
        self.fullParserOnly = fullParserOnly
        self.make = make
    }

    /// Every long option the fast parser reads for this subcommand, the global ones included.
    public var fastOptions: [Option] { Self.global + [minValid] + options }

    /// `--socket` (default: `$TOKEND_SOCKET`, else the default path), taken by every subcommand.
    public static let socket = Option("socket")
    /// `--timeout` in seconds, taken by every subcommand.
    public static let timeout = Option("timeout", default: String(defaultTimeoutSeconds))
    public static let defaultTimeoutSeconds = 10
    /// The options every subcommand takes, before or after its name.
    public static let global = [socket, timeout]
    /// `--min-valid` of the credential helpers: the token must outlast the program's next
    /// requests.
    public static let helperMinValid = Option("min-valid", default: String(helperMinValidSeconds))
    public static let helperMinValidSeconds = 60
    /// `token`'s `--min-valid` default: any token still valid will do.
    public static let tokenMinValidSeconds = 0

    /// Every one-shot subcommand. A new one is its table below and a line here, a case of
    /// ``OneShotCommandLine``, and its `Tokenctl+Name.swift`, whose options name the table's.
    public static let all: [OneShotSyntax] = [
        token, GitCredentialHelper.syntax, KubernetesExecCredential.syntax, DockerCredentialHelper.syntax,
        GoogleExecutableResponse.syntax,
    ]

    /// `tokenctl token USER`: `--min-valid` defaults to 0; narrowed tokens, DPoP and a refused
    /// token go through the full parser.
    public static let token = OneShotSyntax(
        subcommand: "token", minValid: Option("min-valid", default: String(tokenMinValidSeconds)),
        fullParserOnly: ["rejected-token-stdin", "scope", "resource", "dpop", "dpop-nonce"]
    ) { common, _ in .token(common) }
}

extension GitCredentialHelper {
    /// `--username NAME`.
    public static let usernameOption = OneShotSyntax.Option("username")
    /// `tokenctl git-credential USER OPERATION [--username NAME]`.
    public static let syntax = OneShotSyntax(
        subcommand: "git-credential", operands: 1, minValid: OneShotSyntax.helperMinValid, options: [usernameOption]
    ) { common, reading in .gitCredential(common, operation: reading.operands[0], username: reading[usernameOption]) }
}

extension KubernetesExecCredential {
    /// `--api-version VERSION`.
    public static let apiVersionOption = OneShotSyntax.Option("api-version")
    /// `tokenctl kube-credential USER [--api-version VERSION]`.
    public static let syntax = OneShotSyntax(
        subcommand: "kube-credential", minValid: OneShotSyntax.helperMinValid, options: [apiVersionOption]
    ) { common, reading in .kubeCredential(common, apiVersion: reading[apiVersionOption]) }
}

extension DockerCredentialHelper {
    /// `tokenctl docker-credential OPERATION`: the user comes from the mapping file.
    public static let syntax = OneShotSyntax(
        subcommand: "docker-credential", takesUser: false, operands: 1, minValid: OneShotSyntax.helperMinValid
    ) { common, reading in .dockerCredential(common, operation: reading.operands[0]) }
}

extension GoogleExecutableResponse {
    /// `--token-type jwt|id_token`.
    public static let tokenTypeOption = OneShotSyntax.Option("token-type", default: TokenType.jwt.rawValue)
    /// `tokenctl google-credential USER [--token-type jwt|id_token]`.
    public static let syntax = OneShotSyntax(
        subcommand: "google-credential", minValid: OneShotSyntax.helperMinValid, options: [tokenTypeOption]
    ) { common, reading in
        guard let tokenType = TokenType(rawValue: reading[tokenTypeOption] ?? tokenTypeOption.defaultValue ?? "") else { return nil }
        return .googleCredential(common, tokenType: tokenType)
    }
}

extension [OneShotSyntax.OptionValue] {
    /// The value given for the option named `name`, if any.
    func value(of name: String) -> String? {
        for option in self where option.name == name { return option.value }
        return nil
    }
}
