#if canImport(Glibc)
    import Glibc
#endif

/// The user tokend.service runs as (`User=tokend`), and becoming it for `--check-config`, so
/// that the check reads every file the configuration names as the service will.
enum ServiceUser {
    static let name = "tokend"

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// The user to read the configuration as, after switching to it; nil: as the caller.
    ///
    /// Only root switches. `explicit` (`--as-user`) names the user (`root`: no switch); without
    /// it, the installed configuration is read as ``name`` when that user exists, since that is
    /// who reads it in the service; a file given with `--config` is read as the caller.
    static func checkingAs(explicit: String?, installedConfiguration: Bool) throws -> String? {
        guard geteuid() == 0 else {
            if let explicit { throw Failure(description: "--as-user \(explicit): only root can read files as another user") }
            return nil
        }
        let user: String
        if let explicit {
            user = explicit
        } else if installedConfiguration, getpwnam(name) != nil {
            user = name
        } else {
            return nil
        }
        guard user != "root" else { return nil }
        try become(user)
        return user
    }

    /// Switches this process to `user`: its groups, gid and uid, for good.
    static func become(_ user: String) throws {
        guard let entry = getpwnam(user) else { throw Failure(description: "--as-user: no user named \(user)") }
        let uid = entry.pointee.pw_uid
        let gid = entry.pointee.pw_gid
        guard initgroups(user, gid) == 0, setgid(gid) == 0, setuid(uid) == 0, geteuid() == uid, getegid() == gid else {
            throw Failure(description: "cannot switch to user \(user): \(String(cString: strerror(errno)))")
        }
    }
}
