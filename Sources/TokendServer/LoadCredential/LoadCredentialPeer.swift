import NIOCore
import TokendCore

#if canImport(Glibc)
    import Glibc
#endif

/// What the kernel says about a connection on the `LoadCredential=` socket: the name the peer's
/// socket is bound to, its uid and pid (`SO_PEERCRED`), and a pidfd of the process that
/// connected (`SO_PEERPIDFD`, Linux 6.5 and later), from which its unit is read.
final class LoadCredentialPeer: Sendable {
    let uid: UInt32
    let gid: UInt32
    let pid: Int32
    /// `sun_path` of the peer's address, zero-filled after the name (empty when unknown).
    let path: [UInt8]
    /// `nil` when the kernel gave none (before Linux 6.5).
    let pidfd: Int32?

    init(uid: UInt32, gid: UInt32, pid: Int32, path: [UInt8], pidfd: Int32?) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.path = path
        self.pidfd = pidfd
    }

    deinit {
        if let pidfd { close(pidfd) }
    }

    /// Reads the peer of an accepted connection, on its event loop.
    static func read(from channel: any Channel) -> EventLoopFuture<LoadCredentialPeer> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(PeerCredentialsError.unsupportedChannel)
        }
        let level = SocketOptionLevel(SOL_SOCKET)
        let credentials: EventLoopFuture<PeerCredentials.UCred> = provider.unsafeGetSocketOption(
            level: level, name: PeerCredentials.soPeerCred)
        return credentials.flatMap { ucred in
            // None before Linux 6.5: the unit cannot be checked, and every request is refused.
            PeerCredentials.peerPidfd(provider).map { pidfd in
                LoadCredentialPeer(uid: ucred.uid, gid: ucred.gid, pid: ucred.pid, path: peerPath(of: channel), pidfd: pidfd)
            }
        }
    }

    /// The bytes of the peer's `sun_path` (NIO reads the address with `getpeername` into a
    /// zeroed buffer when it accepts the connection).
    static func peerPath(of channel: any Channel) -> [UInt8] {
        guard case .unixDomainSocket(let address)? = channel.remoteAddress else { return [] }
        return withUnsafeBytes(of: address.address.sun_path) { Array($0) }
    }

    /// The outermost unit of the process that connected (``ProgramFacts/unit(fromCgroup:)``):
    /// its `/proc/PID/cgroup` is read, and then the pidfd checked to still refer to a live
    /// process, so that the pid was not reused for another process meanwhile.
    func unit() -> Result<String?, ProgramFactsUnavailable> {
        guard let pidfd else { return .failure(.noPidfd) }
        // 0: the process is in a pid namespace tokend cannot see into.
        guard pid > 0 else { return .failure(.unreadable("the connecting process has no pid in tokend's pid namespace")) }
        let cgroup = ProgramIdentity.readSmallFile("/proc/\(pid)/cgroup")
        guard ProgramIdentity.isAlive(pidfd) else { return .failure(.processExited) }
        switch cgroup {
        case .failure(let failure):
            return .failure(.unreadable("/proc/\(pid)/cgroup is not readable (\(String(cString: strerror(failure.code))))"))
        case .success(let text):
            return .success(ProgramFacts.unit(fromCgroup: text))
        }
    }

    /// Who is asking, as the refresh engine counts callers.
    var caller: CallerIdentity { CallerIdentity(uid: uid, gid: gid, pid: pid) }
}
