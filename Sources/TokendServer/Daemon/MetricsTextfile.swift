import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// Writes the metrics to a file for node_exporter's textfile collector: atomically (a new
/// temporary file with a random name in the same directory, then `rename`), after changes
/// (coalesced) and at least every `interval`.
struct MetricsTextfile: Sendable {
    let path: String
    let interval: Duration
    let exporter: MetricsExporter
    let changes: ChangeSignal
    let logger: Logger

    /// Writes until cancelled.
    func run() async {
        var seen = changes.generation
        var failing = false
        while !Task.isCancelled {
            do {
                try write()
                if failing { logger.notice("writing the metrics file works again", metadata: ["path": "\(path)"]) }
                failing = false
            } catch {
                if !failing { logger.warning("cannot write the metrics file: \(error)", metadata: ["path": "\(path)"]) }
                failing = true
            }
            seen = await nextChange(after: seen)
            // Coalesce a burst of changes into one write.
            try? await Task.sleep(for: .milliseconds(500))
        }
    }

    /// Waits for a change or for `interval`, whichever comes first.
    private func nextChange(after seen: UInt64) async -> UInt64 {
        let changes = self.changes
        let interval = self.interval
        return await withTaskGroup(of: UInt64?.self) { tasks in
            tasks.addTask { await changes.wait(after: seen) }
            tasks.addTask {
                try? await Task.sleep(for: interval)
                return nil
            }
            _ = await tasks.next()
            tasks.cancelAll()
            return changes.generation
        }
    }

    /// Writes the file once.
    func write() throws {
        let bytes = exporter.render()
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { String(path[..<$0]) } ?? "."
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        // node_exporter reads only *.prom files, so the temporary name is never collected. The
        // name is random and created with O_EXCL, as token files are: in a folder others may
        // write, nothing planted beforehand (a file, a symlink, a hard link) is opened, written
        // through or renamed into place.
        let temporary = "\(directory.isEmpty ? "" : directory)/.\(name).\(String(UInt64.random(in: 0...UInt64.max), radix: 16)).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else { throw TextfileError("cannot create \(temporary): \(String(cString: strerror(errno)))") }
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                let code = errno
                close(fd)
                unlink(temporary)
                throw TextfileError("cannot write \(temporary): \(String(cString: strerror(code)))")
            }
            offset += written
        }
        fchmod(fd, 0o644)
        close(fd)
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw TextfileError("cannot rename \(temporary) to \(path): \(String(cString: strerror(code)))")
        }
    }
}

struct TextfileError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
