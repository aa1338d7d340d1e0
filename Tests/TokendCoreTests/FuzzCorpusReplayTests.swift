import Foundation
import Testing
import TokendCore
import TokendJSON
import TokendTestSupport

/// Replays the committed libFuzzer corpora and minimised crashes of `Fuzz/Sources/fuzz-token-response`
/// and `Fuzz/Sources/fuzz-jwt` (see `scripts/fuzz`) without sanitizers, with the same invariants.
struct FuzzCorpusReplayTests {
    static let now = Timestamp(secondsSince1970: 1_700_000_000)

    /// An input is the HTTP status (2 bytes, big-endian), the `Retry-After` header up to the first
    /// `\n` (none when empty), then the body. A 200 is `success` exactly when `TokenResponse.parse`
    /// accepts the body, nothing else is, an accepted token is never empty, and `Retry-After` stays
    /// within a day.
    @Test func tokenEndpointResponse() throws {
        try FuzzInputs.replay("fuzz-token-response", tokenEndpointResponse)
    }

    func tokenEndpointResponse(_ file: String, _ input: [UInt8]) throws {
        guard input.count >= 2 else { return }
        let status = Int(input[0]) << 8 | Int(input[1])
        let rest = input[2...]
        let newline = rest.firstIndex(of: UInt8(ascii: "\n")) ?? rest.endIndex
        let header = String(decoding: rest[..<newline], as: UTF8.self)
        let body = newline < rest.endIndex ? Array(rest[(newline + 1)...]) : []

        let accepted = try? TokenResponse.parse(body)
        if let accepted {
            #expect(!accepted.accessToken.value.isEmpty)
            _ = accepted.lifetime(receivedAt: Self.now, assumed: .seconds(300))
        }
        _ = TokenErrorResponse.parse(body)

        let outcome = GrantOutcome.classify(status: status, retryAfterHeader: header.isEmpty ? nil : header, body: body, now: Self.now)
        switch outcome {
        case .success(let response):
            #expect(status == 200 && response == accepted, "success differs from TokenResponse.parse for \(file)")
        case .permanent, .transient:
            #expect(status != 200 || accepted == nil, "a usable 200 was not classified as success for \(file)")
        case .unanswered:
            #expect(status == 200 && accepted == nil, "only an unusable 200 is of unknown outcome, for \(file)")
        }
        if case .transient(_, let retryAfter?) = outcome {
            #expect(retryAfter >= .zero && retryAfter <= .seconds(86400), "Retry-After out of range for \(file)")
        }
    }

    /// The input is a token string. Claims that decode are sane NumericDates; base64url decoding
    /// never grows, and decoding an encoding gives the bytes back.
    @Test func jwtClaimsAndBase64URL() throws {
        try FuzzInputs.replay("fuzz-jwt", jwtClaimsAndBase64URL)
    }

    func jwtClaimsAndBase64URL(_ file: String, _ bytes: [UInt8]) throws {
        let text = String(decoding: bytes, as: UTF8.self)
        if let claims = JWTTimeClaims(jwt: text) {
            for date in [claims.issuedAt, claims.expiresAt].compactMap({ $0 }) {
                #expect(date.millisecondsSince1970 >= 0 && date.millisecondsSince1970 < 10_000_000_000_000_000)
            }
        }
        if let decoded = Base64URL.decode(text) {
            #expect(decoded.count <= text.utf8.count)
        }
        let encoded = Base64URL.encode(bytes)
        #expect(Base64URL.decode(encoded) == bytes, "base64url round trip failed for \(file)")
        _ = JWTTimeClaims(jwt: "eyJhbGciOiJub25lIn0.\(encoded).")
    }
}
