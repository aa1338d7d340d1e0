/// Where a keyring came from.
public struct KeySource: Sendable, Hashable, CustomStringConvertible {
    /// The kind of source.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case systemdCredential = "systemd credential"
            case keyFile = "key file"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// `$CREDENTIALS_DIRECTORY/tokend.key`, set up by systemd (`LoadCredentialEncrypted=`);
        /// read-only to tokend.
        public static var systemdCredential: Kind { Kind(.systemdCredential) }
        /// The key file named in the configuration; tokend may rewrite it to rotate keys.
        public static var keyFile: Kind { Kind(.keyFile) }

        public var description: String { base.rawValue }
    }

    /// The kind of source.
    public var kind: Kind
    /// The file the keys were read from.
    public var path: String
    /// Whether tokend created this key file just now (first start).
    public var wasGenerated: Bool

    /// Creates a source description.
    public init(kind: Kind, path: String, wasGenerated: Bool = false) {
        self.kind = kind
        self.path = path
        self.wasGenerated = wasGenerated
    }

    public var description: String { "\(kind) \(path)\(wasGenerated ? " (generated)" : "")" }
}

/// A keyring together with where it came from and whether tokend may rewrite that source.
public struct LoadedKeyring: Sendable, CustomStringConvertible {
    /// The keys.
    public var keyring: Keyring
    /// Where they came from.
    public var source: KeySource
    /// Whether tokend may rewrite the source (rotate keys, drop keys no longer used). False for
    /// a systemd credential.
    public var isWritable: Bool

    /// Creates a value; normally ``KeyringLoader/load(credentialsDirectory:keyFile:expectedOwner:)``
    /// does this.
    public init(keyring: Keyring, source: KeySource, isWritable: Bool) {
        self.keyring = keyring
        self.source = source
        self.isWritable = isWritable
    }

    public var description: String { "\(keyring) from \(source)" }
}
