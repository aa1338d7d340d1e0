/// Who is asking on the `LoadCredential=` socket: the system manager reading a credential for
/// one of its services, or not.
///
/// The abstract name says which unit and ID are asked for, but any process can bind any name.
/// So the asker must be uid 0 (`SO_PEERCRED`), and the process that connected must itself be in
/// that unit: its cgroup's outermost unit (``ProgramFacts/unit(fromCgroup:)``, read through its
/// pidfd while it is alive) is the one in the name. systemd's helper that loads a unit's
/// credentials runs as root in the unit's cgroup; a root process elsewhere, or the unit's own
/// processes running as its `User=`, do not pass.
public enum LoadCredentialCaller {
    /// The checked request, or why it is refused.
    ///
    /// - Parameters:
    ///   - peerPath: `sun_path` of the connecting socket's address.
    ///   - uid: its uid (`SO_PEERCRED`).
    ///   - unit: reads the outermost unit of the connecting process; asked only when the name
    ///     and uid pass (`nil` inside: in no unit).
    public static func check(
        peerPath: [UInt8], uid: UInt32, unit: () -> Result<String?, ProgramFactsUnavailable>
    ) -> Result<LoadCredentialName, LoadCredentialRefusal> {
        let name: LoadCredentialName
        switch LoadCredentialName.parse(peerPath: peerPath) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let parsed): name = parsed
        }
        guard uid == 0 else { return .failure(.notTheSystemManager(uid: uid)) }
        switch unit() {
        case .failure(let unavailable): return .failure(.unitUnknown(unavailable))
        case .success(let seen):
            guard seen == name.unit else { return .failure(.otherUnit(asked: name.unit, seen: seen)) }
            return .success(name)
        }
    }
}
