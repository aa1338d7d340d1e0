import Foundation
import Testing
import TokendJSON

@testable import TokendProtocol

/// Runs `body` and returns the `VarlinkError` it throws, if any.
func varlinkError<T>(_ body: () throws(VarlinkError) -> T) -> VarlinkError? {
    do {
        _ = try body()
        return nil
    } catch {
        return error
    }
}

/// Through the wire format and back: JSON text, then parsed again.
func viaWire(_ object: JSONObject) throws -> JSONObject {
    let text = JSONWriter.string(.object(object))
    return try #require(try JSONParser.parse(text).objectValue)
}

struct ParameterReaderTests {
    let reader = ParameterReader([
        "s": .string("text"), "i": .int(42), "d": .double(3.0), "f": .double(3.5), "b": .bool(true), "n": .null,
        "a": .array([.string("x"), .string("y")]), "mixed": .array([.string("x"), .int(1)]), "o": .object(["k": .int(1)]),
        "big": .double(1e30),
    ])

    @Test func readsTypedValues() throws {
        #expect(try reader.string("s") == "text")
        #expect(try reader.optionalString("s") == "text")
        #expect(try reader.int("i") == 42)
        #expect(try reader.int("d") == 3)
        #expect(try reader.optionalBool("b") == true)
        #expect(try reader.optionalStringArray("a") == ["x", "y"])
        #expect(try reader.optionalObject("o") == ["k": .int(1)])
    }

    @Test func absentAndNullOptionalsAreNil() throws {
        for name in ["missing", "n"] {
            #expect(try reader.optionalString(name) == nil)
            #expect(try reader.optionalInt(name) == nil)
            #expect(try reader.optionalBool(name) == nil)
            #expect(try reader.optionalStringArray(name) == nil)
            #expect(try reader.optionalObject(name) == nil)
        }
    }

    @Test(arguments: ["missing", "n"])
    func requiredValuesMustBePresent(name: String) {
        #expect(varlinkError { () throws(VarlinkError) in try reader.string(name) } == .invalidParameter(name))
        #expect(varlinkError { () throws(VarlinkError) in try reader.int(name) } == .invalidParameter(name))
    }

    @Test(arguments: ["i", "b", "a", "o", "d"])
    func wrongTypeForString(name: String) {
        let error = varlinkError { () throws(VarlinkError) in try reader.string(name) }
        #expect(error?.name == "org.varlink.service.InvalidParameter")
        #expect(error?.parameters["parameter"] == .string(name))
        #expect(varlinkError { () throws(VarlinkError) in try reader.optionalString(name) } == .invalidParameter(name))
    }

    @Test(arguments: ["s", "f", "b", "a", "o", "big"])
    func wrongTypeForInt(name: String) {
        #expect(varlinkError { () throws(VarlinkError) in try reader.int(name) } == .invalidParameter(name))
        #expect(varlinkError { () throws(VarlinkError) in try reader.optionalInt(name) } == .invalidParameter(name))
    }

    @Test(arguments: ["s", "i", "a", "o"])
    func wrongTypeForBool(name: String) {
        #expect(varlinkError { () throws(VarlinkError) in try reader.optionalBool(name) } == .invalidParameter(name))
    }

    @Test(arguments: ["s", "i", "mixed", "o", "b"])
    func wrongTypeForStringArray(name: String) {
        #expect(varlinkError { () throws(VarlinkError) in try reader.optionalStringArray(name) } == .invalidParameter(name))
    }

    @Test(arguments: ["s", "i", "a", "b"])
    func wrongTypeForObject(name: String) {
        #expect(varlinkError { () throws(VarlinkError) in try reader.optionalObject(name) } == .invalidParameter(name))
    }

    @Test func setIfPresent() {
        var object: JSONObject = [:]
        object.setIfPresent("a", nil)
        #expect(object.isEmpty)
        object.setIfPresent("a", .int(1))
        #expect(object == ["a": .int(1)])
    }
}

