import Foundation
import Testing
import TokendTestSupport

@testable import TokendJSON

/// Parses with Foundation's JSONSerialization (fragments allowed, as JSONParser accepts any value
/// at the top level); `nil` when Foundation rejects the document.
private func foundationParse(_ bytes: [UInt8]) -> Any? {
    try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
}

private func isFoundationBoolean(_ number: NSNumber) -> Bool {
    // JSONSerialization produces booleans as NSNumbers of type "c" (char), and numbers never.
    String(cString: number.objCType) == "c"
}

/// Whether `ours` and Foundation's `theirs` are the same JSON value: same kind, same numbers,
/// same strings, same members.
private func agree(_ ours: JSONValue, _ theirs: Any) -> Bool {
    switch ours {
    case .null:
        return theirs is NSNull
    case .bool(let b):
        guard let number = theirs as? NSNumber, isFoundationBoolean(number) else { return false }
        return number.boolValue == b
    case .int(let i):
        guard let number = theirs as? NSNumber, !isFoundationBoolean(number) else { return false }
        return number.int64Value == i && number.doubleValue == Double(i)
    case .double(let d):
        guard let number = theirs as? NSNumber, !isFoundationBoolean(number) else { return false }
        return number.doubleValue == d
    case .string(let s):
        guard let string = theirs as? String else { return false }
        return Array(string.unicodeScalars) == Array(s.unicodeScalars)
    case .array(let elements):
        guard let array = theirs as? [Any], array.count == elements.count else { return false }
        return zip(elements, array).allSatisfy { agree($0, $1) }
    case .object(let object):
        guard let dictionary = theirs as? [String: Any], dictionary.count == object.count else { return false }
        return object.members.allSatisfy { member in dictionary[member.key].map { agree(member.value, $0) } ?? false }
    }
}

struct FoundationAgreementTests {
    static let validDocuments: [String] = [
        "null", "true", "false", "0", "-0", "1", "-1", "42", "9223372036854775807", "-9223372036854775808",
        "1.5", "-0.25", "1e3", "1E-3", "2.5e+10", "0.000001", "123456.789", "1e308", "1e-320", "18446744073709551616",
        #""""#, #""abc""#, #""\"\\\/\b\f\n\r\t""#, #""\u0041\u00e9\u20AC""#, #""\ud83c\udf89""#, "\"é€🎉 raw\"",
        #""\u0000""#, "\"\u{7F}\"",
        "[]", "{}", " [ 1 , 2 , 3 ] ", #"[1,"a",null,true,false,1.5,[],{}]"#,
        #"{"a":1,"b":[true,{"c":null}],"d":"e"}"#, #"{"":""}"#, #"{"A":1,"a":2}"#,
        #"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"alice"},"more":true}"#,
        #"{"parameters":{"credentials":{"userIdentifier":"u","accessToken":"t","tokenType":"Bearer","expiresAt":1700000000}}}"#,
        String(repeating: "[", count: 64) + String(repeating: "]", count: 64),
        "\t\n\r {\"x\" : [ 1e1 , -2E-2 ] }\n",
    ]

    @Test(arguments: validDocuments)
    func agreesWithFoundationOnValidDocuments(document: String) throws {
        let bytes = Array(document.utf8)
        let ours = try JSONParser.parse(bytes)
        let theirs = try #require(foundationParse(bytes), "Foundation rejects \(document)")
        #expect(agree(ours, theirs), "\(ours) vs \(theirs)")
    }

    @Test func comparisonDetectsDifferences() throws {
        // The comparison itself must be able to tell values apart, or the table above proves nothing.
        let theirs = try #require(foundationParse(Array(#"{"a":[1,true,"x",null,2.5]}"#.utf8)))
        #expect(agree(.object(["a": .array([.int(1), .bool(true), .string("x"), .null, .double(2.5)])]), theirs))
        #expect(!agree(.object(["a": .array([.bool(true), .bool(true), .string("x"), .null, .double(2.5)])]), theirs))
        #expect(!agree(.object(["a": .array([.int(1), .int(1), .string("x"), .null, .double(2.5)])]), theirs))
        #expect(!agree(.object(["a": .array([.int(1), .bool(true), .string("y"), .null, .double(2.5)])]), theirs))
        #expect(!agree(.object(["a": .array([.int(1), .bool(true), .string("x"), .null])]), theirs))
        #expect(!agree(.object(["b": .array([.int(1), .bool(true), .string("x"), .null, .double(2.5)])]), theirs))
        #expect(!agree(.object(["a": .array([.int(1), .bool(true), .string("x"), .null, .double(2.6)])]), theirs))
    }

