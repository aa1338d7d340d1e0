import FuzzSupport
import NIOCore
import TokendJSON
import TokendProtocol

/// Varlink framing and call decoding.
///
/// The first byte picks the chunk size the stream arrives in (1…256 bytes), so the decoder's
/// resumable search is exercised; the rest is the byte stream. Checks: chunked framing yields the
/// same messages as splitting the whole stream at NULs, never a message over the limit; every
/// call that decodes re-encodes to a message that decodes to an equal call; typed parameter
/// readers never crash on what a client can send.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzVarlink(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    guard let first = input.first else { return 0 }
    let chunkSize = Int(first) + 1
    let stream = UnsafeBufferPointer(rebasing: input.dropFirst())
    let limit = 512

    var decoder = VarlinkFrameDecoder(maximumMessageBytes: limit)
    var buffer = ByteBufferAllocator().buffer(capacity: 0)
    var frames: [[UInt8]] = []
    var failed = false
    var offset = 0
    feeding: while offset < stream.count {
        let end = min(offset + chunkSize, stream.count)
        buffer.writeBytes(UnsafeBufferPointer(rebasing: stream[offset..<end]))
        offset = end
        while true {
            do {
                guard let frame = try decoder.nextFrame(&buffer) else { break }
                frames.append(Array(frame.readableBytesView))
            } catch {
                failed = true
                break feeding
            }
        }
    }

    // The reference: split at NULs; a complete message over the limit, or a tail over the limit,
    // is a framing error.
    var expected: [[UInt8]] = []
    var expectFailure = false
    var start = 0
    for index in 0..<stream.count where stream[index] == 0 {
        if index - start > limit {
            expectFailure = true
            break
        }
        expected.append(Array(stream[start..<index]))
        start = index + 1
    }
    if !expectFailure, stream.count - start > limit { expectFailure = true }
    if expectFailure {
        fuzzCheck(failed, "an over-long message was not rejected")
        fuzzCheck(frames.count <= expected.count && Array(expected.prefix(frames.count)) == frames, "frames differ before the error")
    } else {
        fuzzCheck(!failed, "framing failed on a stream within the limit")
        fuzzCheck(frames == expected, "chunked framing differs from splitting at NULs")
    }

    for frame in frames {
        fuzzCheck(frame.count <= limit && !frame.contains(0), "a frame is over the limit or contains NUL")
        checkCall(frame)
    }
    return 0
}

func checkCall(_ message: [UInt8]) {
    guard let call = try? VarlinkCall.decode(message) else { return }
    var encoded: [UInt8] = []
    call.encode(into: &encoded)
    let again = try? VarlinkCall.decode(encoded)
    fuzzCheck(again != nil, "a re-encoded call does not decode")
    fuzzCheck(again == call, "VarlinkCall round trip changed the call")
    // What the server and client do with parameters: typed readers must fail cleanly.
    _ = try? Credentials(json: call.parameters)
    _ = try? DaemonStatus(json: call.parameters)
    _ = try? CredentialStatus(json: call.parameters)
    _ = try? AddCredentialRequest(json: call.parameters)
    _ = try? VarlinkReply.decode(message)
}

@main
enum FuzzVarlink {
    static func main() { runLibFuzzer(fuzzVarlink) }
}
