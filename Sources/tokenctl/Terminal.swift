import ArgumentParser
import TokenctlSupport
import TokendClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Output to the terminal and failure exits. stdout carries only results (for `token`, only
/// the token); everything else goes to stderr.
enum Terminal {
    /// Writes `message` and a newline to stderr.
    /// Each of `warnings` on stderr as `tokenctl: warning: …`.
    static func warn(_ warnings: [String]) {
        for warning in warnings { writeError("tokenctl: warning: \(StatusTable.clean(warning))") }
    }

    static func writeError(_ message: String) {
        writeLine(fileDescriptor: 2, message)
    }

    private static func writeLine(fileDescriptor: Int32, _ message: String) {
        var bytes = Array(message.utf8)
        if bytes.last != UInt8(ascii: "\n") { bytes.append(UInt8(ascii: "\n")) }
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = write(fileDescriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += written
            }
        }
    }

    /// Writes `line` and a newline to stdout at once (no buffering: `watch` output is read
    /// as it happens, often through a pipe).
    static func writeOutput(_ line: String) {
        writeLine(fileDescriptor: 1, line)
    }

    /// Reports `error` on stderr and returns the exit code to throw for it.
    static func fail(_ error: TokendClientError) -> ExitCode {
        writeError("tokenctl: \(error.message)")
        return ExitCode(TokenctlExitStatus.status(for: error))
    }

    /// Reports an input problem (not a usage error ArgumentParser would print help for).
    static func failInput(_ message: String) -> ExitCode {
        writeError("tokenctl: \(message)")
        return ExitCode(TokenctlExitStatus.usage)
    }

    /// Ends the process with `status`.
    static func exitProcess(_ status: Int32) -> Never {
        exit(status)
    }

    /// The current time in seconds since the epoch.
    static func now() -> Int64 {
        Int64(time(nil))
    }
}
