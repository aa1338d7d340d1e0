import Foundation
import Testing
import TokendProtocol

/// What every method's `MethodDescriptor` promises, against the real daemon: a method for
/// administrators refuses anyone else before anything else, and a streaming method refuses a
/// call without `more`. Driven by `ServedMethod.allCases`, so a new method is covered here as
/// soon as it is described.
@Suite(.serialized)
struct MethodDescriptorEnforcementTests {
    static let nobody: UInt32 = 65534

    /// A call of `method` with parameters no handler would get to use.
    static func call(_ method: ServedMethod, more: Bool) -> String {
        #"{"method":"\#(method.name)","parameters":{"userIdentifier":"absent"}\#(more ? #","more":true"# : "")}"#
    }

    @Test func administratorsOnlyAndMoreAreEnforcedAsDescribed() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let root = try RawClient(path: daemon.socketPath)
        let adminOnly = ServedMethod.allCases.filter { $0.descriptor.callers == .administrators }
        let streaming = ServedMethod.allCases.filter(\.descriptor.requiresMore)
        #expect(!adminOnly.isEmpty && !streaming.isEmpty)

        for method in adminOnly {
            // Refused whether or not the call is otherwise well-formed.
            for more in [true, false] {
                let reply = try await OtherUser.call(
                    Self.call(method, more: more), socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
                #expect(reply.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(method) more=\(more) as nobody: \(reply)")
            }
        }
        for method in streaming {
            let reply = try root.call(Self.call(method, more: false))
            #expect(reply.errorName == "org.varlink.service.ExpectedMore", "\(method) without more: \(reply)")
        }
        try await daemon.stop()
    }
}
