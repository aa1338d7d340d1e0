import TokendClient

/// What `tokenctl store adopt` prints: what the adoption did (or, with `--dry-run`, would do),
/// the credentials it vouches for with who may read them, and those that stay refused.
///
/// Pure: a ``StoreAdoption`` in, lines out.
public enum StoreAdoptionText {
    public static func render(_ adoption: StoreAdoption) -> String {
        var lines: [String] = []
        let would = adoption.dryRun ? "Would tag" : "Tagged"
        var store = "Store \(adoption.storeID)"
        if let recorded = adoption.recordedStoreID { store += " (this node knew store \(recorded))" }
        lines.append(store)
        if adoption.schemaVersionBefore != adoption.schemaVersion {
            lines.append("Schema version \(adoption.schemaVersionBefore) → \(adoption.schemaVersion)")
        }
        if let held = adoption.heldBecause { lines.append("This node served none of its credentials: \(held)") }
        if adoption.taggedCount > 0 {
            lines.append("")
            lines.append(
                "\(would) \(credentials(adoption.taggedCount)) without a tag, as \(adoption.taggedCount == 1 ? "it stands" : "they stand"); check who may read \(adoption.taggedCount == 1 ? "it" : "them"):"
            )
            lines += table(adoption.tagged, total: adoption.taggedCount)
        }
        if adoption.carriedOver > 0 {
            lines.append("")
            lines.append(
                "\(adoption.dryRun ? "Would carry" : "Carried") over \(credentials(adoption.carriedOver)) tagged in an earlier format.")
        }
        if adoption.rolledBackCount > 0 {
            lines.append("")
            let outcome =
                adoption.restored
                ? "\(adoption.dryRun ? "would be" : "are") served (--restored)"
                : "stay refused (after a restore on purpose, --restored serves them)"
            lines.append("\(credentials(adoption.rolledBackCount)) older than this node had seen (rolled back) \(outcome):")
            lines += table(adoption.rolledBack, total: adoption.rolledBackCount)
        }
        if adoption.refusedCount > 0 {
            lines.append("")
            lines.append("\(credentials(adoption.refusedCount)) stay refused:")
            lines += table(adoption.refused, total: adoption.refusedCount)
        }
        lines.append("")
        if adoption.dryRun {
            lines.append("Nothing was changed (--dry-run). Without it, this node would serve \(credentials(adoption.credentials)).")
        } else {
            lines.append("Adopted the store: this node serves \(credentials(adoption.credentials)) from it.")
        }
        return lines.joined(separator: "\n")
    }

    static func credentials(_ count: Int) -> String { count == 1 ? "1 credential" : "\(count) credentials" }

    /// One line per credential: name, provider, readers, owner, generation and problem.
    static func table(_ rows: [StoreAdoption.Credential], total: Int) -> [String] {
        let width = min(40, rows.map(\.userIdentifier.count).max() ?? 0)
        var lines = rows.map { row in
            var line = "  " + row.userIdentifier + String(repeating: " ", count: max(0, width - row.userIdentifier.count))
            line += "  provider \(row.provider)  readers \(row.readers.isEmpty ? "-" : row.readers.joined(separator: ","))"
            line += "  enrolled by uid \(row.enrolledUID)  generation \(row.generation)"
            if let problem = row.problem { line += ": \(problem)" }
            return line
        }
        if total > rows.count { lines.append("  … and \(total - rows.count) more") }
        return lines
    }
}
