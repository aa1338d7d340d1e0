import NIOCore
import TokendCore

#if canImport(Glibc)
    import Glibc
#endif

/// Reads who is on the other end of an accepted Unix-socket connection from the kernel.
///
/// SwiftNIO has no peer-credentials API, so this goes through `SocketOptionProvider`:
/// `SO_PEERCRED` gives pid, uid and gid as they were when the peer called `connect()`;
/// `SO_PEERGROUPS` gives its supplementary groups. Neither can be forged by the peer.
/// `SO_PEERPIDFD` (Linux 6.5 and later) gives a pidfd of the process that connected, from which
/// its program's facts are read when a program reader needs them (``ProgramIdentity``); with it,
/// the connection traces which process wrote each call (``CallSenders``).
enum PeerCredentials {
    /// An accepted connection's caller, and the process that connected (`nil` without a
    /// pidfd: then program readers grant nothing).
    struct Peer {
        var caller: CallerIdentity
        var program: ConnectedProgram?

        /// Once the connection is admitted, while some credential has a program reader (else
        /// nothing: the connection does no more work than without program readers, and its calls
        /// have no known writer): reads which file the connecting process runs, and traces who
        /// writes each call (``CallSenders``), for as long as program readers remain. `nil`
        /// without a pidfd, or where NIO does not expose the socket (then every call's writer is
        /// unknown).
        func traceSenders(of channel: any Channel, programReaders: ProgramReaderPresence) throws -> CallSenders? {
            guard let program, programReaders.isPresent else { return nil }
            program.noteAccepted()
            let operations = channel.pipeline.syncOperations
            guard let descriptor = try operations.withUnsafeTransportIfAvailable(of: NIOBSDSocket.Handle.self, { $0 }) else {
                return nil
            }
            let senders = CallSenders(descriptor: descriptor, connector: caller.pid, isTracing: { programReaders.isPresent })
            try channel.syncOptions?.setOption(.recvAllocator, value: SenderStampingAllocator(senders: senders))
            // One read per readiness: the peek before it then always finds what it will read.
            // After a read that filled its buffer, NIO would read again at once, and what
            // arrives between that peek and that read would have no known writer.
            try channel.syncOptions?.setOption(.maxMessagesPerRead, value: 1)
            return senders
        }
    }

    /// Mirrors glibc's `struct ucred`, which Swift cannot see.
    struct UCred: Sendable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// Room for 256 supplementary groups; larger lists (rare) are read into 65,536.
    typealias SmallGroupList = InlineArray<256, UInt32>
    typealias LargeGroupList = InlineArray<65536, UInt32>

    static let soPeerCred: SocketOptionName = 17
    static let soPeerGroups: SocketOptionName = 59
    /// Not in Debian 12's headers.
    static let soPeerPidfd: SocketOptionName = 77

    /// The caller's identity, read on the channel's event loop (in its initializer, before the
    /// first read).
    static func read(from channel: any Channel) -> EventLoopFuture<Peer> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(PeerCredentialsError.unsupportedChannel)
        }
        let level = SocketOptionLevel(SOL_SOCKET)
        let credentials: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(level: level, name: soPeerCred)
        return credentials.flatMap { ucred in
            let small: EventLoopFuture<SmallGroupList> = provider.unsafeGetSocketOption(level: level, name: soPeerGroups)
            return small.map { groupIDs(from: $0) }.flatMapError { _ in
                // ERANGE: more than 256 groups. Try the large buffer; failing that, no
                // supplementary groups at all, which can only deny, never grant.
                let large: EventLoopFuture<LargeGroupList> = provider.unsafeGetSocketOption(level: level, name: soPeerGroups)
                return large.map { groupIDs(from: $0) }.recover { _ in [] }
            }.flatMap { groups in
                // None before Linux 6.5: no program facts, so program readers grant nothing.
                peerPidfd(provider).map { pidfd in
                    let program = pidfd.map { ConnectedProgram(pidfd: $0, pid: ucred.pid) }
                    return Peer(
                        caller: CallerIdentity(
                            uid: ucred.uid, gid: ucred.gid, pid: ucred.pid, supplementaryGroups: groups, program: program?.source),
                        program: program)
                }
            }
        }
    }

    /// A pidfd of the process that connected (`SO_PEERPIDFD`), or nil where the kernel gives none
    /// (`ENOPROTOOPT` before Linux 6.5). The caller owns the descriptor.
    static func peerPidfd(_ provider: any SocketOptionProvider) -> EventLoopFuture<Int32?> {
        let pidfd: EventLoopFuture<Int32> = provider.unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: soPeerPidfd)
        return pidfd.map { $0 >= 0 ? $0 : nil }.recover { _ in nil }
    }

    /// Extracts the group ids from a zero-filled buffer the kernel wrote into.
    ///
    /// NIO does not return the length `getsockopt` reported, so the end of the list is found
    /// from the data: the kernel keeps a process's groups sorted ascending (`groups_sort`), so
    /// only gid 0 can come before a non-zero gid, and trailing zeros are padding. The one
    /// ambiguous case, an all-zero buffer, is read as "no supplementary groups": it may deny
    /// membership of gid 0 held as a supplementary group, but it never grants one not held.
    static func groupIDs<Buffer>(from buffer: Buffer) -> [UInt32] {
        withUnsafeBytes(of: buffer) { raw in
            let gids = raw.bindMemory(to: UInt32.self)
            guard let last = gids.lastIndex(where: { $0 != 0 }) else { return [] }
            return Array(gids[0...last])
        }
    }
}

enum PeerCredentialsError: Error, CustomStringConvertible {
    case unsupportedChannel
    var description: String { "the connection does not expose socket options" }
}
