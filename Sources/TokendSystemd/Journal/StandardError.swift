#if canImport(Glibc)
    import Glibc
#endif

/// Writes to file descriptor 2 directly: the `stderr` global is not concurrency-safe in Swift 6,
/// and a log line must not be lost to buffering when the daemon stops.
public enum StandardError {
    /// Writes all of `text`, or as much as the descriptor takes before an error.
    public static func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress, $0.count) }
            if written <= 0 { return }
            offset += written
        }
    }
}
