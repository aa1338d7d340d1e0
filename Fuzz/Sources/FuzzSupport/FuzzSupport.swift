import CLibFuzzer
import Glibc

/// Traps with `message` when `condition` is false.
///
/// Unlike `precondition`, the message survives `-O`, so a crash report says which invariant broke.
/// - Parameters:
///   - condition: The invariant.
///   - message: What broke, without any input bytes (inputs may look like tokens).
@inline(__always)
public func fuzzCheck(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fatalError("fuzz invariant violated: \(message())") }
}

/// Hands control to libFuzzer, which calls `testOneInput` for every input, and exits with its status.
///
/// SwiftPM links Swift executables with `--defsym main=<module>_main`, replacing libFuzzer's own
/// `main`, so each target's `@main` calls this instead.
/// - Parameter testOneInput: The target's `LLVMFuzzerTestOneInput`.
public func runLibFuzzer(_ testOneInput: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> Never {
    var argc = CommandLine.argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
    exit(LLVMFuzzerRunDriver(&argc, &argv, testOneInput))
}