struct CredentialsMessageTests {
    let full = Credentials(
        userIdentifier: "alice", accessToken: "eyJhbGciOi.secret-token.sig", tokenType: "Bearer",
        expiresAt: 1_700_003_600, issuedAt: 1_700_000_000, scope: "read write")

    @Test func descriptionNeverContainsTheToken() {
        #expect(!full.description.contains("secret-token"))
        #expect(!"\(full)".contains("eyJhbGciOi"))
        #expect(!String(reflecting: full).contains("secret-token"))
        #expect(full.description.contains("alice"))
        #expect(full.description.contains("<redacted>"))
    }

    @Test func addCredentialRequestDescriptionNeverContainsTokens() {
        let request = AddCredentialRequest(
            userIdentifier: "alice", provider: "example", accessToken: "access-secret",
            refreshToken: "refresh-secret")
        #expect(!"\(request)".contains("access-secret"))
        #expect(!"\(request)".contains("refresh-secret"))
        #expect("\(request)".contains("alice"))
    }

    @Test(arguments: [
        Credentials(
            userIdentifier: "alice", accessToken: "t", tokenType: "Bearer", expiresAt: 1_700_003_600, issuedAt: 1_700_000_000,
            scope: "read write"),
        Credentials(userIdentifier: "svc-backup", accessToken: "opaque", tokenType: "DPoP", expiresAt: 0),
    ])
    func roundTrips(credentials: Credentials) throws {
        #expect(try Credentials(json: credentials.json) == credentials)
        #expect(try Credentials(json: viaWire(credentials.json)) == credentials)
    }

    @Test func wireShape() {
        #expect(
            JSONWriter.string(.object(full.json))
                == #"{"userIdentifier":"alice","accessToken":"eyJhbGciOi.secret-token.sig","tokenType":"Bearer","expiresAt":1700003600,"issuedAt":1700000000,"scope":"read write"}"#
        )
        let minimal = Credentials(userIdentifier: "u", accessToken: "t", tokenType: "Bearer", expiresAt: 5)
        #expect(minimal.json.keys == ["userIdentifier", "accessToken", "tokenType", "expiresAt"])
    }

    @Test(arguments: ["userIdentifier", "accessToken", "tokenType", "expiresAt"])
    func requiredFieldsAreChecked(field: String) {
        var object = full.json
        object[field] = nil
        #expect(varlinkError { () throws(VarlinkError) in try Credentials(json: object) } == .invalidParameter(field))
        object[field] = .array([])
        #expect(varlinkError { () throws(VarlinkError) in try Credentials(json: object) } == .invalidParameter(field))
    }
}

struct StatusMessageTests {
    static let daemons = [
        DaemonStatus(
            version: "1.2.3", startedAt: 1_700_000_000, credentials: 10, valid: 5, refreshing: 1, retrying: 2,
            reauthenticationRequired: 1, expired: 1, nextRefreshAt: 1_700_000_600),
        DaemonStatus(version: "0.0.1-dev", startedAt: 0),
    ]

    @Test(arguments: daemons)
    func daemonStatusRoundTrips(status: DaemonStatus) throws {
        #expect(try DaemonStatus(json: status.json) == status)
        #expect(try DaemonStatus(json: viaWire(status.json)) == status)
    }

    @Test func daemonStatusRequiresCounters() {
        var object = Self.daemons[0].json
        object["expired"] = nil
        #expect(varlinkError { () throws(VarlinkError) in try DaemonStatus(json: object) } == .invalidParameter("expired"))
        object = Self.daemons[0].json
        object["nextRefreshAt"] = .string("soon")
        #expect(varlinkError { () throws(VarlinkError) in try DaemonStatus(json: object) } == .invalidParameter("nextRefreshAt"))
    }

