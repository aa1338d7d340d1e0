import Testing
import TokendCore

/// The `LoadCredential=` socket's decisions, without I/O: the peer's abstract name, who may ask,
/// which credential an ID names and whether its token is delivered, refreshed first or refused.
struct LoadCredentialNameTests {
    /// `sun_path` as the kernel reports it: a NUL, the name, zeros up to 108 bytes.
    static func path(_ name: String) -> [UInt8] {
        let bytes = [0] + Array(name.utf8)
        return bytes + [UInt8](repeating: 0, count: max(0, 108 - bytes.count))
    }

    @Test(
        arguments: [
            ("bf71c8515d83f9db/unit/backup.service/svc", "backup.service", "svc"),
            ("0/unit/backup.service/svc", "backup.service", "svc"),
            ("ffffffffffffffff/unit/a.service/x", "a.service", "x"),
            ("1a/unit/backup@daily.service/token.json", "backup@daily.service", "token.json"),
            (#"1a/unit/systemd-cryptsetup@luks\x2d1.service/key"#, #"systemd-cryptsetup@luks\x2d1.service"#, "key"),
            ("1a/unit/b.service/with space", "b.service", "with space"),
            ("1a/unit/b.service/...", "b.service", "..."),
        ])
    func systemdNamesParse(name: String, unit: String, id: String) throws {
        let parsed = try LoadCredentialName.parse(peerPath: Self.path(name)).get()
        #expect(parsed == LoadCredentialName(unit: unit, credentialID: id))
    }

    @Test(
        arguments: [
            // The random part: 1–16 lower-case hex digits, as systemd's %PRIx64 writes it.
            "x/unit/backup.service/svc",
            "/unit/backup.service/svc",
            "BF71/unit/backup.service/svc",
            "0123456789abcdef0/unit/backup.service/svc",
            "-1/unit/backup.service/svc",
            // Not the /unit/ form.
            "bf71/units/backup.service/svc",
            "bf71/unit/backup.service",
            "bf71/unit/backup.service/svc/more",
            "bf71/unit//svc",
            "bf71/unit/backup.service/",
            "backup.service/svc",
            // Units: services only, valid names.
            "bf71/unit/backup.socket/svc",
            "bf71/unit/session-1.scope/svc",
            "bf71/unit/.service/svc",
            "bf71/unit/bad name.service/svc",
            // IDs: systemd's credential names.
            "bf71/unit/backup.service/.",
            "bf71/unit/backup.service/..",
            "bf71/unit/backup.service/a:b",
        ])
    func otherNamesAreRefused(name: String) {
        guard case .failure(.malformedName) = LoadCredentialName.parse(peerPath: Self.path(name)) else {
            Issue.record("\(name) parsed")
            return
        }
    }

    @Test func pathsUnnamedPeersAndOddBytesAreRefused() {
        #expect(LoadCredentialName.parse(peerPath: [UInt8](repeating: 0, count: 108)) == .failure(.unnamedPeer))
        #expect(LoadCredentialName.parse(peerPath: []) == .failure(.unnamedPeer))
        let filesystem = Array("/tmp/x/unit/backup.service/svc".utf8) + [UInt8](repeating: 0, count: 20)
        #expect(LoadCredentialName.parse(peerPath: filesystem) == .failure(.malformedName("bound to a path, not an abstract name")))
        // A NUL inside the name, with more after it: not systemd's (which writes none).
        var inner = Self.path("bf71/unit/backup.service/svc")
        inner[30] = 0x41
        #expect(LoadCredentialName.parse(peerPath: inner) == .failure(.malformedName("a NUL inside the name")))
        var control = Self.path("bf71/unit/backup.service/s\u{7F}")
        #expect(LoadCredentialName.parse(peerPath: control) == .failure(.malformedName("bytes other than printable ASCII")))
        control = Self.path("bf71/unit/backup.service/sv\u{e9}")
        #expect(LoadCredentialName.parse(peerPath: control) == .failure(.malformedName("bytes other than printable ASCII")))
    }

    @Test func credentialIDsAreSystemds() {
        #expect(LoadCredentialName.isCredentialID("svc"))
        #expect(LoadCredentialName.isCredentialID(Substring(String(repeating: "a", count: 255))))
        #expect(!LoadCredentialName.isCredentialID(Substring(String(repeating: "a", count: 256))))
        #expect(!LoadCredentialName.isCredentialID(""))
        #expect(!LoadCredentialName.isCredentialID("a/b"))
        #expect(!LoadCredentialName.isCredentialID("a\tb"))
    }
}

/// Who may ask: uid 0, in the very unit its name asks for.
struct LoadCredentialCallerTests {
    static let name = LoadCredentialNameTests.path("bf71c8515d83f9db/unit/backup.service/svc")

