/// Removes secrets that a server echoed into free text, e.g. an `error_description` quoting the
/// refresh token it refused. Such text reaches logs, the store's `last_error` and callers'
/// error replies, where a token must never appear.
public enum SecretRedaction {
    /// Secrets shorter than this are not searched for (they would match ordinary words).
    public static let minimumLength = 8

    /// `text` with every occurrence of each secret replaced by `<redacted>`, and a trailing
    /// prefix of a secret (the text was cut short in the middle of it) removed the same way.
    public static func redact(_ text: String, secrets: [String]) -> String {
        var result = text
        for secret in secrets where secret.utf8.count >= minimumLength {
            result = result.replacing(secret, with: "<redacted>")
            // A description cut at its length limit may end inside the secret.
            for length in stride(from: min(secret.count - 1, result.count), through: minimumLength, by: -1) {
                let prefix = secret.prefix(length)
                if result.hasSuffix(prefix) {
                    result = String(result.dropLast(length)) + "<redacted>"
                    break
                }
            }
        }
        return result
    }
}
