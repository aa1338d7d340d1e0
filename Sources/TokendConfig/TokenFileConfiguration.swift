/// A file that always holds a credential's current access token, for programs that can only
/// read a file (`[token_files.USER]`).
public struct TokenFileConfiguration: Sendable, Hashable {
    /// Where the token is written (atomically: a temporary file in the same folder, fsync, rename).
    public var path: String
    /// The file's mode. Who may read it is decided by this and by the folder's group (tokend
    /// runs without CAP_CHOWN: give the folder the readers' group and the setgid bit).
    public var mode: UInt32
    /// The uids that may enrol, replace and remove this credential themselves
    /// (`enrolling_uids`); otherwise only administrators may, so that nobody else can feed the
    /// file's readers a token of their choosing.
    public var enrollingUIDs: Set<UInt32>

    public init(path: String, mode: UInt32 = 0o640, enrollingUIDs: Set<UInt32> = []) {
        self.path = path
        self.mode = mode
        self.enrollingUIDs = enrollingUIDs
    }
}
