import Logging
import Testing
import TokendSystemd

struct JournalFieldsTests {
    @Test(arguments: [
        ("user_identifier", "USER_IDENTIFIER"),
        ("message_id", "MESSAGE_ID"),
        ("MESSAGE_ID", "TOKEND_MESSAGE_ID"),
        ("audit_caller_uid", "AUDIT_CALLER_UID"),
        ("provider", "PROVIDER"),
        ("credential_state", "CREDENTIAL_STATE"),
        ("key_id", "KEY_ID"),
        ("retry-in", "RETRY_IN"),
        ("Ünïcode", "TOKEND__N_CODE"),
        ("_private", "TOKEND__PRIVATE"),
        ("2fa", "TOKEND_2FA"),
        ("message", "TOKEND_MESSAGE"),
        ("priority", "TOKEND_PRIORITY"),
        ("code_file", "TOKEND_CODE_FILE"),
        ("", "TOKEND_"),
    ])
    func fieldNames(key: String, expected: String) {
        #expect(JournalFields.fieldName(forMetadataKey: key) == expected)
    }

    @Test func fieldNamesAreCut() {
        #expect(JournalFields.fieldName(forMetadataKey: String(repeating: "a", count: 100)).count == 64)
    }

    @Test func priorities() {
        #expect(JournalFields.priority(.critical) == 2)
        #expect(JournalFields.priority(.error) == 3)
        #expect(JournalFields.priority(.warning) == 4)
        #expect(JournalFields.priority(.notice) == 5)
        #expect(JournalFields.priority(.info) == 6)
        #expect(JournalFields.priority(.debug) == 7)
        #expect(JournalFields.priority(.trace) == 7)
    }

    @Test func fieldsOfAnEvent() {
        let fields = JournalFields.fields(
            level: .warning, message: "refresh failed; will retry",
            metadata: ["user_identifier": "alice", "provider": "example", "attempt": "2", "Attempt": "x"],
            identifier: "tokend", file: "TokendServer/Registry/CredentialRegistry+Refresh.swift",
            function: "recordTransientFailure", line: 181
        )
        let byName = Dictionary(fields.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
        #expect(byName["PRIORITY"] == "4")
        #expect(
            byName["MESSAGE"] == "refresh failed; will retry Attempt=x attempt=2 provider=example user_identifier=alice"
        )
        #expect(byName["USER_IDENTIFIER"] == "alice")
        #expect(byName["PROVIDER"] == "example")
        #expect(byName["ATTEMPT"] == "x")  // sorted first wins
        #expect(byName["SYSLOG_IDENTIFIER"] == "tokend")
        #expect(byName["CODE_FILE"] == "TokendServer/Registry/CredentialRegistry+Refresh.swift")
        #expect(byName["CODE_LINE"] == "181")
        #expect(byName["CODE_FUNC"] == "recordTransientFailure")
        #expect(Set(fields.map(\.name)).count == fields.count, "no field twice")
    }

    @Test func nativeEncoding() {
        let datagram = JournalFields.nativeDatagram([("MESSAGE", "hello"), ("DETAIL", "a\nb")])
        var expected = Array("MESSAGE=hello\nDETAIL\n".utf8)
        expected += [3, 0, 0, 0, 0, 0, 0, 0]
        expected += Array("a\nb\n".utf8)
        #expect(datagram == expected)
    }

    @Test func journalStreamMatching() {
        #expect(JournalFields.streamMatches("8:12345", device: 8, inode: 12345))
        #expect(!JournalFields.streamMatches("8:12345", device: 8, inode: 12346))
        #expect(!JournalFields.streamMatches("8:", device: 8, inode: 0))
        #expect(!JournalFields.streamMatches("garbage", device: 8, inode: 12345))
        // The test runner's stderr is not the journal.
        #expect(!JournalFields.standardErrorIsJournal(environment: ["JOURNAL_STREAM": "0:0"]))
        #expect(SystemdLogging.destination(environment: [:]) == .standardError)
    }

    @Test func reloadableLevel() {
        let control = LogLevelControl(.info)
        var handler = JournalLogHandler(identifier: "tokend", level: control)
        #expect(handler.logLevel == .info)
        control.set(.debug)
        #expect(handler.logLevel == .debug)
        handler.logLevel = .error  // a logger's own override stays its own
        control.set(.trace)
        #expect(handler.logLevel == .error)
        let plain = StandardErrorLogHandler(label: "t", level: control)
        #expect(plain.logLevel == .trace)
    }
}
