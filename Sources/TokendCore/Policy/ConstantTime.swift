/// Comparisons of secrets whose time does not depend on where they differ.
public enum ConstantTime {
    /// Whether `a` and `b` are equal, comparing every byte when their lengths match (the length
    /// itself is not secret: tokens and `state` values have known lengths).
    public static func equal(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var difference: UInt8 = 0
        for i in 0..<x.count { difference |= x[i] ^ y[i] }
        return difference == 0
    }
}
