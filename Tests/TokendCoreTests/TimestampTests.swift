import Testing

@testable import TokendCore

struct TimestampTests {
    @Test func secondsAndMilliseconds() {
        #expect(Timestamp(secondsSince1970: 1_700_000_000).millisecondsSince1970 == 1_700_000_000_000)
        #expect(Timestamp(millisecondsSince1970: 1_700_000_000_999).secondsSince1970 == 1_700_000_000)
        #expect(Timestamp(millisecondsSince1970: 0).secondsSince1970 == 0)
    }

    @Test(arguments: [(Int64(-1), Int64(-1)), (-999, -1), (-1000, -1), (-1001, -2), (-1999, -2), (-2000, -2), (999, 0), (1000, 1)])
    func secondsRoundDown(milliseconds: Int64, seconds: Int64) {
        #expect(Timestamp(millisecondsSince1970: milliseconds).secondsSince1970 == seconds)
    }

    @Test func secondsOfExtremeTimestampsDoNotTrap() {
        #expect(Timestamp(millisecondsSince1970: .min).secondsSince1970 == Int64.min / 1000 - 1)
        #expect(Timestamp(millisecondsSince1970: .max).secondsSince1970 == Int64.max / 1000)
        #expect(Timestamp(secondsSince1970: .min).secondsSince1970 < 0)
    }

    @Test func secondsInitializerSaturates() {
        #expect(Timestamp(secondsSince1970: .max).millisecondsSince1970 == .max)
        #expect(Timestamp(secondsSince1970: .min).millisecondsSince1970 == .min)
        #expect(Timestamp(secondsSince1970: Int64.max / 1000 + 1).millisecondsSince1970 == .max)
        #expect(Timestamp(secondsSince1970: Int64.max / 1000).millisecondsSince1970 == Int64.max / 1000 * 1000)
    }

    @Test func addingAndSubtractingDurations() {
        let t = Timestamp(millisecondsSince1970: 1_000)
        #expect(t + .seconds(2) == Timestamp(millisecondsSince1970: 3_000))
        #expect(t + .milliseconds(-500) == Timestamp(millisecondsSince1970: 500))
        #expect(t - .seconds(2) == Timestamp(millisecondsSince1970: -1_000))
        #expect(t + .microseconds(1999) == Timestamp(millisecondsSince1970: 1_001))
    }

    @Test func additionSaturatesAtTheTop() {
        #expect(Timestamp(millisecondsSince1970: .max - 1) + .seconds(1) == Timestamp(millisecondsSince1970: .max))
        #expect(Timestamp(secondsSince1970: 1_700_000_000) + .seconds(Int64.max) == Timestamp(millisecondsSince1970: .max))
        #expect(Timestamp(millisecondsSince1970: 808) + .seconds(Int64.max / 1000) == Timestamp(millisecondsSince1970: .max))
        #expect(Timestamp(millisecondsSince1970: 807) + .seconds(Int64.max / 1000) == Timestamp(millisecondsSince1970: .max))
    }

    @Test func additionSaturatesAtTheBottom() {
        #expect(Timestamp(millisecondsSince1970: .min + 1) - .seconds(1) == Timestamp(millisecondsSince1970: .min))
        #expect(Timestamp(millisecondsSince1970: .min + 1) + .seconds(-1) == Timestamp(millisecondsSince1970: .min))
        #expect(Timestamp(secondsSince1970: -5) - .seconds(Int64.max) == Timestamp(millisecondsSince1970: .min))
    }

    @Test func differenceOfTimestamps() {
        let a = Timestamp(millisecondsSince1970: 5_000)
        let b = Timestamp(millisecondsSince1970: 2_500)
        #expect(a - b == .milliseconds(2_500))
        #expect(b - a == .milliseconds(-2_500))
        #expect(a - a == .zero)
    }

    @Test func differenceOfExtremeTimestampsKeepsItsSign() {
        let top = Timestamp(millisecondsSince1970: .max)
        let bottom = Timestamp(millisecondsSince1970: .min)
        #expect(top - bottom > .zero)
        #expect(bottom - top < .zero)
        #expect(top - Timestamp(millisecondsSince1970: -1) > .zero)
        #expect((top - Timestamp(millisecondsSince1970: -1)).milliseconds == .max)
        #expect((bottom - Timestamp(millisecondsSince1970: 1)).milliseconds == .min)
    }

