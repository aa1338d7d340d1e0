import TokendCore

#if canImport(Glibc)
    import Glibc
#endif

/// Looks up user and group names in the system's user database (NSS), for reader lists and
/// admin groups. Numeric forms (`1234`) are accepted wherever a name is.
enum SystemIdentity {
    static func userID(named name: String) -> UInt32? {
        if let id = UInt32(name) { return id }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, let result else { return nil }
        return result.pointee.pw_uid
    }

    static func groupID(named name: String) -> UInt32? {
        if let id = UInt32(name) { return id }
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, let result else { return nil }
        return result.pointee.gr_gid
    }

    static func resolve(_ readers: [Reader]) -> ResolvedReaders {
        ResolvedReaders(readers, userID: userID(named:), groupID: groupID(named:))
    }
}
