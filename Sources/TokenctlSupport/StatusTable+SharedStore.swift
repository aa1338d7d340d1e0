import TokendClient
import TokendProtocol

/// The shared store's part of `tokenctl status`: the nodes and the store's health in the header,
/// and a LEASE column naming the node that is refreshing each credential.
extension StatusTable {
    /// `; store postgresql, node b of a, b, c` and `; STORE UNAVAILABLE (reason)`; empty for a
    /// daemon that sent no store fields.
    static func storeSummary(_ daemon: DaemonStatus) -> String {
        var text = ""
        if let node = daemon.node {
            let nodes = (daemon.nodes ?? []).map(clean).joined(separator: ", ")
            text += "; store \(clean(daemon.store ?? "?")), node \(clean(node))" + (nodes.isEmpty ? "" : " of \(nodes)")
        }
        if let problem = daemon.storeProblem {
            text += "; STORE UNAVAILABLE (\(clean(problem))), serving tokens from memory"
        }
        return text
    }

    /// Adds a LEASE column (before LAST ERROR) when the daemon shares its store.
    /// - Parameters:
    ///   - table: the header row and the rows of `sorted`, in order.
    ///   - sorted: the credentials, sorted as the rows are.
    static func addingLeaseColumn(_ table: [[String]], sorted: [CredentialStatus], shared: Bool, now: Int64) -> [[String]] {
        guard shared, table.count == sorted.count + 1 else { return table }
        func insert(_ cell: String, into row: [String]) -> [String] {
            var row = row
            row.insert(cell, at: max(0, row.count - 1))
            return row
        }
        var result = [insert("LEASE", into: table[0])]
        for (row, status) in zip(table.dropFirst(), sorted) {
            var cell = "-"
            if let holder = status.leaseHolder {
                cell = clean(holder)
                if let until = status.leaseExpiresAt { cell += " (\(DurationText.until(until, now: now)))" }
            }
            result.append(insert(cell, into: row))
        }
        return result
    }
}
