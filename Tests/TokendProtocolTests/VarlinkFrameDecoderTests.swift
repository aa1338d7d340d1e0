import NIOCore
import NIOEmbedded
import NIOTestUtils
import Testing

@testable import TokendProtocol

private func buffer(_ string: String) -> ByteBuffer { ByteBuffer(string: string) }
private func buffer(_ bytes: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: bytes) }

struct VarlinkFrameDecoderVerifierTests {
    @Test func verifierWithSingleMessages() throws {
        try ByteToMessageDecoderVerifier.verifyDecoder(
            stringInputOutputPairs: [
                ("{\"method\":\"a.b.C\"}\0", [buffer(#"{"method":"a.b.C"}"#)]),
                ("{}\0", [buffer("{}")]),
                ("\0", [buffer("")]),
                ("x\0", [buffer("x")]),
            ],
            decoderFactory: { VarlinkFrameDecoder(maximumMessageBytes: 64) }
        )
    }

    @Test func verifierWithSeveralMessagesPerInput() throws {
        try ByteToMessageDecoderVerifier.verifyDecoder(
            stringInputOutputPairs: [
                ("one\0two\0three\0", [buffer("one"), buffer("two"), buffer("three")]),
                ("\0\0", [buffer(""), buffer("")]),
                ("{\"é\":\"🎉\"}\0", [buffer(#"{"é":"🎉"}"#)]),
            ],
            decoderFactory: { VarlinkFrameDecoder(maximumMessageBytes: 16) }
        )
    }

    @Test func verifierWithMessagesExactlyAtTheLimit() throws {
        let atLimit = String(repeating: "a", count: 32)
        try ByteToMessageDecoderVerifier.verifyDecoder(
            stringInputOutputPairs: [
                (atLimit + "\0", [buffer(atLimit)]),
                ("b\0" + atLimit + "\0", [buffer("b"), buffer(atLimit)]),
            ],
            decoderFactory: { VarlinkFrameDecoder(maximumMessageBytes: 32) }
        )
    }

    @Test func verifierCatchesAWrongDecoder() {
        // The verifier must be able to fail: expecting the NUL to be part of the frame is wrong.
        #expect(throws: (any Error).self) {
            try ByteToMessageDecoderVerifier.verifyDecoder(
                stringInputOutputPairs: [("one\0", [buffer("one\0")])],
                decoderFactory: { VarlinkFrameDecoder(maximumMessageBytes: 64) }
            )
        }
    }
}

struct VarlinkFrameDecoderChannelTests {
    func makeChannel(limit: Int) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(VarlinkFrameDecoder(maximumMessageBytes: limit)))
        return channel
    }

    func readAll(_ channel: EmbeddedChannel) throws -> [String] {
        var frames: [String] = []
        while var frame = try channel.readInbound(as: ByteBuffer.self) {
            frames.append(frame.readString(length: frame.readableBytes)!)
        }
        return frames
    }

    @Test func messageSplitAcrossReads() throws {
        let channel = try makeChannel(limit: 1024)
        try channel.writeInbound(buffer(#"{"method":"#))
        #expect(try readAll(channel).isEmpty)
        try channel.writeInbound(buffer(#""a.b.C"}"#))
        #expect(try readAll(channel).isEmpty)
        try channel.writeInbound(buffer([0]))
        #expect(try readAll(channel) == [#"{"method":"a.b.C"}"#])
        #expect(try channel.finish().isClean)
    }

    @Test func severalMessagesInOneRead() throws {
        let channel = try makeChannel(limit: 1024)
        try channel.writeInbound(buffer("{\"a\":1}\0{\"b\":2}\0{\"c\""))
        #expect(try readAll(channel) == [#"{"a":1}"#, #"{"b":2}"#])
        try channel.writeInbound(buffer(":3}\0"))
        #expect(try readAll(channel) == [#"{"c":3}"#])
        #expect(try channel.finish().isClean)
    }

    @Test func overTheLimitWithoutNULIsAnError() throws {
        let channel = try makeChannel(limit: 16)
        try channel.writeInbound(buffer(String(repeating: "x", count: 16)))  // at the limit: keep waiting
        #expect(throws: VarlinkFrameError.messageTooLarge(limit: 16)) {
            try channel.writeInbound(buffer("y"))
        }
        #expect(try readAll(channel).isEmpty)
        _ = try? channel.finish()
    }

    @Test func overTheLimitWithNULIsAnError() throws {
        let channel = try makeChannel(limit: 16)
        #expect(throws: VarlinkFrameError.messageTooLarge(limit: 16)) {
            try channel.writeInbound(buffer(String(repeating: "x", count: 17) + "\0"))
        }
        #expect(try readAll(channel).isEmpty)
        _ = try? channel.finish()
    }

    @Test func oversizedMessageAfterGoodOnesIsAnError() throws {
        let channel = try makeChannel(limit: 8)
        #expect(throws: VarlinkFrameError.messageTooLarge(limit: 8)) {
            try channel.writeInbound(buffer("ok\0" + String(repeating: "z", count: 9)))
        }
        #expect(try readAll(channel) == ["ok"])
        _ = try? channel.finish()
    }

    @Test func exactlyAtTheLimitIsAccepted() throws {
        let channel = try makeChannel(limit: 16)
        let message = String(repeating: "m", count: 16)
        try channel.writeInbound(buffer(message))
        try channel.writeInbound(buffer("\0" + message + "\0"))
        #expect(try readAll(channel) == [message, message])
        #expect(try channel.finish().isClean)
    }

    @Test func slowSenderAtTheLimitIsAccepted() throws {
        // Byte by byte, so the remembered search position is exercised.
        let channel = try makeChannel(limit: 16)
        let message = String(repeating: "s", count: 16)
        for byte in Array(message.utf8) + [0] + Array("t".utf8) + [0] {
            try channel.writeInbound(buffer([byte]))
        }
        #expect(try readAll(channel) == [message, "t"])
        #expect(try channel.finish().isClean)
    }

    @Test func partialMessageAtEOFIsDropped() throws {
        let channel = try makeChannel(limit: 64)
        try channel.writeInbound(buffer("done\0partial"))
        #expect(try readAll(channel) == ["done"])
        _ = try channel.finish()
        #expect(try readAll(channel).isEmpty)
    }
}

struct VarlinkFrameNextFrameTests {
    @Test func nextFrameDirectly() throws {
        var decoder = VarlinkFrameDecoder(maximumMessageBytes: 10)
        var input = buffer("abc\0de")
        var first = try #require(try decoder.nextFrame(&input))
        #expect(first.readString(length: first.readableBytes) == "abc")
        #expect(try decoder.nextFrame(&input) == nil)
        #expect(input.readableBytes == 2)
        input.writeString("f\0")
        var second = try #require(try decoder.nextFrame(&input))
        #expect(second.readString(length: second.readableBytes) == "def")
        #expect(input.readableBytes == 0)
    }

    @Test func limitBoundaries() throws {
        var decoder = VarlinkFrameDecoder(maximumMessageBytes: 4)
        var exact = buffer("abcd\0")
        #expect(try decoder.nextFrame(&exact) == buffer("abcd"))

        var waiting = buffer("abcd")
        #expect(try decoder.nextFrame(&waiting) == nil)
        waiting.writeString("e")
        #expect(throws: VarlinkFrameError.messageTooLarge(limit: 4)) { try decoder.nextFrame(&waiting) }

        var fresh = VarlinkFrameDecoder(maximumMessageBytes: 4)
        var tooLong = buffer("abcde\0")
        #expect(throws: VarlinkFrameError.messageTooLarge(limit: 4)) { try fresh.nextFrame(&tooLong) }
    }

    @Test func errorDescription() {
        #expect(VarlinkFrameError.messageTooLarge(limit: 65536).description == "message exceeds the limit of 65536 bytes")
    }

    @Test func writeVarlinkMessageAppendsNUL() {
        var output = ByteBuffer()
        output.writeVarlinkMessage(Array("{}".utf8))
        #expect(Array(output.readableBytesView) == [0x7B, 0x7D, 0x00])
    }
}
