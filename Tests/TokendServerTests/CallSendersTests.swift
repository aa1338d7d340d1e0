import Foundation
import Testing
import TokendCore

@testable import TokendServer

#if canImport(Glibc)
    import Glibc
#endif

/// Who wrote each call (``CallSenders``), over a real socket pair with `SO_PASSCRED`: bytes this
/// process writes and bytes a child process writes, each traced to its writer.
@Suite(.serialized)
struct CallSendersTests {
    /// A connected pair: `reader` has `SO_PASSCRED`, as an accepted connection of tokend's has.
    final class Pair {
        let reader: Int32
        let writer: Int32

        init() throws {
            var ends: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &ends) == 0 else { throw POSIXError(.EIO) }
            reader = ends[0]
            writer = ends[1]
            var on: Int32 = 1
            guard setsockopt(reader, SOL_SOCKET, SO_PASSCRED, &on, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
                throw POSIXError(.EIO)
            }
        }

        deinit {
            close(reader)
            close(writer)
        }

        func write(_ text: String) {
            let count = Array(text.utf8).withUnsafeBytes { Glibc.write(writer, $0.baseAddress, $0.count) }
            #expect(count == text.utf8.count)
        }

        /// Writes `text` and a NUL from a child process (`printf` with the writer as its
        /// stdout); its pid.
        func writeFromAChild(_ text: String) throws -> Int32 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/printf")
            process.arguments = ["%s\\0", text]
            process.standardOutput = FileHandle(fileDescriptor: writer, closeOnDealloc: false)
            try process.run()
            process.waitUntilExit()
            return process.processIdentifier
        }

        /// What NIO does for a read: asks for the buffer's size (the peek), reads, records.
        func read(into senders: CallSenders) -> Int {
            senders.willRead()
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = buffer.withUnsafeMutableBytes { Glibc.read(reader, $0.baseAddress, $0.count) }
            if count > 0 { senders.didRead(count) }
            return count
        }
    }

    @Test func callsTheConnectorWroteAreItsOwn() throws {
        let pair = try Pair()
        let senders = CallSenders(descriptor: pair.reader, connector: getpid(), isTracing: { true })
        pair.write("first\0second\0")
        #expect(pair.read(into: senders) == 13)
        #expect(senders.sender(ofNext: 6) == .connector(pid: getpid()))
        #expect(senders.sender(ofNext: 7) == .connector(pid: getpid()))
    }

    @Test func aCallAnotherProcessWroteIsItsAndOneReadNeverJoinsTwoWriters() throws {
        let pair = try Pair()
        let senders = CallSenders(descriptor: pair.reader, connector: getpid(), isTracing: { true })
        pair.write("mine\0")
        let child = try pair.writeFromAChild("theirs")
        pair.write("mine again\0")
        // Three writers' bytes are queued; the kernel returns each writer's in a read of its own.
        #expect(pair.read(into: senders) == 5)
        #expect(pair.read(into: senders) == 7)
        #expect(pair.read(into: senders) == 11)
        #expect(senders.sender(ofNext: 5) == .connector(pid: getpid()))
        #expect(senders.sender(ofNext: 7) == .anotherProcess(pid: child, connector: getpid()))
        #expect(senders.sender(ofNext: 11) == .connector(pid: getpid()))
    }

    @Test func aCallPartlyWrittenByAnotherProcessIsNotTheConnectors() throws {
        let pair = try Pair()
        let senders = CallSenders(descriptor: pair.reader, connector: getpid(), isTracing: { true })
        pair.write("half a ")
        let child = try pair.writeFromAChild("call")
        #expect(pair.read(into: senders) == 7)
        #expect(pair.read(into: senders) == 5)
        #expect(senders.sender(ofNext: 12) == .anotherProcess(pid: child, connector: getpid()))
    }

    @Test func bytesReadWhileNotTracingHaveNoKnownWriter() throws {
        let pair = try Pair()
        let tracing = Tracing()
        let senders = CallSenders(descriptor: pair.reader, connector: getpid(), isTracing: { tracing.on })
        pair.write("before\0")
        #expect(pair.read(into: senders) == 7)
        tracing.on = true
        pair.write("after\0")
        #expect(pair.read(into: senders) == 6)
        #expect(senders.sender(ofNext: 7) == .unknown)
        #expect(senders.sender(ofNext: 6) == .connector(pid: getpid()))
    }

    /// A connector tokend cannot see (pid 0, another pid namespace) is nobody's match.
    @Test func aConnectorWithoutAVisiblePidWritesNothingOfItsOwn() throws {
        let pair = try Pair()
        let senders = CallSenders(descriptor: pair.reader, connector: 0, isTracing: { true })
        pair.write("call\0")
        #expect(pair.read(into: senders) == 5)
        #expect(senders.sender(ofNext: 5) == .anotherProcess(pid: getpid(), connector: 0))
    }

    /// A connection accepted while the listening socket did not ask for stamps never has them:
    /// its calls have no known writer, and it is not peeked at again.
    @Test func aSocketWithoutStampsHasNoKnownWriters() throws {
        let pair = try Pair()
        var off: Int32 = 0
        #expect(setsockopt(pair.reader, SOL_SOCKET, SO_PASSCRED, &off, socklen_t(MemoryLayout<Int32>.size)) == 0)
        let peeks = Tracing()
        let senders = CallSenders(
            descriptor: pair.reader, connector: getpid(),
            isTracing: {
                peeks.count += 1
                return true
            })
        pair.write("one\0")
        #expect(pair.read(into: senders) == 4)
        pair.write("two\0")
        #expect(pair.read(into: senders) == 4)
        #expect(senders.sender(ofNext: 4) == .unknown)
        #expect(senders.sender(ofNext: 4) == .unknown)
        #expect(peeks.count == 1)
    }

    @Test func bytesNeverReadHaveNoKnownWriter() throws {
        let pair = try Pair()
        let senders = CallSenders(descriptor: pair.reader, connector: getpid(), isTracing: { true })
        #expect(senders.sender(ofNext: 5) == .unknown)
    }

    /// The summing up of one call's runs.
    @Test(arguments: [
        ([CallSenders.Stamp.pid(42)], CallSender.connector(pid: 42)),
        ([.pid(42), .pid(42)], .connector(pid: 42)),
        ([.pid(42), .unknown], .unknown),
        ([.unknown, .pid(7)], .anotherProcess(pid: 7, connector: 42)),
        ([.pid(7), .pid(8)], .anotherProcess(pid: 7, connector: 42)),
        ([.pid(0)], .anotherProcess(pid: 0, connector: 42)),
        ([], .unknown),
    ])
    func writersOfACall(stamps: [CallSenders.Stamp], sender: CallSender) {
        var writers = CallSenders.Writers()
        for stamp in stamps { writers.add(stamp, connector: 42) }
        #expect(writers.sender(connector: 42) == sender)
    }

    final class Tracing: @unchecked Sendable {
        // @unchecked: set and read on the test's one thread.
        var on = false
        var count = 0
    }
}