    @Test func theSystemManagerInTheUnitIsServed() {
        let checked = LoadCredentialCaller.check(peerPath: Self.name, uid: 0) { .success("backup.service") }
        #expect(checked == .success(LoadCredentialName(unit: "backup.service", credentialID: "svc")))
    }

    @Test func anotherUidIsRefusedBeforeItsUnitIsRead() {
        var asked = false
        let checked = LoadCredentialCaller.check(peerPath: Self.name, uid: 1000) {
            asked = true
            return .success("backup.service")
        }
        #expect(checked == .failure(.notTheSystemManager(uid: 1000)))
        #expect(!asked)
    }

    @Test(
        arguments: [
            // Root elsewhere, a user manager's unit of that name, a delegated sub-cgroup, no unit.
            ("other.service", LoadCredentialRefusal.otherUnit(asked: "backup.service", seen: "other.service")),
            ("user@0.service", .otherUnit(asked: "backup.service", seen: "user@0.service")),
            (nil, .otherUnit(asked: "backup.service", seen: nil)),
        ] as [(String?, LoadCredentialRefusal)])
    func rootInAnotherUnitIsRefused(seen: String?, refusal: LoadCredentialRefusal) {
        #expect(LoadCredentialCaller.check(peerPath: Self.name, uid: 0) { .success(seen) } == .failure(refusal))
    }

    @Test func anUnknownUnitIsRefused() {
        // Debian 12's own kernel (6.1) gives no pidfd; a process that exited may be anyone's pid now.
        #expect(LoadCredentialCaller.check(peerPath: Self.name, uid: 0) { .failure(.noPidfd) } == .failure(.unitUnknown(.noPidfd)))
        #expect(
            LoadCredentialCaller.check(peerPath: Self.name, uid: 0) { .failure(.processExited) } == .failure(.unitUnknown(.processExited)))
    }

    @Test func aMalformedNameIsRefusedWhateverTheCaller() {
        let checked = LoadCredentialCaller.check(peerPath: LoadCredentialNameTests.path("x/unit/backup.service/svc"), uid: 0) {
            .success("backup.service")
        }
        guard case .failure(.malformedName) = checked else {
            Issue.record("\(checked)")
            return
        }
    }
}

/// Which credential, and whether its token goes now, after a refresh, or not at all.
struct LoadCredentialDecisionTests {
    static let now = Timestamp(secondsSince1970: 1_800_000_000)

    static func candidate(
        readers: [Reader], deadlineIn: Duration = .seconds(3600), needsLogin: Bool = false, dpop: Bool = false
    ) -> LoadCredentialCandidate {
        LoadCredentialCandidate(
            name: "svc", readers: ResolvedReaders(readers, userID: { _ in 1000 }, groupID: { _ in 1000 }),
            deadline: now + deadlineIn, needsLogin: needsLogin, isDPoPBound: dpop)
    }

    static func decide(_ candidate: LoadCredentialCandidate?, mayRefresh: Bool = true) -> LoadCredentialDecision {
        LoadCredentialDecision.decide(
            unit: "backup.service", name: "svc", credential: candidate, minimumValidity: .seconds(60), now: now, mayRefresh: mayRefresh)
    }

