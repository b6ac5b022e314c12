import ProcessTestSupport
import Testing

@testable import RunLoop

@Suite("Ports: frames and names", .timeLimit(.minutes(3)))
struct PortsFrameTests {
  static let samples: [Frame] = [
    Frame(kind: .oneWay, msgid: 100, sequence: 1, replyPortName: "com.MyApp.Thread-7", payload: []),
    Frame(kind: .request, msgid: -42, sequence: .max, replyPortName: nil, payload: Array(0..<200).map { UInt8($0) }),
    Frame(kind: .reply, msgid: 0, sequence: 9, replyPortName: nil, payload: [1, 2, 3]),
  ]

  @Test("frames survive encoding and arrive in any split")
  func roundTrip() throws {
    var stream: [UInt8] = []
    for frame in Self.samples { stream += frame.encoded() }
    for chunkSize in [1, 3, 24, 25, 1000] {
      var decoder = FrameDecoder()
      var decoded: [Frame] = []
      var offset = 0
      while offset < stream.count {
        let end = min(offset + chunkSize, stream.count)
        decoder.append(Array(stream[offset..<end]))
        offset = end
        while let frame = try decoder.nextFrame() { decoded.append(frame) }
      }
      #expect(decoded == Self.samples, "chunk size \(chunkSize)")
      #expect(decoder.bufferedByteCount == 0)
    }
  }

  @Test("the header is 24 bytes, little-endian, with the documented fields")
  func layout() {
    let bytes = Frame(kind: .request, msgid: 0x0102_0304, sequence: 5, replyPortName: "ab", payload: [9]).encoded()
    #expect(bytes.count == 24 + 2 + 1)
    #expect(Array(bytes[0..<4]) == Array("TKPM".utf8))
    #expect(bytes[4] == 1 && bytes[5] == 2)
    #expect(Array(bytes[8..<12]) == [4, 3, 2, 1])
    #expect(bytes[16] == 1 && bytes[20] == 2)
    #expect(Array(bytes[24...]) == [UInt8(ascii: "a"), UInt8(ascii: "b"), 9])
  }

  @Test("an oversized payload is refused as soon as the header arrives, before the payload")
  func oversized() {
    var bytes = Frame(kind: .oneWay, msgid: 1, sequence: 1, replyPortName: nil, payload: []).encoded()
    // Declare 2 MiB; send only the header.
    bytes[16] = 0
    bytes[17] = 0
    bytes[18] = 0x20
    bytes[19] = 0
    var decoder = FrameDecoder(limits: .standard)
    decoder.append(bytes)
    #expect(throws: FrameError.payloadTooLarge(declared: 0x20_0000, limit: 1 << 20)) { try decoder.nextFrame() }
    // The decoder stays failed: the stream cannot be resynchronised.
    #expect(throws: FrameError.self) { try decoder.nextFrame() }
  }

  @Test("a payload at exactly the limit is accepted")
  func atLimit() throws {
    var decoder = FrameDecoder(limits: Frame.Limits(maximumPayload: 10))
    decoder.append(
      Frame(kind: .oneWay, msgid: 1, sequence: 1, replyPortName: nil, payload: Array(repeating: 7, count: 10)).encoded()
    )
    #expect(try decoder.nextFrame()?.payload.count == 10)
  }

  static func corrupt(_ offset: Int, _ value: UInt8, kind: Frame.Kind = .oneWay, name: String? = nil) -> [UInt8] {
    var bytes = Frame(kind: kind, msgid: 1, sequence: 1, replyPortName: name, payload: [1]).encoded()
    bytes[offset] = value
    return bytes
  }

  @Test("malformed headers are refused with the reason")
  func malformed() {
    let cases: [([UInt8], FrameError)] = [
      (Self.corrupt(0, 0x58), .badMagic(0x4D50_4B58)),
      (Self.corrupt(4, 2), .unsupportedVersion(2)),
      (Self.corrupt(5, 9), .unknownKind(9)),
      (Self.corrupt(6, 1), .nonZeroReservedField),
      (Self.corrupt(23, 1), .nonZeroReservedField),
      (Self.corrupt(20, 0xFF), .invalidReplyName("255 bytes, more than 64")),
    ]
    for (bytes, expected) in cases {
      var decoder = FrameDecoder()
      decoder.append(bytes)
      #expect(throws: expected) { try decoder.nextFrame() }
    }
  }

  @Test("reply-port names are checked: not on replies, valid characters, UTF-8")
  func replyNames() {
    var onReply = FrameDecoder()
    var bytes = Frame(kind: .oneWay, msgid: 1, sequence: 1, replyPortName: "x", payload: []).encoded()
    bytes[5] = Frame.Kind.reply.rawValue
    onReply.append(bytes)
    #expect(throws: FrameError.replyNameOnReply) { try onReply.nextFrame() }

    var slash = FrameDecoder()
    slash.append(Self.corrupt(24, UInt8(ascii: "/"), name: "ab"))
    #expect(throws: FrameError.self) { try slash.nextFrame() }

    var notUTF8 = FrameDecoder()
    notUTF8.append(Self.corrupt(24, 0xC3, name: "ab"))
    #expect(throws: FrameError.invalidReplyName("not UTF-8")) { try notUTF8.nextFrame() }
  }

  @Test("an incomplete frame waits for more bytes without failing")
  func incomplete() throws {
    var decoder = FrameDecoder()
    let bytes = Self.samples[1].encoded()
    decoder.append(Array(bytes.dropLast()))
    #expect(try decoder.nextFrame() == nil)
    decoder.append([bytes.last!])
    #expect(try decoder.nextFrame() == Self.samples[1])
  }

  @Test("port names: allowed characters, length, no leading dot")
  func names() {
    for good in ["a", "com.myapp.MainThread", "com.MyApp.Thread-12", "x_y@z+w:1", String(repeating: "n", count: 64)] {
      #expect(throws: Never.self) { try PortName.validate(good) }
    }
    for bad in ["", ".hidden", "..", "a/b", "a b", "é", String(repeating: "n", count: 65)] {
      let error = #expect(throws: PortError.self) { try PortName.validate(bad) }
      #expect(error?.status == .invalid, "\(bad)")
    }
  }

  @Test("result codes carry the guide's values")
  func statusCodes() {
    #expect(PortStatus.allCases.map(\.rawValue) == [0, -1, -2, -3, -4, -5])
    let error = PortError(.receiveTimeout, detail: "late")
    #expect(error.code == -2)
    #expect(error.description.hasPrefix("receiveTimeout (-2): late"))
  }

  @Test("success is not an error", .runsExitTests)
  func successIsNotAnError() async {
    await #expect(processExitsWith: .failure) {
      _ = PortError(.success, detail: "misuse")
    }
  }
}
