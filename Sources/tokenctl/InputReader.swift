#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads secrets from stdin or a file, never from the command line (where `ps` shows them).
enum InputReader {
    struct ReadError: Error, CustomStringConvertible {
        var description: String
    }

    /// All of stdin, up to `limit` bytes.
    static func readStandardInput(limit: Int) throws(ReadError) -> [UInt8] {
        try readAll(fileDescriptor: 0, limit: limit, name: "stdin")
    }

    /// All of the file at `path`, up to `limit` bytes.
    static func readFile(_ path: String, limit: Int) throws(ReadError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw ReadError(description: "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        return try readAll(fileDescriptor: fd, limit: limit, name: path)
    }

    /// Whether stdin is a terminal (so a prompt on stderr helps).
    static var standardInputIsTerminal: Bool { isatty(0) == 1 }

    private static func readAll(fileDescriptor fd: Int32, limit: Int, name: String) throws(ReadError) -> [UInt8] {
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw ReadError(description: "cannot read \(name): \(String(cString: strerror(errno)))")
            }
            if count == 0 { return result }
            result.append(contentsOf: chunk[..<count])
            if result.count > limit {
                throw ReadError(description: "\(name) holds more than \(limit / 1024) KiB")
            }
        }
    }
}
