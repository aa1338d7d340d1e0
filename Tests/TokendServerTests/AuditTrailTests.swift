import Logging
import Synchronization
import Testing
import TokendCore
import TokendOAuth

@testable import TokendServer

/// The audit trail's records as they leave tokend (log events whose metadata become journal
/// fields), for the entry points the socket tests do not reach: deliveries outside the socket's
/// calls (`LoadCredential=`), and the counts of a connection.
struct AuditTrailUnitTests {
    /// Keeps every event logged through it.
    final class Capture: Sendable {
        let events = Mutex<[(level: Logger.Level, message: String, metadata: [String: String])]>([])

        var logger: Logger {
            Logger(label: "test") { _ in Handler(capture: self) }
        }

        struct Handler: LogHandler {
            let capture: Capture
            var metadata: Logger.Metadata = [:]
            // As the daemon's own handler may be set: the trail must not depend on it.
            var logLevel: Logger.Level = .warning
            subscript(metadataKey key: String) -> Logger.Metadata.Value? {
                get { metadata[key] }
                set { metadata[key] = newValue }
            }
            func log(event: LogEvent) {
                let metadata = (event.metadata ?? [:]).mapValues { "\($0)" }
                capture.events.withLock { $0.append((event.level, "\(event.message)", metadata)) }
            }
        }
    }

    static let caller = CallerIdentity(uid: 1000, gid: 1000, pid: 0)

    @Test func aDeliveryIsARecordWithItsUnit() throws {
        let capture = Capture()
        let trail = AuditTrail(logger: capture.logger, enabled: true)
        trail.delivery(
            credential: "backup", method: "LoadCredential", unit: "backup.service", uid: 1000, pid: 0,
            fingerprint: TokenFingerprint(of: "SECRET-TOKEN-abc"), refusal: nil)
        trail.delivery(
            credential: "backup", method: "LoadCredential", unit: "other.service", uid: 0, pid: 0, fingerprint: nil,
            refusal: "the unit is not a reader", extra: ["audit_credential_id": "svc"])
        let events = capture.events.withLock { $0 }
        try #require(events.count == 2)
        let (released, refused) = (events[0].metadata, events[1].metadata)
        #expect(events[0].message == "token released")
        #expect(events[0].level == .info)
        #expect(released["message_id"] == AuditMessageID.released)
        #expect(released["audit_method"] == "LoadCredential")
        #expect(released["audit_caller_unit"] == "backup.service")
        #expect(released["audit_caller_uid"] == "1000")
        #expect(released["user_identifier"] == "backup")
        #expect(released["audit_token_sha256"] == TokenFingerprint(of: "SECRET-TOKEN-abc").sha256)
        #expect(released["audit_count"] == "1")
        #expect(events[1].message == "token refused")
        #expect(refused["message_id"] == AuditMessageID.refused)
        #expect(refused["audit_reason"] == "the unit is not a reader")
        #expect(refused["audit_caller_unit"] == "other.service")
        #expect(refused["audit_token_sha256"] == nil)
        #expect(refused["audit_credential_id"] == "svc")
        for event in events { #expect(!"\(event)".contains("SECRET-TOKEN")) }
    }

    @Test func aLoadCredentialRefusalIsARecordWithItsReason() throws {
        let capture = Capture()
        let trail = AuditTrail(logger: capture.logger, enabled: true)
        let record = LoadCredentialRecord(
            uid: 0, pid: 0,
            request: try LoadCredentialName.parse(peerPath: [0] + Array("bf71c8515d83f9db/unit/backup.service/svc".utf8)).get(),
            credential: "svc", result: .refused(.otherUnit(asked: "backup.service", seen: "cron.service")))
        record.audit(trail, delivered: nil)
        let events = capture.events.withLock { $0 }
        try #require(events.count == 1)
        let fields = events[0].metadata
        #expect(events[0].message == "token refused")
        #expect(fields["audit_method"] == "LoadCredential")
        #expect(fields["user_identifier"] == "svc")
        #expect(fields["audit_credential_id"] == "svc")
        #expect(fields["audit_caller_unit"] == "cron.service")
        #expect(fields["audit_requested_unit"] == "backup.service")
        #expect(fields["audit_reason"]?.isEmpty == false)
    }

    @Test func aConnectionsRepeatedRefusalsAreCountedAtItsClose() throws {
        let capture = Capture()
        let trail = AuditTrail(logger: capture.logger, enabled: true)
        let connection = trail.connection(of: Self.caller)
        for _ in 0..<7 {
            connection.refused("alice", to: Self.caller, method: "io.tokend.TokenProvider.ProvideTokenReplacement", reason: "not a reader")
        }
        #expect(capture.events.withLock { $0.count } == 1)
        connection.close()
        let events = capture.events.withLock { $0 }
        try #require(events.count == 2)
        #expect(events.map { $0.metadata["audit_count"] } == ["1", "7"])
        #expect(events.allSatisfy { $0.metadata["audit_method"] == "ProvideTokenReplacement" })
        #expect(events[0].metadata["audit_connection"] == events[1].metadata["audit_connection"])
    }

    /// The unit of a cgroup file's text is remembered by the text, and is what the parser says
    /// for it; the table is emptied, not grown, past its capacity.
    @Test func theUnitsOfCgroupsAreRememberedAndBounded() {
        let units = CgroupUnits()
        let texts = [
            "0::/system.slice/backup.service\n", "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.service\n",
            "0::/system.slice/other.service/backup.service\n", "0::/\n", "0::/../escaped.service\n",
            "12:name=systemd:/system.slice/legacy.service\n0::/\n",
        ]
        for _ in 0..<2 {
            for text in texts { #expect(units.unit(fromCgroup: text) == ProgramFacts.unit(fromCgroup: text), "\(text)") }
        }
        #expect(units.count == texts.count)
        for index in 0..<CgroupUnits.capacity { _ = units.unit(fromCgroup: "0::/system.slice/job-\(index).scope\n") }
        #expect(units.count <= CgroupUnits.capacity)
        #expect(units.unit(fromCgroup: "0::/system.slice/job-7.scope\n") == "job-7.scope")
    }

    @Test func aDisabledTrailRecordsNothingUntilAReloadTurnsItOn() {
        let capture = Capture()
        let trail = AuditTrail(logger: capture.logger, enabled: false)
        trail.delivery(
            credential: "a", method: "LoadCredential", unit: "a.service", uid: 0, pid: 0, fingerprint: TokenFingerprint(of: "t"),
            refusal: nil)
        trail.connection(of: Self.caller).refused("a", to: Self.caller, method: "m", reason: "r")
        #expect(capture.events.withLock { $0.isEmpty })
        trail.setEnabled(true)
        trail.delivery(
            credential: "a", method: "LoadCredential", unit: "a.service", uid: 0, pid: 0, fingerprint: TokenFingerprint(of: "t"),
            refusal: nil)
        #expect(capture.events.withLock { $0.count } == 1)
    }
}
