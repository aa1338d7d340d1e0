import TokendClient

/// What `tokenctl store adopt` prints: what the adoption did (or, with `--dry-run`, would do),
/// the credentials it vouches for with who may read them, and those that stay refused.
///
/// Pure: a ``StoreAdoption`` in, lines out.
public enum StoreAdoptionText {
    public static func render(_ adoption: StoreAdoption) -> String {
        var lines: [String] = []
        let would = adoption.dryRun ? "Would tag" : "Tagged"
        var store = "Store \(shown(adoption.storeID))"
        if let recorded = adoption.recordedStoreID { store += " (this node knew store \(shown(recorded)))" }
        lines.append(store)
        if adoption.schemaVersionBefore != adoption.schemaVersion {
            lines.append("Schema version \(adoption.schemaVersionBefore) → \(adoption.schemaVersion)")
        }
        if let held = adoption.heldBecause { lines.append("This node served none of its credentials: \(shown(held))") }
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

    /// `text` (a column of the database, which whoever can write it chooses) as a terminal
    /// shows it: control characters (a carriage return, an escape sequence that erases a line)
    /// and the formatting characters that reorder text (bidirectional overrides and isolates) are
    /// written as `\u{XX}`, never dropped or cut, so every reader of a row is on its line.
    static func shown(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            let value = scalar.value
            if value < 0x20 || (0x7F..<0xA0).contains(value) || (0x200E...0x200F).contains(value)
                || (0x202A...0x202E).contains(value) || (0x2066...0x2069).contains(value) || value == 0x061C
            {
                result += "\\u{\(String(value, radix: 16, uppercase: true))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    static func credentials(_ count: Int) -> String { count == 1 ? "1 credential" : "\(count) credentials" }

    /// One line per credential: name, provider, readers, owner, generation and problem.
    static func table(_ rows: [StoreAdoption.Credential], total: Int) -> [String] {
        let width = min(40, rows.map { shown($0.userIdentifier).count }.max() ?? 0)
        var lines = rows.map { row in
            let user = shown(row.userIdentifier)
            var line = "  " + user + String(repeating: " ", count: max(0, width - user.count))
            line +=
                "  provider \(shown(row.provider))  readers \(row.readers.isEmpty ? "-" : row.readers.map(shown).joined(separator: ","))"
            line += "  enrolled by uid \(row.enrolledUID)  generation \(row.generation)"
            if let problem = row.problem { line += ": \(shown(problem))" }
            return line
        }
        if total > rows.count { lines.append("  … and \(total - rows.count) more") }
        return lines
    }
}
