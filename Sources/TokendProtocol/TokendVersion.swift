/// tokend's version, the same for the daemon (`GetInfo`, `Status`) and its tools (`--version`).
public enum TokendVersion {
    public static let string = "0.1.0"
}
