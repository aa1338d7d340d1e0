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
        let base = programName.split(separator: "/").last.map(String.init) ?? programName
        return base == DockerCredentialHelper.programName ? ["docker-credential"] + arguments : arguments
    }

    /// Reads `arguments` (without the program name), or returns `nil`.
    public static func parse(_ arguments: [String]) -> OneShotCommandLine? {
        var name: String?
        var allowed: Set<String> = ["--socket", "--timeout"]  // before the subcommand: the global ones
        var options: [String: String] = [:]
        var positionals: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument.hasPrefix("--") {
                let parts = argument.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let key = String(parts[0])
                guard allowed.contains(key), options[key] == nil else { return nil }
                if parts.count == 2 {
                    options[key] = String(parts[1])
                } else {
                    guard index < arguments.count, !arguments[index].hasPrefix("-") || arguments[index] == "-" else { return nil }
                    options[key] = arguments[index]
                    index += 1
                }
            } else if argument.hasPrefix("-"), argument != "-" {
                return nil
            } else if name == nil {
                switch argument {
                case "token": allowed.formUnion(["--min-valid"])
                case "git-credential": allowed.formUnion(["--min-valid", "--username"])
                case "kube-credential": allowed.formUnion(["--min-valid", "--api-version"])
                case "docker-credential": allowed.formUnion(["--min-valid"])
                case "google-credential": allowed.formUnion(["--min-valid", "--token-type"])
                default: return nil
                }
                name = argument
            } else {
                positionals.append(argument)
            }
        }
        guard let name else { return nil }
        if name == "docker-credential" { positionals.insert("", at: 0) }
        guard let user = positionals.first, user.isEmpty ? name == "docker-credential" : Identifier.isValid(user) else { return nil }
        let defaultMinValid = name == "token" ? 0 : 60
        guard let timeout = options["--timeout"].map(Int.init) ?? 10, (1...3600).contains(timeout),
            let minValid = options["--min-valid"].map(Int.init) ?? defaultMinValid, minValid >= 0
        else { return nil }
        if let socket = options["--socket"], socket.isEmpty { return nil }
        let common = Common(user: user, socket: options["--socket"], timeoutSeconds: timeout, minValidSeconds: minValid)
        switch name {
        case "token":
            guard positionals.count == 1 else { return nil }
            return .token(common)
        case "git-credential":
            guard positionals.count == 2 else { return nil }
            return .gitCredential(common, operation: positionals[1], username: options["--username"])
        case "docker-credential":
            guard positionals.count == 2 else { return nil }
            return .dockerCredential(common, operation: positionals[1])
        case "google-credential":
            guard positionals.count == 1,
                let tokenType = options["--token-type"].map(GoogleExecutableResponse.TokenType.init(rawValue:)) ?? .jwt
            else { return nil }
            return .googleCredential(common, tokenType: tokenType)
        default:
            guard positionals.count == 1 else { return nil }
            return .kubeCredential(common, apiVersion: options["--api-version"])
        }
    }
}
