import Synchronization

/// Uniform values in 0...1 for refresh-time jitter, from a small generator seeded once from the
/// system's random source.
///
/// Jitter only spreads refreshes out; it needs no unpredictability, and `Double.random` costs
/// a `getrandom` system call each time, which is a noticeable share of planning a million
/// credentials at start-up.
enum JitterSource {
    private static let state = Mutex<UInt64>(UInt64.random(in: .min ... .max))

    /// The next value in 0...1 (SplitMix64).
    static func next() -> Double {
        let bits = state.withLock { state -> UInt64 in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        return Double(bits >> 11) / Double(1 << 53 - 1)
    }
}