    @Test func ordering() {
        #expect(Timestamp(millisecondsSince1970: 1) < Timestamp(millisecondsSince1970: 2))
        #expect(!(Timestamp(millisecondsSince1970: 2) < Timestamp(millisecondsSince1970: 2)))
        #expect(min(Timestamp(millisecondsSince1970: -5), Timestamp(millisecondsSince1970: 3)) == Timestamp(millisecondsSince1970: -5))
        #expect(Timestamp(millisecondsSince1970: 1500).description == "1500ms")
    }
}

struct DurationMillisecondsTests {
    @Test(arguments: [
        (Duration.zero, Int64(0)), (.milliseconds(1500), 1500), (.milliseconds(-1500), -1500), (.microseconds(1999), 1),
        (.microseconds(-1999), -1), (.nanoseconds(999_999), 0), (.seconds(Int64.max), .max), (.seconds(Int64.min), .min),
        (.seconds(Int64.max / 1000), Int64.max / 1000 * 1000),
    ])
    func milliseconds(duration: Duration, expected: Int64) {
        #expect(duration.milliseconds == expected)
    }

    @Test func millisecondsSaturateWhenTheFractionOverflows() {
        // Whole seconds fit in Int64 milliseconds, but adding the fraction does not.
        let almost = Duration.seconds(Int64.max / 1000) + .milliseconds(900)
        #expect(almost.milliseconds == .max)
        let almostNegative = Duration.seconds(Int64.min / 1000) - .milliseconds(900)
        #expect(almostNegative.milliseconds == .min)
    }

    @Test func wholeSeconds() {
        #expect(Duration.milliseconds(2999).wholeSeconds == 2)
        #expect(Duration.milliseconds(-2999).wholeSeconds == -2)
    }
}

struct SecretStringTests {
    let secret = SecretString("hunter2-very-secret-token")

    @Test func descriptionHidesTheValue() {
        #expect(secret.description == "<redacted>")
        #expect(!String(describing: secret).contains("hunter2"))
    }

    @Test func debugDescriptionHidesTheValue() {
        #expect(secret.debugDescription == "<redacted 25 bytes>")
        #expect(!String(reflecting: secret).contains("hunter2"))
    }

    @Test func interpolationHidesTheValue() {
        let line = "token=\(secret) optional=\(String(describing: Optional(secret))) list=\([secret])"
        #expect(!line.contains("hunter2"))
        #expect(line.contains("<redacted"))
    }

    @Test func containingStructsDoNotShowIt() {
        let credential = makeCredential(accessToken: "hunter2-very-secret-token")
        #expect(!String(describing: credential).contains("hunter2"))
        #expect(!String(reflecting: credential).contains("hunter2"))
        #expect(!"\(credential)".contains("refresh-token-value"))
    }

    @Test func dumpDoesNotShowIt() {
        var output = ""
        dump(makeCredential(accessToken: "hunter2-very-secret-token"), to: &output)
        #expect(!output.contains("hunter2"))
        #expect(!output.contains("refresh-token-value"))
    }

    @Test func valueIsStillAvailable() {
        #expect(secret.value == "hunter2-very-secret-token")
        #expect(!secret.isEmpty)
        #expect(SecretString("").isEmpty)
        #expect(SecretString("a") == SecretString("a"))
        #expect(SecretString("a") != SecretString("b"))
    }
}

struct CredentialStateTests {
    @Test(arguments: [
        (CredentialState.valid, "valid", "valid"), (.refreshing, "refreshing", "refreshing"), (.retrying, "retrying", "retrying"),
        (.reauthenticationRequired, "reauthentication_required", "reauthentication required"), (.expired, "expired", "expired"),
    ])
    func names(state: CredentialState, raw: String, display: String) {
        #expect(state.rawValue == raw)
        #expect(state.displayName == display)
        #expect(CredentialState(rawValue: raw) == state)
    }
}
