/// A word as a POSIX shell reads it back: user identifiers are chosen by whoever enrolled the
/// credential and may hold `$`, backquotes, `;`, quotes or a leading `-`, so a command line
/// shown to a person to copy (`tokenctl login NAME`) quotes them.
public enum ShellWord {
    /// `word` unchanged when it is only letters, digits and `@%+=:,./_-` (and starts with none
    /// of `-`), otherwise in single quotes (a `'` inside as `'\''`).
    public static func quoted(_ word: String) -> String {
        let plain = !word.isEmpty && word.utf8.allSatisfy(isPlain)
        return plain ? word : "'" + word.replacing("'", with: #"'\''"#) + "'"
    }

    /// `word` as a command's last argument: after `--` when it starts with `-`, so that it is
    /// not read as an option.
    public static func argument(_ word: String) -> String {
        (word.hasPrefix("-") ? "-- " : "") + quoted(word)
    }

    private static func isPlain(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "@"), UInt8(ascii: "%"), UInt8(ascii: "+"), UInt8(ascii: "="), UInt8(ascii: ":"), UInt8(ascii: ","),
            UInt8(ascii: "."), UInt8(ascii: "/"), UInt8(ascii: "_"), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }
}
