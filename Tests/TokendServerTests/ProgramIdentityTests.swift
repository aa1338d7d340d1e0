import Foundation
import Testing

@testable import TokendServer

#if canImport(Glibc)
    import Glibc
#endif

/// What ``ProgramIdentity`` reads about a process, on this test process itself.
struct ProgramIdentityTests {
    @Test(arguments: [
        ("Name:\tx\nNSpid:\t4242\nNSpgid:\t4242\n", true), ("NSpid:\t4242\t1\n", false), ("NSpid: 7 3 1\n", false),
        ("Name:\tx\n", false), ("", false),
    ])
    func aProcessIsInTokendsPidNamespaceWhenNSpidNamesOnePid(status: String, own: Bool) {
        #expect(ProgramIdentity.isInOwnPidNamespace(status: status) == own)
    }

    @Test func thisProcessIsInItsOwnPidNamespace() {
        #expect(ProgramIdentity.isInOwnPidNamespace(getpid()))
        #expect(!ProgramIdentity.isInOwnPidNamespace(0x3FFF_FFFF))
    }

    /// The file a process runs is the one at the path its `/proc/PID/exe` shows, and not another.
    @Test func theFileAProcessRunsIsTheOneAtItsPath() throws {
        let running = ProgramIdentity.ExecutableFile(pid: getpid())
        #expect(running.errno == 0)
        let path = try #require(try? ProgramIdentity.readLink("/proc/self/exe").get())
        #expect(running == ProgramIdentity.ExecutableFile(path: path))
        #expect(running != ProgramIdentity.ExecutableFile(path: "/bin/sh"))
        #expect(ProgramIdentity.ExecutableFile(pid: 0).errno == ESRCH)
    }
}
