import Crypto

#if canImport(Glibc)
    import Glibc
#endif

/// The SHA-256 of an open file's contents, read from its start in 1 MiB blocks (the daemon
/// hashes a calling program's executable for `exe:PATH@sha256:HEX` readers).
public enum FileDigest {
    /// Why a file was not hashed.
    public enum Failure: Error, Sendable, Hashable, CustomStringConvertible {
        case tooLarge(limit: Int)
        case readFailed(errno: Int32)

        public var description: String {
            switch self {
            case .tooLarge(let limit): "the file is larger than \(limit / (1 << 20)) MiB"
            case .readFailed(let code): "reading it failed (errno \(code))"
            }
        }
    }

    /// 64 lower-case hex digits of the SHA-256 of `fd`'s contents (read with `pread` from offset
    /// 0, so the descriptor's offset is left alone); fails past `limit` bytes.
    public static func sha256(of fd: Int32, limit: Int) -> Result<String, Failure> {
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(offset)) }
            if count < 0 {
                if errno == EINTR { continue }
                return .failure(.readFailed(errno: errno))
            }
            if count == 0 { break }
            offset += count
            if offset > limit { return .failure(.tooLarge(limit: limit)) }
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        }
        let hex: [Character] = Array("0123456789abcdef")
        return .success(String(hasher.finalize().flatMap { [hex[Int($0 >> 4)], hex[Int($0 & 0xF)]] }))
    }
}
