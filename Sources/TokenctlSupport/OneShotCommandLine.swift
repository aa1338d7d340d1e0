import TokendClient

/// The command lines that shells and other programs run most often — `tokenctl token USER`,
/// `tokenctl git-credential USER OP`, `tokenctl kube-credential USER`,
/// `tokenctl docker-credential OP`, `tokenctl google-credential USER` — read without the full
/// argument parser, so such a call costs little more than its round trip to tokend.
///
/// Only plain, valid command lines are recognised; anything else (help, a bad value, an
/// unknown option, `--rejected-token-stdin`) gives `nil`, and the full parser handles it with
/// its usual messages. What is recognised means exactly what the full parser would make of it.
public enum OneShotCommandLine: Sendable, Hashable {
    /// Options every one-shot command takes.
    public struct Common: Sendable, Hashable {
        public var user: String
        public var socket: String?
        public var timeoutSeconds: Int
        public var minValidSeconds: Int

        public init(user: String, socket: String?, timeoutSeconds: Int, minValidSeconds: Int) {
            self.user = user
            self.socket = socket
            self.timeoutSeconds = timeoutSeconds
            self.minValidSeconds = minValidSeconds
        }
    }

    case token(Common)
    case gitCredential(Common, operation: String, username: String?)
    case kubeCredential(Common, apiVersion: String?)
    /// Docker's credential helper: the user comes from the mapping file, so `Common.user` is
    /// empty.
    case dockerCredential(Common, operation: String)
    case googleCredential(Common, tokenType: GoogleExecutableResponse.TokenType)

    /// `docker-credential-tokend OP …` (the program run through its link) as
    /// `docker-credential OP …`; other command lines unchanged.
    public static func arguments(programName: String, _ arguments: [String]) -> [String] {
        let base = programName.lastIndex(of: "/").map { programName[programName.index(after: $0)...] } ?? programName[...]
        return base == DockerCredentialHelper.programName ? ["docker-credential"] + arguments : arguments
    }

    /// Reads `arguments` (without the program name), or returns `nil`. What each subcommand
    /// takes comes from its ``OneShotSyntax``, the table its full-parser declaration uses too.
    public static func parse(_ arguments: [String]) -> OneShotCommandLine? {
        // No Set or Dictionary here: see ``OneShotSyntax/OptionValue``.
        var syntax: OneShotSyntax?
        var allowed = OneShotSyntax.global  // before the subcommand: the global ones
        var options: [OneShotSyntax.OptionValue] = []
        var positionals: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument.hasPrefix("--") {
                let parts = argument.dropFirst(2).split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let key = String(parts[0])
                guard allowed.contains(where: { $0.name == key }), options.value(of: key) == nil else { return nil }
                if parts.count == 2 {
                    options.append(.init(name: key, value: String(parts[1])))
                } else {
                    guard index < arguments.count, !arguments[index].hasPrefix("-") || arguments[index] == "-" else { return nil }
                    options.append(.init(name: key, value: arguments[index]))
                    index += 1
                }
            } else if argument.hasPrefix("-"), argument != "-" {
                return nil
            } else if syntax == nil {
                guard let found = OneShotSyntax.all.first(where: { $0.subcommand == argument }) else { return nil }
                allowed = found.fastOptions
                syntax = found
            } else {
                positionals.append(argument)
            }
        }
        guard let syntax else { return nil }
        let user: String
        if syntax.takesUser {
            guard let first = positionals.first, Identifier.isValid(first) else { return nil }
            user = first
            positionals.removeFirst()
        } else {
            user = ""
        }
        guard positionals.count == syntax.operands,
            let timeout = Self.integer(options.value(of: OneShotSyntax.timeout.name), default: OneShotSyntax.timeout),
            (1...3600).contains(timeout),
            let minValid = Self.integer(options.value(of: syntax.minValid.name), default: syntax.minValid), minValid >= 0
        else { return nil }
        let socket = options.value(of: OneShotSyntax.socket.name)
        if let socket, socket.isEmpty { return nil }
        let common = Common(user: user, socket: socket, timeoutSeconds: timeout, minValidSeconds: minValid)
        return syntax.make(common, OneShotSyntax.Reading(operands: positionals, values: options))
    }

    /// `text` as a whole number, else the option's default; `nil` when neither is one.
    private static func integer(_ text: String?, default option: OneShotSyntax.Option) -> Int? {
        (text ?? option.defaultValue).flatMap { Int($0) }
    }
}
