import FuzzSupport
import TokendCore
import TokendJSON

/// Token-endpoint responses. Input: the HTTP status (2 bytes, big-endian), the `Retry-After`
/// header up to the first `\n` (none when empty), then the body. Checks: the parsers and the
/// classifier never crash; a 200 is `success` exactly when `TokenResponse.parse` accepts the
/// body; nothing else is a success; an accepted token is never empty; `Retry-After` is 0…1 day.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTokenResponse(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    guard input.count >= 2 else { return 0 }
    let status = Int(input[0]) << 8 | Int(input[1])
    let rest = input[2...]
    let newline = rest.firstIndex(of: UInt8(ascii: "\n")) ?? rest.endIndex
    let header = String(decoding: rest[..<newline], as: UTF8.self)
    let body = newline < rest.endIndex ? Array(rest[(newline + 1)...]) : []
    let now = Timestamp(secondsSince1970: 1_700_000_000)

    let accepted = try? TokenResponse.parse(body)
    if let accepted {
        fuzzCheck(!accepted.accessToken.value.isEmpty, "an empty access token was accepted")
        _ = accepted.lifetime(receivedAt: now, assumed: .seconds(300))
    }
    _ = TokenErrorResponse.parse(body)

    let outcome = GrantOutcome.classify(status: status, retryAfterHeader: header.isEmpty ? nil : header, body: body, now: now)
    switch outcome {
    case .success(let response):
        fuzzCheck(status == 200 && response == accepted, "success differs from TokenResponse.parse")
    case .permanent, .transient:
        fuzzCheck(status != 200 || accepted == nil, "a usable 200 was not classified as success")
    }
    if case .transient(_, let retryAfter?) = outcome {
        fuzzCheck(retryAfter >= .zero && retryAfter <= .seconds(86400), "Retry-After out of range")
    }
    return 0
}

@main
enum FuzzTokenResponse {
    static func main() { runLibFuzzer(fuzzTokenResponse) }
}