    static let credentials = [
        CredentialStatus(
            userIdentifier: "alice", provider: "example", state: "valid", expiresAt: 1_700_003_600, issuedAt: 1_700_000_000,
            sessionStartedAt: 1_699_000_000, sessionEndsAt: 1_702_000_000, nextRefreshAt: 1_700_002_880,
            lastRefreshAt: 1_700_000_000, refreshCount: 17, lastError: "HTTP 503 from the token endpoint",
            readers: ["uid:1000", "group:backup"], enrolledByUid: 1000),
        CredentialStatus(
            userIdentifier: "bob", provider: "p", state: "reauthentication_required", expiresAt: 1, issuedAt: 0, sessionStartedAt: 0),
    ]

    @Test(arguments: credentials)
    func credentialStatusRoundTrips(status: CredentialStatus) throws {
        #expect(try CredentialStatus(json: status.json) == status)
        #expect(try CredentialStatus(json: viaWire(status.json)) == status)
    }

    @Test func credentialStatusOptionalsAreLeftOut() {
        let keys = Set(Self.credentials[1].json.keys)
        #expect(
            keys == [
                "userIdentifier", "provider", "state", "expiresAt", "issuedAt", "sessionStartedAt", "refreshCount", "readers",
                "enrolledByUid",
            ])
    }

    @Test func credentialStatusDefaultsForOmittedCounters() throws {
        let object: JSONObject = [
            "userIdentifier": .string("u"), "provider": .string("p"), "state": .string("valid"),
            "expiresAt": .int(3), "issuedAt": .int(2), "sessionStartedAt": .int(1),
        ]
        let status = try CredentialStatus(json: object)
        #expect(status.refreshCount == 0)
        #expect(status.readers.isEmpty)
        #expect(status.enrolledByUid == 0)
    }

    @Test func credentialStatusRejectsNonStringReaders() {
        var object = Self.credentials[0].json
        object["readers"] = .array([.string("uid:1"), .int(2)])
        #expect(varlinkError { () throws(VarlinkError) in try CredentialStatus(json: object) } == .invalidParameter("readers"))
    }
}

struct AddCredentialRequestTests {
    static let requests = [
        AddCredentialRequest(
            userIdentifier: "alice", provider: "example", accessToken: "a", refreshToken: "r", tokenType: "Bearer",
            expiresIn: 3600, scope: "read", readers: ["uid:1000", "group:backup"], replace: true),
        AddCredentialRequest(userIdentifier: "bob", provider: "example", accessToken: "a"),
        AddCredentialRequest(userIdentifier: "carol", provider: "example", accessToken: "a", readers: []),
    ]

    @Test(arguments: requests)
    func roundTrips(request: AddCredentialRequest) throws {
        #expect(try AddCredentialRequest(json: request.json) == request)
        #expect(try AddCredentialRequest(json: viaWire(request.json)) == request)
    }

    @Test func minimalRequestHasOnlyRequiredKeys() {
        #expect(Self.requests[1].json.keys == ["userIdentifier", "provider", "accessToken"])
        // An empty reader list is not the same as no reader list.
        #expect(Self.requests[2].json["readers"] == .array([]))
    }

    @Test(arguments: [
        ("userIdentifier", JSONValue.int(1)), ("provider", .null), ("accessToken", .bool(true)), ("refreshToken", .int(5)),
        ("expiresIn", .string("3600")), ("readers", .string("uid:1000")), ("replace", .string("yes")), ("scope", .array([])),
    ])
    func wrongTypesNameTheParameter(field: String, value: JSONValue) {
        var object = Self.requests[0].json
        object[field] = value
        #expect(varlinkError { () throws(VarlinkError) in try AddCredentialRequest(json: object) } == .invalidParameter(field))
    }
}

struct IdentifierTests {
    @Test(arguments: ["alice", "svc-backup", "a", "user@example.com", "x_1.2", String(repeating: "a", count: 255)])
    func valid(identifier: String) {
        #expect(Identifier.isValid(identifier))
    }

