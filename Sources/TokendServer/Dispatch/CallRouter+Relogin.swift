import NIOCore
import TokendCore
import TokendJSON
import TokendProtocol

/// `WatchReloginWarnings`: the re-login warnings of the credentials the caller may see.
extension CallRouter {
    /// The router has checked `more` (``MethodDescriptor/requiresMore``).
    func watchReloginWarnings(caller: CallerIdentity) -> CallOutcome {
        let hub = view.reloginHub
        return .stream { deliver in
            let (id, inForce) = hub.subscribe { [self] warning in
                guard self.mayReceive(warning, caller: caller, now: self.now()) else { return }
                deliver(Self.warningsReply([warning]))
            }
            let current = now()
            return (Self.warningsReply(inForce.filter { mayReceive($0, caller: caller, now: current) }), { hub.unsubscribe(id) })
        }
    }

    /// Whether `caller` hears `warning`: the credential still exists with that date ahead, its
    /// provider still warns, and the caller may see it in `Status` (administrators see all).
    func mayReceive(_ warning: ReloginWarning, caller: CallerIdentity, now current: Timestamp) -> Bool {
        guard let entry = view[warning.userIdentifier], let relogin = entry.relogin,
            relogin.at.secondsSince1970 == warning.reloginBy, relogin.at > current,
            entry.status.state != .reauthenticationRequired,
            settings.current.providers[entry.provider]?.relogin.thresholds.isEmpty == false
        else { return false }
        return settings.current.accessPolicy.mayInspect(caller, readers: entry.resolvedReaders)
    }

    /// One reply of the stream: `{"parameters":{"warnings":[…]},"continues":true}`.
    static func warningsReply(_ warnings: [ReloginWarning]) -> [UInt8] {
        var bytes: [UInt8] = []
        VarlinkReply(parameters: ["warnings": .array(warnings.map { .object($0.json) })], continues: true).encode(into: &bytes)
        return bytes
    }
}
