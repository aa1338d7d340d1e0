import Testing
import TokendJSON

@testable import TokendProtocol

func decodeCall(_ json: String) throws(VarlinkDecodingError) -> VarlinkCall {
    try VarlinkCall.decode(Array(json.utf8))
}

func callError(_ json: String) -> VarlinkDecodingError? {
    do {
        _ = try decodeCall(json)
        return nil
    } catch {
        return error
    }
}

struct VarlinkCallDecodeTests {
    @Test func decodesAValidCall() throws {
        let call = try decodeCall(
            #"{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{"userIdentifier":"alice","minValidSeconds":60}}"#)
        #expect(call.method == "io.tokend.TokenProvider.ProvideTokenReplacement")
        #expect(call.parameters == ["userIdentifier": .string("alice"), "minValidSeconds": .int(60)])
        #expect(!call.oneway && !call.more && !call.upgrade)
        #expect(call.interface == "io.tokend.TokenProvider")
        #expect(call.memberName == "ProvideTokenReplacement")
    }

    @Test(arguments: [
        #"{"method":"io.tokend.TokenProvider.RotateKey"}"#,
        #"{"method":"io.tokend.TokenProvider.RotateKey","parameters":null}"#,
        #"{"method":"io.tokend.TokenProvider.RotateKey","parameters":{}}"#,
    ])
    func parametersAbsentNullOrEmpty(json: String) throws {
        let call = try decodeCall(json)
        #expect(call.parameters.isEmpty)
        #expect(call == VarlinkCall(method: "io.tokend.TokenProvider.RotateKey"))
    }

    @Test func flags() throws {
        let call = try decodeCall(#"{"method":"org.varlink.service.GetInfo","oneway":true,"more":true,"upgrade":true}"#)
        #expect(call.oneway && call.more && call.upgrade)
        let more = try decodeCall(#"{"more":true,"method":"io.tokend.TokenProvider.Status"}"#)
        #expect(more.more && !more.oneway && !more.upgrade)
        let oneway = try decodeCall(#"{"method":"io.tokend.TokenProvider.Status","oneway":true}"#)
        #expect(oneway.oneway && !oneway.more)
        let explicitFalse = try decodeCall(#"{"method":"io.tokend.TokenProvider.Status","oneway":false,"more":false,"upgrade":false}"#)
        #expect(!explicitFalse.oneway && !explicitFalse.more && !explicitFalse.upgrade)
        let nulls = try decodeCall(#"{"method":"io.tokend.TokenProvider.Status","oneway":null,"more":null,"upgrade":null}"#)
        #expect(!nulls.oneway && !nulls.more && !nulls.upgrade)
    }

    @Test func unknownTopLevelFieldsAreIgnored() throws {
        let call = try decodeCall(#"{"method":"io.tokend.TokenProvider.Status","futureField":[1,{"x":null}],"more":true,"id":7}"#)
        #expect(call == VarlinkCall(method: "io.tokend.TokenProvider.Status", more: true))
    }

    @Test(arguments: [
        (#"{"method":"io.tokend.TokenProvider.Status","parameters":[]}"#, #""parameters" is an array, not an object"#),
        (#"{"method":"io.tokend.TokenProvider.Status","parameters":"x"}"#, #""parameters" is a string, not an object"#),
        (#"{"method":"io.tokend.TokenProvider.Status","oneway":"yes"}"#, #""oneway" is a string, not a boolean"#),
        (#"{"method":"io.tokend.TokenProvider.Status","more":1}"#, #""more" is a number, not a boolean"#),
        (#"{"method":"io.tokend.TokenProvider.Status","upgrade":{}}"#, #""upgrade" is an object, not a boolean"#),
        (#"{"method":7}"#, #"the message has no "method" string"#),
        (#"{"method":null}"#, #"the message has no "method" string"#),
        (#"{"parameters":{}}"#, #"the message has no "method" string"#),
        (#"{}"#, #"the message has no "method" string"#),
        (#"[]"#, "the message is an array, not a JSON object"),
        (#""io.tokend.TokenProvider.Status""#, "the message is a string, not a JSON object"),
    ])
    func wrongShapesAreErrors(json: String, message: String) {
        #expect(callError(json)?.description == message)
    }

    @Test(arguments: ["", "{", #"{"method":"a.b.C",}"#, #"{"method":"a.b.C","method":"a.b.D"}"#, "{\"method\":\"a.b.C\"}\u{0}"])
    func invalidJSONIsAnError(json: String) {
        #expect(callError(json)?.description.hasPrefix("the message is not valid JSON") == true)
    }

    @Test func depthLimitIsApplied() {
        let nested = String(repeating: "[", count: 10) + String(repeating: "]", count: 10)
        let json = #"{"method":"a.b.C","parameters":{"x":\#(nested)}}"#
        #expect(throws: Never.self) { try VarlinkCall.decode(Array(json.utf8)) }
        #expect(throws: VarlinkDecodingError.self) { try VarlinkCall.decode(Array(json.utf8), maximumDepth: 8) }
    }

    @Test(arguments: [
        "Foo", "a.b", ".x.Y", "a..b.C", "io.tokend.TokenProvider.lower", "", ".", "a.B", "a.b.", "a.b.C.", "io.tokend.TokenProvider.",
        "io tokend.TokenProvider.Status", "io.tokend.TokenProvider.Sta tus", "io.tokend.TokenProvider.Stätus",
        "io.tökend.TokenProvider.Status",
        "io.tokend.TokenProvider.1Status", "io.tokend.TokenProvider._Status", "io.tokend/x.TokenProvider.Status",
    ])
    func invalidMethodNames(method: String) {
        #expect(!VarlinkCall.isValidMethodName(method))
        #expect(callError(#"{"method":"\#(method)"}"#)?.description == #""method" is not of the form interface.Method"#)
    }

    @Test(arguments: [
        "io.tokend.TokenProvider.Status", "org.varlink.service.GetInfo", "a.b.C", "com.example-1.sub_part.Method2", "x.y.z.W",
    ])
    func validMethodNames(method: String) throws {
        #expect(VarlinkCall.isValidMethodName(method))
        #expect(try decodeCall(#"{"method":"\#(method)"}"#).method == method)
    }

    @Test func methodNameLengthLimit() {
        let label = String(repeating: "a", count: 60)
        let ok = "\(label).\(label).\(label).\(label).Abcdefghijk"  // 255 bytes
        #expect(ok.utf8.count == 255)
        #expect(VarlinkCall.isValidMethodName(ok))
        #expect(!VarlinkCall.isValidMethodName(ok + "l"))
    }

    @Test func interfaceAndMemberOfAMethodWithoutDots() {
        let call = VarlinkCall(method: "Foo")
        #expect(call.interface == "")
        #expect(call.memberName == "Foo")
    }
}

struct VarlinkCallEncodeTests {
    func encoded(_ call: VarlinkCall) -> String {
        var output: [UInt8] = []
        call.encode(into: &output)
        return String(decoding: output, as: UTF8.self)
    }

    @Test func encodesOnlyWhatIsSet() {
        #expect(encoded(VarlinkCall(method: "a.b.C")) == #"{"method":"a.b.C"}"#)
        #expect(
            encoded(VarlinkCall(method: "a.b.C", parameters: ["x": .int(1)], oneway: true, more: true, upgrade: true))
                == #"{"method":"a.b.C","parameters":{"x":1},"oneway":true,"more":true,"upgrade":true}"#)
    }

    @Test(arguments: [
        VarlinkCall(method: "io.tokend.TokenProvider.Status"),
        VarlinkCall(method: "io.tokend.TokenProvider.Status", parameters: ["userIdentifier": .string("a\"b")], more: true),
        VarlinkCall(method: "io.tokend.TokenProvider.RemoveCredential", parameters: ["userIdentifier": .string("x")], oneway: true),
        VarlinkCall(method: "org.varlink.service.GetInfo", upgrade: true),
        VarlinkCall(method: "a.b.C", parameters: ["n": .null, "o": .object(["p": .array([.double(1.5)])])]),
    ])
    func roundTrips(call: VarlinkCall) throws {
        var output: [UInt8] = []
        call.encode(into: &output)
        #expect(try VarlinkCall.decode(output) == call)
    }
}

struct VarlinkReplyTests {
    func encoded(_ reply: VarlinkReply) -> [UInt8] {
        var output: [UInt8] = []
        reply.encode(into: &output)
        return output
    }

    @Test func encodesParameters() {
        #expect(String(decoding: encoded(VarlinkReply(parameters: ["a": .int(1)])), as: UTF8.self) == #"{"parameters":{"a":1}}"#)
        #expect(String(decoding: encoded(VarlinkReply()), as: UTF8.self) == #"{"parameters":{}}"#)
    }

    @Test func encodesErrorsAndContinues() {
        let error = VarlinkReply(.unknownUser("alice"))
        #expect(
            String(decoding: encoded(error), as: UTF8.self)
                == #"{"error":"io.tokend.TokenProvider.UnknownUser","parameters":{"userIdentifier":"alice"}}"#)
        let more = VarlinkReply(parameters: ["i": .int(2)], continues: true)
        #expect(String(decoding: encoded(more), as: UTF8.self) == #"{"parameters":{"i":2},"continues":true}"#)
    }

    @Test(arguments: [
        VarlinkReply(),
        VarlinkReply(parameters: ["credentials": .object(["accessToken": .string("t")])]),
        VarlinkReply(.invalidParameter("userIdentifier")),
        VarlinkReply(.refreshFailed("alice", reason: "timeout", retryAt: 1_700_000_000)),
        VarlinkReply(.permissionDenied(nil)),
        VarlinkReply(parameters: ["n": .int(1)], continues: true),
        VarlinkReply(parameters: ["x": .string("\"\\\n\u{0}é")], error: "a.b.Weird\"Name", continues: true),
    ])
    func roundTrips(reply: VarlinkReply) throws {
        #expect(try VarlinkReply.decode(encoded(reply)) == reply)
    }

    @Test func decodesLeniently() throws {
        #expect(try VarlinkReply.decode(Array(#"{}"#.utf8)) == VarlinkReply())
        #expect(try VarlinkReply.decode(Array(#"{"parameters":null,"error":null,"extra":1}"#.utf8)) == VarlinkReply())
        #expect(try VarlinkReply.decode(Array(#"{"continues":true}"#.utf8)) == VarlinkReply(continues: true))
    }

    @Test(arguments: [#"{"parameters":[]}"#, #"{"error":5}"#, "[]", "nope", #"{"parameters":{},"parameters":{}}"#])
    func rejectsMalformedReplies(json: String) {
        #expect(throws: VarlinkDecodingError.self) { try VarlinkReply.decode(Array(json.utf8)) }
    }

    @Test func initFromErrorCarriesNameAndParameters() {
        let reply = VarlinkReply(.refreshFailed("bob", reason: "r", retryAt: nil))
        #expect(reply.error == "io.tokend.TokenProvider.RefreshFailed")
        #expect(reply.parameters == ["userIdentifier": .string("bob"), "reason": .string("r")])
        #expect(!reply.continues)
    }
}

struct VarlinkErrorTests {
    static let cases: [(VarlinkError, String, JSONObject)] = [
        (.interfaceNotFound("x.y"), "org.varlink.service.InterfaceNotFound", ["interface": .string("x.y")]),
        (.methodNotFound("a.b.C"), "org.varlink.service.MethodNotFound", ["method": .string("a.b.C")]),
        (.methodNotImplemented("a.b.C"), "org.varlink.service.MethodNotImplemented", ["method": .string("a.b.C")]),
        (.invalidParameter("p"), "org.varlink.service.InvalidParameter", ["parameter": .string("p")]),
        (.expectedMore, "org.varlink.service.ExpectedMore", [:]),
        (.servicePermissionDenied, "org.varlink.service.PermissionDenied", [:]),
        (.unknownUser("u"), "io.tokend.TokenProvider.UnknownUser", ["userIdentifier": .string("u")]),
        (.permissionDenied("u"), "io.tokend.TokenProvider.PermissionDenied", ["userIdentifier": .string("u")]),
        (.permissionDenied(nil), "io.tokend.TokenProvider.PermissionDenied", [:]),
        (
            .reauthenticationRequired("u", reason: "r"), "io.tokend.TokenProvider.ReauthenticationRequired",
            ["userIdentifier": .string("u"), "reason": .string("r")]
        ),
        (
            .refreshFailed("u", reason: "r", retryAt: 5), "io.tokend.TokenProvider.RefreshFailed",
            ["userIdentifier": .string("u"), "reason": .string("r"), "retryAt": .int(5)]
        ),
        (.credentialExists("u"), "io.tokend.TokenProvider.CredentialExists", ["userIdentifier": .string("u")]),
        (.unknownProvider("p"), "io.tokend.TokenProvider.UnknownProvider", ["provider": .string("p")]),
        (.invalidCredential("r"), "io.tokend.TokenProvider.InvalidCredential", ["reason": .string("r")]),
        (.storageFailed("r"), "io.tokend.TokenProvider.StorageFailed", ["reason": .string("r")]),
        (.keyRotationUnavailable("r"), "io.tokend.TokenProvider.KeyRotationUnavailable", ["reason": .string("r")]),
        (.invalidMessage("r"), "io.tokend.TokenProvider.InvalidMessage", ["reason": .string("r")]),
    ]

    @Test(arguments: cases)
    func constructors(error: VarlinkError, name: String, parameters: JSONObject) {
        #expect(error.name == name)
        #expect(error.parameters == parameters)
    }

    @Test func description() {
        #expect(VarlinkError.expectedMore.description == "org.varlink.service.ExpectedMore")
        #expect(VarlinkError.invalidParameter("p").description == #"org.varlink.service.InvalidParameter {"parameter":"p"}"#)
    }
}