    @Test(arguments: ["", "a b", "a/b", "é", "tab\there", "nl\n", "\u{7F}", String(repeating: "a", count: 256)])
    func invalid(identifier: String) {
        #expect(!Identifier.isValid(identifier))
    }
}

struct InterfaceDefinitionTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // TokendProtocolTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // repository root

    @Test func embeddedDescriptionMatchesTheVarlinkFile() throws {
        let file = Self.repositoryRoot.appendingPathComponent("interfaces/io.tokend.TokenProvider.varlink")
        let bytes = try [UInt8](Data(contentsOf: file))
        let embedded = Array(TokenProviderInterface.description.utf8)
        #expect(!bytes.isEmpty)
        if embedded != bytes {
            let common = zip(embedded, bytes).prefix(while: { $0 == $1 }).count
            Issue.record(
                """
                TokenProviderInterface.description differs from \(file.path) at byte \(common) \
                (embedded \(embedded.count) bytes, file \(bytes.count) bytes); run scripts/embed-interface.sh
                """)
        }
    }

    @Test func interfaceNameAndHeader() {
        #expect(TokenProviderInterface.name == "io.tokend.TokenProvider")
        #expect(TokenProviderInterface.description.contains("\ninterface io.tokend.TokenProvider\n"))
        #expect(VarlinkServiceInterface.name == "org.varlink.service")
        #expect(VarlinkServiceInterface.description.contains("\ninterface org.varlink.service\n"))
    }

    @Test(arguments: TokenProviderMethod.allCases)
    func everyMethodIsDeclared(method: TokenProviderMethod) {
        let call = VarlinkCall(method: method.rawValue)
        #expect(call.interface == Substring(TokenProviderInterface.name))
        #expect(VarlinkCall.isValidMethodName(method.rawValue))
        #expect(TokenProviderInterface.description.contains("\nmethod \(call.memberName)("))
    }

    @Test(arguments: TokendErrorName.allCases)
    func everyErrorIsDeclared(error: TokendErrorName) {
        let call = VarlinkCall(method: error.rawValue)
        #expect(call.interface == Substring(TokenProviderInterface.name))
        #expect(TokenProviderInterface.description.contains("\nerror \(call.memberName) ("))
    }

    @Test func serviceInterfaceDeclaresItsErrors() {
        for error in [
            VarlinkError.interfaceNotFound("x"), .methodNotFound("x"), .methodNotImplemented("x"), .invalidParameter("x"),
            .servicePermissionDenied, .expectedMore,
        ] {
            let member = VarlinkCall(method: error.name).memberName
            #expect(VarlinkServiceInterface.description.contains("\nerror \(member) ("), "\(error.name)")
        }
    }
}

@Suite struct ShellWordTests {
    @Test(arguments: [
        ("alice", "alice"), ("svc.backup@example.com", "svc.backup@example.com"), ("a$(id)", "'a$(id)'"),
        ("`id`", "'`id`'"), ("a;b", "'a;b'"), ("it's", #"'it'\''s'"#), ("*", "'*'"), ("", "''"),
    ])
    func wordsAreQuotedOnlyWhenAShellWouldReadThemOtherwise(word: String, shown: String) {
        #expect(ShellWord.quoted(word) == shown)
    }

    @Test func aLeadingDashComesAfterTheEndOfOptions() {
        #expect(ShellWord.argument("-rf") == "-- -rf")
        #expect(ShellWord.argument("-$x") == "-- '-$x'")
        #expect(ShellWord.argument("alice") == "alice")
    }

    /// What `sh` makes of the quoted word is the word, one argument.
    @Test(arguments: ["a$(touch /nonexistent/x)", "`id`", "it's \"quoted\"", "a;b|c&d", "*?[x]", "-n", "$HOME\\n"])
    func theShellReadsTheWordBack(word: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "printf '%s\\0' " + ShellWord.quoted(word)]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(String(decoding: data, as: UTF8.self) == word + "\0")
    }
}
