#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The process's environment, and replacing the process with another program.
enum ProcessEnvironment {
    /// The current environment as `NAME=value` entries.
    static func current() -> [String] {
        var result: [String] = []
        let start: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = environ
        guard var entry = start else { return result }
        while let pointer = entry.pointee {
            result.append(String(cString: pointer))
            entry += 1
        }
        return result
    }

    /// Why the program could not be started, and the exit status to report it with (126: found
    /// but not runnable, 127: not found), as shells and `env(1)` do.
    struct Failure {
        var status: Int32
        var message: String
    }

    /// Replaces this process with `arguments[0]` (looked up in `$PATH` unless it contains a
    /// `/`), with `arguments` as its argv and `environment` as its environment. Returns only
    /// when that failed.
    static func execute(_ arguments: [String], environment: [String]) -> Failure {
        let program = arguments[0]
        let candidates: [String]
        if program.contains("/") {
            candidates = [program]
        } else {
            let path =
                environment.last(where: { $0.hasPrefix("PATH=") }).map { String($0.dropFirst(5)) }
                ?? "/usr/local/bin:/usr/bin:/bin"
            candidates = path.split(separator: ":", omittingEmptySubsequences: false).map { directory in
                (directory.isEmpty ? "." : String(directory)) + "/" + program
            }
        }
        // Nothing buffered may be lost, or written twice, when the process image goes.
        fflush(nil)
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer {
            for pointer in argv + envp { free(pointer) }
        }
        var sawDenied = false
        var lastError: Int32 = ENOENT
        for candidate in candidates {
            execve(candidate, argv, envp)
            lastError = errno
            if lastError == EACCES { sawDenied = true }
            // Only a missing file moves on to the next directory; anything else is final.
            if lastError != ENOENT && lastError != ENOTDIR && lastError != EACCES { break }
        }
        if sawDenied && (lastError == ENOENT || lastError == ENOTDIR) { lastError = EACCES }
        let message = lastError == ENOENT ? "command not found" : String(cString: strerror(lastError))
        return Failure(status: lastError == ENOENT || lastError == ENOTDIR ? 127 : 126, message: message)
    }
}
