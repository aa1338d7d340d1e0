import CTokendShims
import NIOCore
import TokendCore

#if canImport(Glibc)
    import Glibc
#endif

/// Which process wrote each call a connection reads, as the kernel stamped it.
///
/// The listening socket has `SO_PASSCRED`, which each accepted connection inherits: from then on
/// the kernel stamps every write with the writer's pid, and never returns the bytes of two
/// writers from one read. SwiftNIO reads stream sockets with `read(2)`, which drops the stamp,
/// and offers no hook around the system call; but it asks the channel's receive allocator for the
/// next buffer's size right before each read and tells it how much was read right after
/// (``SenderStampingAllocator``). Just before the read, tokend peeks at the stamp of the bytes at
/// the head of the queue (`recvmsg` with `MSG_PEEK`: nothing else reads this socket, so the read
/// returns those bytes, and only more of the same writer's); after it, the bytes are recorded
/// as that writer's. The frame decoder hands on every byte in order (each call and its NUL), so
/// ``sender(ofNext:)`` knows who wrote each call.
///
/// Peeking costs one system call per read, so it happens only while `isTracing` (some credential
/// has a program reader); bytes read otherwise are of an unknown writer, and program readers
/// refuse calls made of them. NIO reads once per readiness on such a connection
/// (`maxMessagesPerRead` 1), so the peek always finds the bytes the read returns; were it to find
/// none, what the read returned would be of an unknown writer too.
///
/// Used on the channel's event loop only.
final class CallSenders {
    /// Who wrote a run of bytes.
    enum Stamp: Equatable {
        case pid(Int32)
        case unknown
    }

    private let descriptor: CInt
    /// The pid of the process that connected (`SO_PEERCRED`); 0 where it is not visible.
    let connector: Int32
    private let isTracing: @Sendable () -> Bool
    /// Runs of bytes read but not yet taken by a call, oldest first.
    private var runs = CircularBuffer<(stamp: Stamp, count: Int)>(initialCapacity: 4)
    /// The stamp of what the coming read returns, when it was peeked.
    private var peeked: Stamp?
    /// The connection's bytes carry no stamps: it was accepted while the listening socket did not
    /// ask for them (no credential had a program reader), which does not change later.
    private var unstamped = false

    init(descriptor: CInt, connector: Int32, isTracing: @escaping @Sendable () -> Bool) {
        self.descriptor = descriptor
        self.connector = connector
        self.isTracing = isTracing
    }

    /// Called right before a read: learns who wrote the bytes it will return.
    func willRead() {
        peeked = nil
        guard !unstamped, isTracing() else { return }
        var pid: CInt = 0
        switch tokend_peek_sender(descriptor, &pid) {
        case 1: peeked = .pid(pid)
        case -1 where errno == ENODATA: unstamped = true
        default: break
        }
    }

    /// Called right after a read of `count` bytes.
    func didRead(_ count: Int) {
        let stamp = peeked ?? .unknown
        peeked = nil
        if let last = runs.last, last.stamp == stamp {
            runs[runs.index(before: runs.endIndex)].count += count
        } else {
            runs.append((stamp, count))
        }
    }

    /// Who wrote the next `count` bytes read (one call and its NUL), which are taken.
    func sender(ofNext count: Int) -> CallSender {
        var remaining = count
        var writers = Writers()
        while remaining > 0, let run = runs.first {
            let taken = min(run.count, remaining)
            remaining -= taken
            writers.add(run.stamp, connector: connector)
            if taken == run.count {
                runs.removeFirst()
            } else {
                runs[runs.startIndex].count -= taken
            }
        }
        if remaining > 0 { writers.add(.unknown, connector: connector) }
        return writers.sender(connector: connector)
    }

    /// The writers of a call's bytes, summed up run by run.
    struct Writers {
        private var connectorOnly = true
        private var another: Int32?
        private var any = false

        mutating func add(_ stamp: Stamp, connector: Int32) {
            any = true
            switch stamp {
            case .pid(let pid) where pid == connector && pid > 0: break
            case .pid(let pid):
                connectorOnly = false
                if another == nil { another = pid }
            case .unknown: connectorOnly = false
            }
        }

        /// The connector when it wrote every byte; another process when one did; else unknown.
        func sender(connector: Int32) -> CallSender {
            if let another { return .anotherProcess(pid: another, connector: connector) }
            return any && connectorOnly ? .connector(pid: connector) : .unknown
        }
    }
}

@available(*, unavailable)
extension CallSenders: Sendable {}

/// SwiftNIO's default receive allocator (``AdaptiveRecvByteBufferAllocator``), telling
/// ``CallSenders`` about each read of the connection: NIO calls ``nextBufferSize()`` right
/// before it reads and ``record(actualReadBytes:)`` right after (NIOPosix,
/// `BaseStreamSocketChannel.readFromSocket` through `NIOPooledRecvBufferAllocator`).
/// `ProgramReaderTests` fail if a SwiftNIO version stops doing so: the stamps would then be
/// unknown, and program readers would refuse.
struct SenderStampingAllocator: RecvByteBufferAllocator, @unchecked Sendable {
    // @unchecked: NIO uses a channel's receive allocator on that channel's event loop only, the
    // one place `senders` is used.
    var sizes = AdaptiveRecvByteBufferAllocator()
    let senders: CallSenders

    init(senders: CallSenders) {
        self.senders = senders
    }

    func buffer(allocator: ByteBufferAllocator) -> ByteBuffer {
        sizes.buffer(allocator: allocator)
    }

    func nextBufferSize() -> Int? {
        senders.willRead()
        return sizes.nextBufferSize()
    }

    mutating func record(actualReadBytes: Int) -> Bool {
        senders.didRead(actualReadBytes)
        return sizes.record(actualReadBytes: actualReadBytes)
    }
}
