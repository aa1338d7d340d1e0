import TokendClient
import TokendJSON

/// Docker's credential-helper protocol (docker-credential-helpers), for
/// `tokenctl docker-credential` and its link `docker-credential-tokend`.
///
/// Container tools (docker, skopeo, podman, buildah) run `docker-credential-<name>` with one
/// operation as its only argument: `get` (the registry on stdin; the answer is
/// `{"ServerURL","Username","Secret"}` on stdout), `store` (a credential as JSON on stdin),
/// `erase` (the registry on stdin) and `list` (a `{"<registry>": "<username>"}` object).
/// A registry without a credential is answered with ``notFound`` on stdout and a non-zero exit,
/// which the tools take as "log in anonymously".
///
/// The tools pass no other argument, so which tokend credential serves which registry comes
/// from the user's mapping file (``mappingPath(environment:)``): one line per registry,
/// `REGISTRY USER [USERNAME]`.
///
/// Pure: text in, text out.
public enum DockerCredentialHelper {
    /// The name the tools run: `credHelpers`/`credsStore` value `tokend`.
    public static let programName = "docker-credential-tokend"
    /// What a helper prints for a registry it has no credential for (the tools compare it).
    public static let notFound = "credentials not found in native keychain"
    /// The registry login's username when the mapping names none. Registries that take OAuth
    /// tokens as passwords ignore it; `<token>` would mean an identity token to Docker.
    public static let defaultUsername = "oauth2"

    /// What the tool asks.
    public enum Operation: Sendable, Hashable {
        case get, store, erase, list
        /// Not part of the protocol: a usage error.
        case other(String)

        public init(_ name: String) {
            switch name {
            case "get": self = .get
            case "store": self = .store
            case "erase": self = .erase
            case "list": self = .list
            default: self = .other(name)
            }
        }
    }

    /// One line of the mapping file: the registry whose logins take `user`'s token.
    public struct Entry: Sendable, Hashable {
        /// `host[:port]`, normalised by ``registry(serverURL:)``.
        public var registry: String
        /// The tokend user identifier.
        public var user: String
        /// The username sent with the token.
        public var username: String

        public init(registry: String, user: String, username: String = DockerCredentialHelper.defaultUsername) {
            self.registry = registry
            self.user = user
            self.username = username
        }
    }

    /// A mapping file line that cannot be used, with its line number.
    public struct MappingError: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String

        public init(description: String) { self.description = description }
    }

    /// The mapping file: `$XDG_CONFIG_HOME/tokend/docker-credentials`, else
    /// `$HOME/.config/tokend/docker-credentials`; `nil` without either variable.
    public static func mappingPath(environment: (String) -> String?) -> String? {
        if let config = environment("XDG_CONFIG_HOME"), config.hasPrefix("/") { return config + "/tokend/docker-credentials" }
        if let home = environment("HOME"), !home.isEmpty { return home + "/.config/tokend/docker-credentials" }
        return nil
    }

    /// Reads the mapping: `REGISTRY USER [USERNAME]` per line, separated by spaces or tabs;
    /// blank lines and lines starting with `#` are skipped. A registry named twice is an error,
    /// so the file cannot say two things.
    public static func mapping(_ text: String) throws(MappingError) -> [Entry] {
        var entries: [Entry] = []
        for (index, line) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            guard let first = fields.first, !first.hasPrefix("#") else { continue }
            let number = index + 1
            guard fields.count == 2 || fields.count == 3 else {
                throw MappingError(description: "line \(number): expected REGISTRY USER [USERNAME]")
            }
            let registry = registry(serverURL: first)
            guard !registry.isEmpty else { throw MappingError(description: "line \(number): the registry is empty") }
            guard Identifier.isValid(fields[1]) else {
                throw MappingError(description: "line \(number): '\(fields[1])' is not a user identifier")
            }
            let username = fields.count == 3 ? fields[2] : defaultUsername
            guard username != "<token>" else {
                throw MappingError(description: "line \(number): the username <token> means an identity token to Docker; use another")
            }
            guard !entries.contains(where: { $0.registry == registry }) else {
                throw MappingError(description: "line \(number): \(registry) is named twice")
            }
            entries.append(Entry(registry: registry, user: fields[1], username: username))
        }
        return entries
    }

    /// The registry a server URL names, as `host[:port]` in lower case: the scheme and any path
    /// are dropped (`https://index.docker.io/v1/` and `docker.io` are both Docker Hub,
    /// `docker.io`).
    public static func registry(serverURL: String) -> String {
        var text = Substring(serverURL.trimmingWhitespace())
        for scheme in ["https://", "http://"] where text.lowercased().hasPrefix(scheme) { text = text.dropFirst(scheme.count) }
        if let slash = text.firstIndex(of: "/") { text = text[..<slash] }
        let host = text.lowercased()
        switch host {
        case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com": return "docker.io"
        default: return host
        }
    }

    /// The entry for the registry `serverURL` names, if any.
    public static func entry(for serverURL: String, in entries: [Entry]) -> Entry? {
        let registry = registry(serverURL: serverURL)
        return entries.first { $0.registry == registry }
    }

    /// The answer to `get`.
    public static func answer(serverURL: String, entry: Entry, credentials: Credentials) -> String {
        render([
            "ServerURL": .string(serverURL.trimmingWhitespace()), "Username": .string(entry.username),
            "Secret": .string(credentials.accessToken),
        ])
    }

    /// The answer to `list`: each registry of `entries` and its username.
    public static func list(_ entries: [Entry]) -> String {
        var object: JSONObject = [:]
        for entry in entries { object[entry.registry] = .string(entry.username) }
        return render(object)
    }

    private static func render(_ object: JSONObject) -> String {
        var bytes: [UInt8] = []
        JSONWriter.write(object, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension String {
    fileprivate func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let start = firstIndex(where: { !isSpace($0) }), let end = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[start...end])
    }
}
