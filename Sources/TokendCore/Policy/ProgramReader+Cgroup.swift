extension ProgramFacts {
    /// The unit the system manager put a process in, from the text of `/proc/PID/cgroup`: the
    /// first component below the slices of its cgroup v2 path (the `0::` line), or of the legacy
    /// `name=systemd` hierarchy when the v2 path is `/` or missing; `nil` when that component is
    /// no `.service` or `.scope`, or the path is not one systemd makes.
    ///
    /// Only the system manager creates cgroups at that level. Below it the unit's own processes
    /// may: a user's manager runs as `user@UID.service` and names the units it starts as the user
    /// likes (`systemd-run --user --unit=backup.service`), and a `Delegate=yes` unit makes and
    /// names its own sub-cgroups. Every process there is in that outer unit, as systemd itself
    /// reports it (`cg_path_get_unit`):
    ///
    /// - `0::/system.slice/backup.service` → `backup.service`
    /// - `0::/user.slice/user-1000.slice/user@1000.service/app.slice/backup.service` → `user@1000.service`
    /// - `0::/system.slice/other.service/backup.service` → `other.service`
    public static func unit(fromCgroup text: String) -> String? {
        var unified: [Substring] = []
        var legacy: [Substring] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            // hierarchy-ID:controller-list:cgroup-path; the path may itself contain ':'.
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            if fields[0] == "0" && fields[1].isEmpty {
                unified.append(fields[2])
            } else if fields[1] == "name=systemd" {
                legacy.append(fields[2])
            }
        }
        // The kernel writes each hierarchy once; anything else is not a file to decide on.
        guard unified.count <= 1, legacy.count <= 1 else { return nil }
        if let path = unified.first, path != "/" { return systemUnit(ofPath: path) }
        return legacy.first.flatMap(systemUnit(ofPath:))
    }

    /// The first component of an absolute cgroup path that is not a slice, if it is a `.service`
    /// or `.scope` unit. A path with a `.` or `..` component (a process outside tokend's cgroup
    /// namespace is shown as `/../…`) names no unit.
    static func systemUnit(ofPath path: Substring) -> String? {
        guard path.first == "/" else { return nil }
        let components = path.split(separator: "/")
        guard !components.contains(where: { $0 == "." || $0 == ".." }) else { return nil }
        guard let first = components.first(where: { !Reader.isUnitName(unescaped($0), type: ".slice") }) else { return nil }
        let name = unescaped(first)
        return Reader("unit:\(name)") != nil ? String(name) : nil
    }

    /// systemd prefixes `_` to a cgroup name that could clash with the kernel's own files
    /// (`cpu.service` is the directory `_cpu.service`) or that starts with `_`; one is removed.
    private static func unescaped(_ component: Substring) -> Substring {
        component.first == "_" ? component.dropFirst() : component
    }
}
