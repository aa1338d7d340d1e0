#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The wall clock, read in the few places that turn an absolute time from the daemon into a
/// relative one for a message. Pure helpers take `now` as a parameter instead.
enum WallClock {
    /// Seconds since the epoch.
    static func nowSeconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec)
    }
}
