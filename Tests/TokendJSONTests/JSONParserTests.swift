import Testing

@testable import TokendJSON

/// Parses `text`, returning the error instead of throwing it (so tables can compare reasons).
func parseError(_ text: String, maximumDepth: Int = JSONParser.defaultMaximumDepth) -> JSONParseError? {
    parseError(bytes: Array(text.utf8), maximumDepth: maximumDepth)
}

func parseError(bytes: [UInt8], maximumDepth: Int = JSONParser.defaultMaximumDepth) -> JSONParseError? {
    do {
        _ = try JSONParser.parse(bytes, maximumDepth: maximumDepth)
        return nil
    } catch {
        return error
    }
}

struct JSONParserValueTests {
    @Test func parsesNull() throws {
        #expect(try JSONParser.parse("null") == .null)
    }

    @Test(arguments: [("true", true), ("false", false)])
    func parsesBooleans(text: String, expected: Bool) throws {
        #expect(try JSONParser.parse(text) == .bool(expected))
    }

    @Test(arguments: [
        ("0", Int64(0)), ("1", 1), ("-1", -1), ("42", 42), ("1234567890", 1_234_567_890),
        ("9223372036854775807", Int64.max), ("-9223372036854775808", Int64.min),
    ])
    func parsesIntegers(text: String, expected: Int64) throws {
        #expect(try JSONParser.parse(text) == .int(expected))
    }

    @Test(arguments: [
        ("1.5", 1.5), ("-0.25", -0.25), ("1e3", 1000.0), ("1E3", 1000.0), ("1e+3", 1000.0), ("25e-1", 2.5),
        ("0.1", 0.1), ("1.0", 1.0), ("-1.5E-2", -0.015), ("1e-400", 0.0), ("123.456e2", 12345.6),
    ])
    func parsesDoubles(text: String, expected: Double) throws {
        #expect(try JSONParser.parse(text) == .double(expected))
    }

    @Test func integralSyntaxWithFractionOrExponentIsADouble() throws {
        // "1.0" and "1e0" are written as non-integers, and stay doubles.
        #expect(try JSONParser.parse("1.0") == .double(1))
        #expect(try JSONParser.parse("1e0") == .double(1))
        #expect(try JSONParser.parse("1.0") != .int(1))
    }

    @Test func negativeZero() throws {
        let value = try JSONParser.parse("-0")
        #expect(value.doubleValue == 0)
        #expect(value.int64Value == 0)
        let double = try JSONParser.parse("-0.0")
        guard case .double(let d) = double else {
            Issue.record("-0.0 parsed as \(double)")
            return
        }
        #expect(d == 0 && d.sign == .minus)
    }

    @Test(arguments: ["9223372036854775808", "-9223372036854775809", "18446744073709551616", "123456789012345678901234567890"])
    func integersBeyondInt64BecomeDoubles(text: String) throws {
        let value = try JSONParser.parse(text)
        guard case .double(let d) = value else {
            Issue.record("\(text) parsed as \(value)")
            return
        }
        #expect(d == Double(text)!)
    }

    @Test(arguments: ["1e400", "-1e400", "1E309", "123456789e999"])
    func numbersThatAreNotFiniteAreRejected(text: String) {
        #expect(parseError(text)?.reason == .invalidNumber)
    }

    @Test func parsesStrings() throws {
        #expect(try JSONParser.parse(#""""#) == .string(""))
        #expect(try JSONParser.parse(#""hello""#) == .string("hello"))
        #expect(try JSONParser.parse(#""h\u00e9llo wörld 🎉""#) == .string("héllo wörld 🎉"))
    }

    @Test func parsesArrays() throws {
        #expect(try JSONParser.parse("[]") == .array([]))
        #expect(try JSONParser.parse(" [ ] ") == .array([]))
        #expect(
            try JSONParser.parse(#"[1, "a", null, true, [false], {}]"#)
                == .array([.int(1), .string("a"), .null, .bool(true), .array([.bool(false)]), .object([:])]))
    }