    @Test func aUnitReaderGetsAValidToken() {
        #expect(Self.decide(Self.candidate(readers: [Reader("unit:backup.service")!])) == .deliver)
        #expect(Self.decide(Self.candidate(readers: [Reader("uid:1000")!, Reader("unit:backup.service")!])) == .deliver)
    }

    @Test(
        arguments: [
            // The unit is not named, or only joined to a uid; uid, user and group readers name no unit,
            // root included (the helper's uid).
            ([Reader("unit:other.service")!], false),
            ([Reader("uid:0")!], false),
            ([Reader("user:root")!, Reader("group:root")!], false),
            ([Reader("exe:/usr/lib/systemd/systemd")!], false),
            ([Reader("uid:0+unit:backup.service")!], true),
            ([Reader("user:backup+unit:backup.service")!], true),
        ])
    func onlyAPlainUnitReaderAdmitsTheUnit(readers: [Reader], joinedOnly: Bool) {
        #expect(
            Self.decide(Self.candidate(readers: readers))
                == .refuse(.notAReader(credential: "svc", unit: "backup.service", joinedOnly: joinedOnly)))
    }

    @Test func aMissingCredentialOrOneThatCannotBeServedIsRefused() {
        #expect(Self.decide(nil) == .refuse(.noSuchCredential("svc")))
        let reader = [Reader("unit:backup.service")!]
        #expect(Self.decide(Self.candidate(readers: reader, needsLogin: true)) == .refuse(.reauthenticationRequired("svc")))
        #expect(Self.decide(Self.candidate(readers: reader, dpop: true)) == .refuse(.dpopBound("svc")))
        // The readers come first: a non-reader learns nothing of the credential's state.
        #expect(
            Self.decide(Self.candidate(readers: [Reader("uid:1000")!], needsLogin: true))
                == .refuse(.notAReader(credential: "svc", unit: "backup.service", joinedOnly: false)))
    }

    @Test func aTokenTooShortLivedIsRefreshedOnceThenRefused() {
        let reader = [Reader("unit:backup.service")!]
        #expect(Self.decide(Self.candidate(readers: reader, deadlineIn: .seconds(59))) == .refreshFirst(minimumValidity: .seconds(60)))
        #expect(Self.decide(Self.candidate(readers: reader, deadlineIn: .seconds(-5))) == .refreshFirst(minimumValidity: .seconds(60)))
        #expect(Self.decide(Self.candidate(readers: reader, deadlineIn: .seconds(60))) == .deliver)
        #expect(
            Self.decide(Self.candidate(readers: reader, deadlineIn: .seconds(59)), mayRefresh: false)
                == .refuse(.tooShortLived(remaining: .seconds(59), minimum: .seconds(60))))
        #expect(
            Self.decide(Self.candidate(readers: reader, deadlineIn: .seconds(-5)), mayRefresh: false)
                == .refuse(.tooShortLived(remaining: .zero, minimum: .seconds(60))))
    }

    @Test func idsNameTheirCredentialUnlessMapped() {
        let settings = LoadCredentialSettings(
            format: .token,
            ids: [
                "backup-json": .init(credential: "backup", format: .json), "report": .init(credential: "reports"),
                "plain": .init(format: .json),
            ])
        #expect(settings.target(of: "svc") == ("svc", .token))
        #expect(settings.target(of: "backup-json") == ("backup", .json))
        #expect(settings.target(of: "report") == ("reports", .token))
        #expect(settings.target(of: "plain") == ("plain", .json))
    }

    @Test func refusalsNameWhatWasWrongWithoutAToken() {
        let text = LoadCredentialRefusal.notAReader(credential: "svc", unit: "backup.service", joinedOnly: true).description
        #expect(text.contains("unit:backup.service") && text.contains("root"))
        #expect(LoadCredentialRefusal.notTheSystemManager(uid: 1000).description.contains("user managers are not served"))
        #expect(LoadCredentialRefusal.unitUnknown(.noPidfd).description.contains("SO_PEERPIDFD"))
        #expect(LoadCredentialRefusal.timedOut(.seconds(20)).code == "timed_out")
    }
}
