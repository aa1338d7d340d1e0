import CTokendShims

#if canImport(Glibc)
    import Glibc
#endif

/// Process-wide protections tokend applies to itself at start, before any secret is read.
public enum ProcessHardening {
    /// Marks the process not dumpable (`PR_SET_DUMPABLE` 0): a crash leaves no core file with
    /// tokens in it, `/proc/PID/{mem,environ,…}` become root's, and processes of the same uid
    /// may not `ptrace` it. The unit's `LimitCORE=0` does the same only under systemd; this
    /// covers a daemon started by hand too. Returns the error text when the kernel refused.
    @discardableResult
    public static func disableCoreDumps() -> String? {
        guard tokend_set_not_dumpable() == 0 else { return String(cString: strerror(errno)) }
        return nil
    }

    /// Whether the process is dumpable now (`PR_GET_DUMPABLE` ≠ 0).
    public static var isDumpable: Bool { tokend_get_dumpable() != 0 }
}
