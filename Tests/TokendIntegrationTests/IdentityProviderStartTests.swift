import Foundation
import Testing
import TokendTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The test IdP's own start-up: the full suite starts many servers at once, so a port picked
/// free can be taken before the IdP binds it.
@Suite struct IdentityProviderStartTests {
    @Test func anIdPWhosePortWasTakenMeanwhileStartsOnAnother() async throws {
        try requireVenv()
        let directory = try ScratchDirectory()
        let idp = try IdentityProvider(directory: directory)
        let taken = idp.port
        // Another server binds the port first.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(taken).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(bound == 0 && listen(fd, 8) == 0, "errno \(errno)")

        try await idp.start()
        #expect(idp.port != taken)
        #expect(idp.log.contains("Address already in use"))
        let minted = try await idp.mint(count: 1)
        #expect(minted.count == 1)
        await idp.stop()
    }
}