    @Test func parsesObjectsKeepingOrder() throws {
        let value = try JSONParser.parse(#"{"b": 1, "a": [2], "c": {"d": null}}"#)
        guard case .object(let object) = value else {
            Issue.record("not an object: \(value)")
            return
        }
        #expect(object.keys == ["b", "a", "c"])
        #expect(object["b"] == .int(1))
        #expect(object["a"] == .array([.int(2)]))
        #expect(object["c"] == .object(["d": .null]))
        #expect(object["missing"] == nil)
        #expect(try JSONParser.parse("{}") == .object([:]))
        #expect(try JSONParser.parse("{ }") == .object([:]))
    }

    @Test func whitespaceAroundEverythingIsAllowed() throws {
        let value = try JSONParser.parse(" \t\r\n{ \"a\" \n:\t[ 1 ,\r2 ] , \"b\" : true }\n ")
        #expect(value == .object(["a": .array([.int(1), .int(2)]), "b": .bool(true)]))
    }

    @Test func parsesFromNonContiguousCollections() throws {
        // A collection without contiguous storage takes the copying path.
        let bytes = Array(#"{"k":[1,2,3]}"#.utf8)
        let lazy = bytes.lazy.map { $0 }
        #expect(try JSONParser.parse(lazy) == .object(["k": .array([.int(1), .int(2), .int(3)])]))
        #expect(try JSONParser.parse(bytes[...]) == .object(["k": .array([.int(1), .int(2), .int(3)])]))
    }
}

struct JSONParserEscapeTests {
    @Test(arguments: [
        (#""\"""#, "\""), (#""\\""#, "\\"), (#""\/""#, "/"), (#""\b""#, "\u{08}"), (#""\f""#, "\u{0C}"),
        (#""\n""#, "\n"), (#""\r""#, "\r"), (#""\t""#, "\t"), (#""\u0041""#, "A"), (#""\u00E9""#, "é"),
        (#""\u20ac""#, "€"), (#""\u0000""#, "\u{0}"), (#""a\nb\tc""#, "a\nb\tc"), (#""x\u0041y""#, "xAy"),
        (#""\ud83c\udf89""#, "🎉"), (#""\uD834\uDD1E""#, "𝄞"), (#""\udbff\udfff""#, "\u{10FFFF}"),
        (#""pre \ud83d\ude00 post""#, "pre 😀 post"),
    ])
    func escapes(json: String, expected: String) throws {
        #expect(try JSONParser.parse(json) == .string(expected))
    }

    @Test(arguments: [
        #""\ud800""#,  // lone high surrogate at the end
        #""\ud800x""#,  // high surrogate followed by a plain character
        #""\udc00""#,  // lone low surrogate
        #""\udfff\ud800""#,  // reversed pair
        #""\ud800\u0041""#,  // high surrogate followed by a non-surrogate escape
        #""\ud800\ud800""#,  // two high surrogates
        #""\ud800\n""#,  // high surrogate followed by another escape
    ])
    func loneSurrogatesAreRejected(json: String) {
        #expect(parseError(json)?.reason == .invalidEscape)
    }

    @Test(arguments: [#""\x""#, #""\a""#, #""\U0041""#, #""\u00G0""#, #""\u-123""#, #""\'""#])
    func invalidEscapesAreRejected(json: String) {
        #expect(parseError(json)?.reason == .invalidEscape)
    }

    @Test(arguments: [#""\u00"#, #""\u"#, #""\"#, #""abc"#, #""abc\""#])
    func truncatedStringsAreRejected(json: String) {
        #expect(parseError(json)?.reason == .unexpectedEnd)
    }
}

struct JSONParserUTF8Tests {
    @Test(
        arguments: [
            [0xC3, 0x28],  // invalid continuation byte
            [0xFF],  // never valid in UTF-8
            [0xFE],
            [0xC0, 0xAF],  // overlong "/"
            [0xE0, 0x80, 0xAF],  // overlong "/" in three bytes
            [0xED, 0xA0, 0x80],  // a UTF-16 surrogate encoded in UTF-8
            [0xF4, 0x90, 0x80, 0x80],  // above U+10FFFF
            [0xE2, 0x82],  // truncated sequence
            [0x80],  // lone continuation byte
        ] as [[UInt8]])
    func invalidUTF8InStringsIsRejected(sequence: [UInt8]) {
        // Without escapes (fast path) and with an escape before it (slow path).
        let plain: [UInt8] = [0x22, 0x61] + sequence + [0x62, 0x22]
        let escaped: [UInt8] = Array(#""\n"#.utf8) + sequence + [0x22]
        #expect(parseError(bytes: plain)?.reason == .invalidUTF8)
        #expect(parseError(bytes: escaped)?.reason == .invalidUTF8)
    }

    @Test func invalidUTF8InAKeyIsRejected() {
        let bytes: [UInt8] = [0x7B, 0x22, 0xC3, 0x28, 0x22, 0x3A, 0x31, 0x7D]  // {"\xC3(":1}
        #expect(parseError(bytes: bytes)?.reason == .invalidUTF8)
    }

    @Test func invalidUTF8OutsideStringsIsRejected() {
        #expect(parseError(bytes: [0xFF]) != nil)
        #expect(parseError(bytes: [0x5B, 0x31, 0x2C, 0xC3, 0xA9, 0x5D]) != nil)  // [1,é]
        #expect(parseError(bytes: [0xEF, 0xBB, 0xBF, 0x31]) != nil)  // a byte-order mark is not whitespace
    }

    @Test func validMultiByteUTF8IsAccepted() throws {
        let bytes: [UInt8] = [0x22, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x8E, 0x89, 0x22]
        #expect(try JSONParser.parse(bytes) == .string("é€🎉"))
    }

    @Test(arguments: Array(UInt8(0)..<0x20))
    func controlCharactersInStringsAreRejected(byte: UInt8) {
        #expect(parseError(bytes: [0x22, 0x61, byte, 0x22])?.reason == .controlCharacterInString)
        // After an escape, the slow path must reject them too.
        #expect(parseError(bytes: Array(#""\t"#.utf8) + [byte, 0x22])?.reason == .controlCharacterInString)
    }

    @Test func deleteIsNotAControlCharacterInJSON() throws {
        #expect(try JSONParser.parse(bytes: [0x22, 0x7F, 0x22]) == .string("\u{7F}"))
    }
}

extension JSONParser {
    fileprivate static func parse(bytes: [UInt8]) throws(JSONParseError) -> JSONValue { try parse(bytes) }
}

struct JSONParserStructureTests {
    @Test func duplicateKeysAreRejected() {
        let error = parseError(#"{"a":1,"b":2,"a":3}"#)
        #expect(error?.reason == .duplicateKey)
        #expect(error?.offset == 13)  // the second "a"
        #expect(parseError(#"{"x":{"a":1,"a":1}}"#)?.reason == .duplicateKey)
        // Written differently, the same key.
        #expect(parseError(#"{"a":1,"\u0061":2}"#)?.reason == .duplicateKey)
    }

    @Test func keysThatDifferOnlyInCaseAreDistinct() throws {
        let value = try JSONParser.parse(#"{"a":1,"A":2}"#)
        #expect(value.objectValue?.count == 2)
    }

    @Test func canonicallyEquivalentKeysAreRejectedAsDuplicates() {
        // "é" precomposed and decomposed are one key to Swift (and Foundation merges them), so
        // accepting both would give the message two meanings.
        #expect(parseError(#"{"\u00e9":1,"e\u0301":2}"#)?.reason == .duplicateKey)
    }

    @Test func nestingUpToTheLimitIsAccepted() throws {
        let arrays = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        var value = try JSONParser.parse(arrays)
        var depth = 0
        while case .array(let elements) = value {
            depth += 1
            guard let first = elements.first else { break }
            value = first
        }
        #expect(depth == 64)
        let objects = String(repeating: #"{"a":"#, count: 63) + "[]" + String(repeating: "}", count: 63)
        #expect(throws: Never.self) { try JSONParser.parse(objects) }
    }

    @Test func nestingBeyondTheLimitIsRejected() {
        let arrays = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(parseError(arrays)?.reason == .tooDeep)
        let objects = String(repeating: #"{"a":"#, count: 65) + "1" + String(repeating: "}", count: 65)
        #expect(parseError(objects)?.reason == .tooDeep)
        let mixed = String(repeating: #"[{"a":"#, count: 33) + "1" + String(repeating: "}]", count: 33)
        #expect(parseError(mixed)?.reason == .tooDeep)
    }

    @Test func hostileNestingDoesNotOverflowTheStack() {
        let deep = String(repeating: "[", count: 1_000_000)
        #expect(parseError(deep)?.reason == .tooDeep)
    }

    @Test(arguments: [0, 1, 2, 10])
    func customDepthLimit(limit: Int) throws {
        let atLimit = String(repeating: "[", count: limit) + "1" + String(repeating: "]", count: limit)
        let beyond = "[" + atLimit + "]"
        #expect(parseError(atLimit, maximumDepth: limit) == nil)
        #expect(parseError(beyond, maximumDepth: limit)?.reason == .tooDeep)
    }

    @Test(arguments: ["1 2", "{} x", "[] []", "null null", "\"a\"\"b\"", "truex", "1,", "{}}", "[]]", "0 0"])
    func trailingDataIsRejected(text: String) {
        #expect(parseError(text)?.reason == .trailingData)
    }

    @Test func trailingDataErrorPointsAtTheExtraData() {
        #expect(parseError("[1]  x")?.offset == 5)
    }

    @Test(arguments: ["", " ", "\n\t", "[", "{", "[1", "[1,", #"{"a""#, #"{"a":"#, #"{"a":1"#, "tru", "nul", "fals"])
    func truncatedDocumentsAreRejected(text: String) {
        #expect(parseError(text)?.reason == .unexpectedEnd)
    }

    @Test(arguments: [
        "[1,]", "{\"a\":1,}", "[,1]", "{,}", "{a:1}", "{'a':1}", "[1 2]", "{\"a\" 1}", "{\"a\":1 \"b\":2}", "{1:2}",
        "trUe", "nulL", "[undefined]", "NaN", "Infinity", "'a'", "}", "]", ":", "[1:2]", "{\"a\":1;\"b\":2}",
    ])
    func structuralErrorsAreRejected(text: String) {
        #expect(parseError(text)?.reason == .unexpectedCharacter)
    }

    @Test(arguments: [
        "01", "-01", "00", "1.", "-", "-a", ".5", "+1", "1e", "1e+", "1E-", "1.e5", "-.5", "0x10", "[01]", "[1.]", "[-]", "1.5e",
    ])
    func malformedNumbersAreRejected(text: String) {
        #expect(parseError(text) != nil)
    }

    @Test(arguments: ["1.", "-", "1e", "1e+", "1.e5", "-.5", "[1.]", "[-]", "1.5e", "-a"])
    func malformedNumbersGiveInvalidNumber(text: String) {
        #expect(parseError(text)?.reason == .invalidNumber)
    }

    @Test func leadingZerosAreRejectedInsideContainers() {
        #expect(parseError("[01]")?.reason == .unexpectedCharacter)
        #expect(parseError("01")?.reason == .trailingData)
    }

    @Test func errorDescriptionNamesReasonAndOffset() {
        let error = parseError("[1,]")
        #expect(error == JSONParseError(reason: .unexpectedCharacter, offset: 3))
        #expect(error?.description == "unexpected character at byte 3")
    }
}

struct JSONValueAccessorTests {
    @Test func accessors() {
        #expect(JSONValue.string("a").stringValue == "a")
        #expect(JSONValue.int(1).stringValue == nil)
        #expect(JSONValue.bool(true).boolValue == true)
        #expect(JSONValue.null.boolValue == nil)
        #expect(JSONValue.null.isNull)
        #expect(!JSONValue.bool(false).isNull)
        #expect(JSONValue.array([.null]).arrayValue == [.null])
        #expect(JSONValue.object(["a": .null]).objectValue == ["a": .null])
        #expect(JSONValue.int(7).doubleValue == 7)
        #expect(JSONValue.double(2.5).doubleValue == 2.5)
        #expect(JSONValue.string("1").doubleValue == nil)
    }

    @Test(arguments: [
        (JSONValue.int(5), Int64?.some(5)), (.double(3.0), 3), (.double(-3.0), -3), (.double(3.5), nil), (.double(1e19), nil),
        (.double(-1e19), nil), (.double(.nan), nil), (.double(.infinity), nil), (.string("3"), nil), (.bool(true), nil), (.null, nil),
    ])
    func int64Value(value: JSONValue, expected: Int64?) {
        #expect(value.int64Value == expected)
    }

    @Test(arguments: [
        (JSONValue.null, "null"), (.bool(true), "a boolean"), (.int(1), "a number"), (.double(1), "a number"),
        (.string(""), "a string"), (.array([]), "an array"), (.object([:]), "an object"),
    ])
    func typeNames(value: JSONValue, name: String) {
        #expect(value.typeName == name)
    }

    @Test func objectSubscriptReplacesAndRemoves() {
        var object: JSONObject = ["a": .int(1), "b": .int(2)]
        object["a"] = .int(3)
        #expect(object.keys == ["a", "b"])
        #expect(object["a"] == .int(3))
        object["c"] = .null
        #expect(object.keys == ["a", "b", "c"])
        object["b"] = nil
        #expect(object.keys == ["a", "c"])
        #expect(object.count == 2)
        object["a"] = nil
        object["c"] = nil
        #expect(object.isEmpty)
    }

    @Test func dictionaryLiteralWithRepeatedKeyKeepsTheLastValue() {
        let object: JSONObject = ["a": .int(1), "a": .int(2)]
        #expect(object.count == 1)
        #expect(object["a"] == .int(2))
    }

    @Test func objectEqualityAndHashIgnoreOrder() {
        let a: JSONObject = ["x": .int(1), "y": .string("z")]
        let b: JSONObject = ["y": .string("z"), "x": .int(1)]
        #expect(a == b)
        #expect(a.hashValue == b.hashValue)
        #expect(Set([JSONValue.object(a), .object(b)]).count == 1)
        #expect(a != ["x": .int(1)])
        #expect(a != ["x": .int(1), "y": .string("w")])
        #expect(a != ["x": .int(1), "w": .string("z")])
    }
}

/// `parse(_:)` takes any collection of bytes: contiguous ones are read in place, others copied
/// first. Both ways give the same value, and the same error at the same offset.
struct JSONParserCollectionTests {
    @Test(arguments: [
        #"{"parameters":{"credentials":{"accessToken":"a","expiresAt":"2026-11-27T12:00:00Z"}}}"#, #"[1,2.5,"x",null,true]"#,
        #"{"a":1,"a":2}"#, #"{"a":"\ud800"}"#, "[1,2", "{} x", "",
    ])
    func contiguousAndOtherCollectionsAgree(text: String) {
        let bytes = Array(text.utf8)
        let inPlace = Result { () throws(JSONParseError) in try JSONParser.parse(bytes) }
        let copied = Result { () throws(JSONParseError) in try JSONParser.parse(bytes.lazy.map { $0 }) }
        #expect(bytes.lazy.map { $0 }.withContiguousStorageIfAvailable { _ in true } == nil)
        switch (inPlace, copied) {
        case (.success(let a), .success(let b)): #expect(a == b)
        case (.failure(let a), .failure(let b)): #expect(a == b)
        default: Issue.record("\(text): read in place \(inPlace), copied \(copied)")
        }
    }
}
