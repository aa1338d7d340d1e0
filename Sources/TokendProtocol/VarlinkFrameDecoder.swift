import NIOCore

/// Splits a byte stream into Varlink messages: each is one JSON text terminated by a NUL byte.
///
/// A message longer than `maximumMessageBytes` (without its NUL) is an error as soon as that many
/// bytes arrived without a terminator, so a client cannot make the server buffer without bound.
public struct VarlinkFrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = ByteBuffer

    public let maximumMessageBytes: Int
    /// How far the previous call already searched, so a slow sender is not rescanned each time.
    private var searchedBytes = 0

    public init(maximumMessageBytes: Int) {
        self.maximumMessageBytes = maximumMessageBytes
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let frame = try nextFrame(&buffer) else { return .needMoreData }
        context.fireChannelRead(Self.wrapInboundOut(frame))
        return .continue
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // Complete messages still buffered are delivered; a partial one at EOF is dropped (the
        // peer is gone, so there is nobody to answer).
        guard let frame = try nextFrame(&buffer) else { return .needMoreData }
        context.fireChannelRead(Self.wrapInboundOut(frame))
        return .continue
    }

    /// Removes and returns the next complete message from `buffer`, or `nil` if none is complete.
    /// - Throws: `VarlinkFrameError.messageTooLarge` when no NUL came within the limit.
    public mutating func nextFrame(_ buffer: inout ByteBuffer) throws(VarlinkFrameError) -> ByteBuffer? {
        let readable = buffer.readableBytesView
        let start = readable.index(readable.startIndex, offsetBy: min(searchedBytes, readable.count))
        guard let nul = readable[start...].firstIndex(of: 0) else {
            searchedBytes = readable.count
            if readable.count > maximumMessageBytes { throw .messageTooLarge(limit: maximumMessageBytes) }
            return nil
        }
        let length = readable.distance(from: readable.startIndex, to: nul)
        searchedBytes = 0
        if length > maximumMessageBytes { throw .messageTooLarge(limit: maximumMessageBytes) }
        let frame = buffer.readSlice(length: length)!
        buffer.moveReaderIndex(forwardBy: 1)
        return frame
    }
}

/// A framing failure: the stream cannot be split into messages any more.
public enum VarlinkFrameError: Error, Sendable, Hashable, CustomStringConvertible {
    case messageTooLarge(limit: Int)

    public var description: String {
        switch self {
        case .messageTooLarge(let limit): "message exceeds the limit of \(limit) bytes"
        }
    }
}

extension ByteBuffer {
    /// Writes `bytes` followed by the NUL terminator.
    public mutating func writeVarlinkMessage(_ bytes: [UInt8]) {
        writeBytes(bytes)
        writeInteger(UInt8(0))
    }
}
