import Testing

@testable import TokendConfig

struct AuditConfigurationTests {
    @Test func theAuditTrailIsOffByDefault() throws {
        #expect(try parseConfig("").audit.enabled == false)
        #expect(try parseConfig("[audit]\n").audit.enabled == false)
    }

    @Test func itCanBeTurnedOnAndOff() throws {
        #expect(try parseConfig("[audit]\nenabled = true").audit.enabled)
        #expect(try parseConfig("[audit]\nenabled = false").audit.enabled == false)
    }

    @Test(arguments: [
        ("[audit]\nenabled = \"yes\"", "audit.enabled", "expected true or false"),
        ("[audit]\nenable = false", "audit.enable", "unknown key"),
        ("audit = true", "audit", "expected a table"),
    ])
    func badValuesNameTheKey(text: String, key: String, problem: String) {
        #expect {
            try parseConfig(text)
        } throws: { error in
            guard let error = error as? ConfigurationError else { return false }
            return error.key == key && error.problem.contains(problem)
        }
    }
}
