import FuzzSupport
import TokendJSON

/// JSON: whatever `JSONParser` accepts, `JSONWriter` must write back as text that parses to an
/// equal value (and the writer's output is a fixed point: writing it again gives the same bytes).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSON(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard let value = try? JSONParser.parse(buffer: bytes) else { return 0 }
    var written: [UInt8] = []
    JSONWriter.write(value, into: &written)
    let reparsed: JSONValue
    do {
        reparsed = try JSONParser.parse(written)
    } catch {
        fuzzCheck(false, "JSONWriter output does not parse: \(error)")
        return 0
    }
    fuzzCheck(reparsed == value, "JSON round trip changed the value")
    var rewritten: [UInt8] = []
    JSONWriter.write(reparsed, into: &rewritten)
    fuzzCheck(rewritten == written, "JSONWriter output is not stable")
    return 0
}

@main
enum FuzzJSON {
    static func main() { runLibFuzzer(fuzzJSON) }
}
