import Testing
import TokendProtocol

/// The program readers of the grammar (`unit:`, `exe:`, `uid:N+…`) as Swift values: what each
/// text parses to, beyond the canonical text the shared fixture checks.
struct ProgramReaderGrammarTests {
    static let hash = String(repeating: "0123456789abcdef", count: 4)

    @Test(arguments: [
        ("unit:backup.service", Reader.unit("backup.service")),
        ("unit:session-3.scope", .unit("session-3.scope")),
        ("unit:getty@tty1.service", .unit("getty@tty1.service")),
        ("exe:/usr/bin/backup", .exe(path: "/usr/bin/backup", sha256: nil)),
        ("exe:/usr/bin/g++", .exe(path: "/usr/bin/g++", sha256: nil)),
        ("exe:/usr/bin/b@sha256:\(hash.uppercased())", .exe(path: "/usr/bin/b", sha256: hash)),
        ("exe:/usr/bin/b@sha256:\(hash.dropLast())", .exe(path: "/usr/bin/b@sha256:\(hash.dropLast())", sha256: nil)),
        ("exe:/a@sha256:\(hash)@sha256:\(hash)", .exe(path: "/a@sha256:\(hash)", sha256: hash)),
        ("uid:007+unit:x.service", .combined(.uid(7), .unit("x.service"))),
        ("user:alice+exe:/usr/bin/g++", .combined(.user("alice"), .exe(path: "/usr/bin/g++", sha256: nil))),
        ("uid:0+exe:/b@sha256:\(hash)", .combined(.uid(0), .exe(path: "/b", sha256: hash))),
    ])
    func parsesToTheReader(text: String, reader: Reader) throws {
        #expect(try Reader(parsing: text) == reader)
        #expect(Reader(reader.description) == reader)
    }

    @Test(arguments: [
        ("unit:", ReaderParseError.Problem.invalidUnit), ("unit:.service", .invalidUnit), ("unit:a.socket", .invalidUnit),
        ("unit:a/b.service", .invalidUnit), ("unit:\(String(repeating: "a", count: 248)).service", .invalidUnit),
        ("exe:", .invalidPath), ("exe:/", .invalidPath), ("exe:a", .invalidPath), ("exe:/a/", .invalidPath),
        ("exe://a", .invalidPath), ("exe:/a/./b", .invalidPath), ("exe:/a/../b", .invalidPath), ("exe:/a\u{0}b", .invalidPath),
        ("exe:/\(String(repeating: "a", count: 4095))", .invalidPath), ("exe:/@sha256:\(hash)", .invalidPath),
        ("gid:1+unit:x.service", .invalidCombination), ("unit:x.service+uid:1", .invalidCombination),
        ("uid:1+uid:2", .invalidCombination), ("uid:1+", .invalidCombination), ("user:a+b", .invalidCombination),
        ("uid:1+unit:a+b.service", .invalidCombination), ("uid:1+uid:2+unit:x.service", .invalidCombination),
        ("uid:1+unit:x.socket", .invalidUnit), ("uid:1+exe:a", .invalidPath), ("uid:-1+unit:x.service", .invalidID),
        ("user:+unit:x.service", .invalidName), ("Unit:a.service", .unknownKind),
    ])
    func isRefusedWith(text: String, problem: ReaderParseError.Problem) {
        #expect(throws: ReaderParseError(problem, text: text)) { try Reader(parsing: text) }
    }

    @Test func theLongestUnitAndPathAreAccepted() throws {
        let unit = String(repeating: "a", count: 247) + ".service"
        #expect(unit.utf8.count == Reader.maximumUnitLength)
        #expect(try Reader(parsing: "unit:\(unit)") == .unit(unit))
        let path = "/" + String(repeating: "a", count: Reader.maximumPathLength - 1)
        #expect(try Reader(parsing: "exe:\(path)") == .exe(path: path, sha256: nil))
    }

    @Test(arguments: [
        (Reader.uid(1), nil), (.group("g"), nil), (.unit("a.service"), Reader.Program.unit("a.service")),
        (.combined(.uid(1), .exe(path: "/a", sha256: nil)), .exe(path: "/a", sha256: nil)),
    ])
    func programNamesTheProgramPart(reader: Reader, program: Reader.Program?) {
        #expect(reader.program == program)
    }

    @Test func aCombinedReadersKindIsItsUserSide() {
        #expect(Reader.combined(.uid(1), .unit("a.service")).kind == .uid)
        #expect(Reader.combined(.user("a"), .unit("a.service")).kind == .user)
    }
}