    /// Documents Foundation rejects; JSONParser must reject them too.
    static let invalidDocuments: [[UInt8]] =
        [
            "", " ", "01", "1.", "-", ".5", "+1", "1e", "0x10", "NaN", "Infinity", "tru", "nul", "[1 2]", "[1] x", "\"a\" \"b\"",
            "{\"a\" 1}", "{'a':1}", "{a:1}", "[\"\\x\"]", "[\"\\u00\"]", "\"\\ud800\"", "\"\\udc00x\"", "1e400", "[", "{", "[\"\t\"]",
            "\" \u{01} \"", "[-]", "[1e]",
        ].map { Array($0.utf8) } + [
            [0x22, 0xC3, 0x28, 0x22], [0x22, 0xFF, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22],
        ]

    @Test(arguments: invalidDocuments)
    func rejectsWhatFoundationRejects(document: [UInt8]) {
        #expect(foundationParse(document) == nil, "Foundation accepts \(document); the table is wrong")
        #expect(parseError(bytes: document) != nil)
    }

    /// Stricter than Foundation: trailing commas, duplicate keys, excessive depth.
    @Test(arguments: [
        ("[1,]", JSONParseError.Reason.unexpectedCharacter), ("{\"a\":1,}", .unexpectedCharacter),
        ("{\"a\":1,\"a\":2}", .duplicateKey), ("{\"\\u00e9\":1,\"e\\u0301\":2}", .duplicateKey),
        (String(repeating: "[", count: 65) + String(repeating: "]", count: 65), .tooDeep),
    ])
    func rejectsStricterCases(document: String, reason: JSONParseError.Reason) {
        #expect(parseError(document)?.reason == reason)
    }

    @Test func foundationAcceptsWriterOutput() throws {
        var random = RandomJSON(generator: SeededGenerator(seed: 2024))
        for _ in 0..<200 {
            let value = random.value()
            var output: [UInt8] = []
            JSONWriter.write(value, into: &output)
            let theirs = try #require(foundationParse(output), "Foundation rejects \(String(decoding: output, as: UTF8.self))")
            // Keys equal under Swift's String `==` are already merged in JSONObject, as Foundation
            // merges them, so whole values compare.
            #expect(agreeLoosely(value, theirs), "\(String(decoding: output, as: UTF8.self))")
        }
    }
}

/// Like `agree`, but numbers compare by value only (Foundation may read large integers as
/// decimals whose double value rounds).
private func agreeLoosely(_ ours: JSONValue, _ theirs: Any) -> Bool {
    switch ours {
    case .int(let i):
        guard let number = theirs as? NSNumber else { return false }
        return number.int64Value == i || number.doubleValue == Double(i)
    case .double(let d):
        guard let number = theirs as? NSNumber else { return false }
        // Foundation reads long numbers as decimals, whose double value may be off in the last
        // digits (JSONParser's exactness is checked by the round-trip test instead).
        return number.doubleValue == d || abs(number.doubleValue - d) <= abs(d) * 1e-9 || abs(d) < 1e-300
    case .array(let elements):
        guard let array = theirs as? [Any], array.count == elements.count else { return false }
        return zip(elements, array).allSatisfy { agreeLoosely($0, $1) }
    case .object(let object):
        guard let dictionary = theirs as? [String: Any], dictionary.count == object.count else { return false }
        return object.members.allSatisfy { member in dictionary[member.key].map { agreeLoosely(member.value, $0) } ?? false }
    default:
        return agree(ours, theirs)
    }
}
