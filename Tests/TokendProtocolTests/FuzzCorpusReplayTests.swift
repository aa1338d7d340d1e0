import Foundation
import NIOCore
import Testing
import TokendProtocol
import TokendTestSupport

/// Replays the committed libFuzzer corpus and minimised crashes of `Fuzz/Sources/fuzz-varlink`
/// (see `scripts/fuzz`) without sanitizers, with the same invariants. An input is one byte that
/// picks the chunk size (1…256) and then the byte stream: chunked framing must give the messages
/// that splitting at NULs gives (or fail exactly when one exceeds the limit), and every call that
/// decodes must re-encode to an equal call; typed parameter readers must fail cleanly.
struct FuzzCorpusReplayTests {
    static let target = "fuzz-varlink"
    static let limit = 512

    @Test func framingAndCalls() throws {
        try FuzzInputs.replay(Self.target, framingAndCalls)
    }

    func framingAndCalls(_ file: String, _ input: [UInt8]) throws {
        guard let first = input.first else { return }
        let chunkSize = Int(first) + 1
        let stream = Array(input.dropFirst())

        var decoder = VarlinkFrameDecoder(maximumMessageBytes: Self.limit)
        var buffer = ByteBuffer()
        var frames: [[UInt8]] = []
        var failed = false
        var offset = 0
        feeding: while offset < stream.count {
            let end = min(offset + chunkSize, stream.count)
            buffer.writeBytes(stream[offset..<end])
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

        var expected: [[UInt8]] = []
        var expectFailure = false
        var start = 0
        for index in stream.indices where stream[index] == 0 {
            if index - start > Self.limit {
                expectFailure = true
                break
            }
            expected.append(Array(stream[start..<index]))
            start = index + 1
        }
        if !expectFailure, stream.count - start > Self.limit { expectFailure = true }
        #expect(failed == expectFailure, "framing error differs from the reference for \(file)")
        if expectFailure {
            #expect(Array(expected.prefix(frames.count)) == frames, "frames before the error differ for \(file)")
        } else {
            #expect(frames == expected, "chunked framing differs from splitting at NULs for \(file)")
        }

        for frame in frames {
            #expect(frame.count <= Self.limit && !frame.contains(0))
            guard let call = try? VarlinkCall.decode(frame) else { continue }
            var encoded: [UInt8] = []
            call.encode(into: &encoded)
            #expect((try? VarlinkCall.decode(encoded)) == call, "VarlinkCall round trip changed a call in \(file)")
            _ = try? Credentials(json: call.parameters)
            _ = try? DaemonStatus(json: call.parameters)
            _ = try? CredentialStatus(json: call.parameters)
            _ = try? AddCredentialRequest(json: call.parameters)
            _ = try? VarlinkReply.decode(frame)
        }
    }
}
