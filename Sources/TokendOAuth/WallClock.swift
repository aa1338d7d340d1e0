import TokendCore

#if canImport(Glibc)
    import Glibc
#endif

/// The system's wall clock, as a `Timestamp`: for the daemon's deadlines, and for the `iat` of
/// what tokend signs (client assertions).
public enum WallClock {
    @Sendable public static func now() -> Timestamp {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Timestamp(millisecondsSince1970: Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000)
    }
}
