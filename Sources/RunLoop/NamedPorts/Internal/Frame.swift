/// One unit on the wire between named message ports: a fixed header, an optional reply-port
/// name, and the payload.
///
/// Layout (all integers little-endian, 24-byte header):
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | magic `"TKPM"` |
/// | 4 | 1 | version (1) |
/// | 5 | 1 | kind (``Kind``) |
/// | 6 | 2 | flags (must be 0) |
/// | 8 | 4 | msgid (Int32) |
/// | 12 | 4 | sequence (UInt32): pairs a reply with its request |
/// | 16 | 4 | payload length |
/// | 20 | 2 | reply-port name length (0 = none; only requests and one-way messages carry one) |
/// | 22 | 2 | reserved (must be 0) |
/// | 24 | n | reply-port name (a valid port name, UTF-8) |
/// | 24 + n | m | payload |
///
/// Every field is checked as soon as the header is complete, before any payload is buffered,
/// so a hostile or broken peer cannot make the receiver allocate more than ``Limits``
/// allow.
struct Frame: Equatable, Sendable {
  /// What a frame is for.
  enum Kind: UInt8, Sendable {
    /// A message that wants no answer.
    case oneWay = 1
    /// A message whose sender waits for a ``reply`` with the same sequence number.
    case request = 2
    /// The answer to the ``request`` with the same sequence number.
    case reply = 3
  }

  /// The size limits a receiver enforces.
  struct Limits: Sendable, Equatable {
    /// The largest payload accepted, in bytes.
    var maximumPayload: Int
    /// The default: 1 MiB of payload per message.
    static let standard = Limits(maximumPayload: 1 << 20)
  }

  static let magic: UInt32 = 0x4D50_4B54  // "TKPM" read as little-endian bytes
  static let version: UInt8 = 1
  static let headerSize = 24

  var kind: Kind
  var msgid: Int32
  var sequence: UInt32
  var replyPortName: String?
  var payload: [UInt8]

  /// The frame's bytes. The caller has checked the payload size and the reply name (see
  /// ``PortName/validate(_:)``); exceeding the wire format's field sizes is a toolkit bug.
  func encoded() -> [UInt8] {
    let name = Array((replyPortName ?? "").utf8)
    precondition(name.count <= PortName.maximumLength && payload.count <= UInt32.max)
    var bytes: [UInt8] = []
    bytes.reserveCapacity(Frame.headerSize + name.count + payload.count)
    append(Frame.magic, to: &bytes)
    bytes.append(Frame.version)
    bytes.append(kind.rawValue)
    append(UInt16(0), to: &bytes)
    append(UInt32(bitPattern: msgid), to: &bytes)
    append(sequence, to: &bytes)
    append(UInt32(payload.count), to: &bytes)
    append(UInt16(name.count), to: &bytes)
    append(UInt16(0), to: &bytes)
    bytes.append(contentsOf: name)
    bytes.append(contentsOf: payload)
    return bytes
  }

  private func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
  }
}

/// Why a peer's bytes were refused. Any of these disconnects that peer (the stream cannot be
/// resynchronised) and is reported; other peers are unaffected.
enum FrameError: Error, Equatable, Sendable, CustomStringConvertible {
  case badMagic(UInt32)
  case unsupportedVersion(UInt8)
  case unknownKind(UInt8)
  case nonZeroReservedField
  case payloadTooLarge(declared: UInt32, limit: Int)
  case replyNameOnReply
  case invalidReplyName(String)

  var description: String {
    switch self {
    case .badMagic(let value): return "bad frame magic 0x\(String(value, radix: 16))"
    case .unsupportedVersion(let version): return "unsupported frame version \(version)"
    case .unknownKind(let kind): return "unknown frame kind \(kind)"
    case .nonZeroReservedField: return "reserved frame field is not zero"
    case .payloadTooLarge(let declared, let limit): return "payload of \(declared) bytes exceeds the limit of \(limit)"
    case .replyNameOnReply: return "a reply frame carries a reply-port name"
    case .invalidReplyName(let reason): return "invalid reply-port name: \(reason)"
    }
  }
}

/// Reassembles frames from a byte stream that arrives in arbitrary pieces.
///
/// Append what the socket delivered with ``append(_:)``, then call ``nextFrame()`` until it
/// returns nil. After it throws, the decoder stays failed: the caller must drop the peer.
struct FrameDecoder {
  let limits: Frame.Limits
  private var buffer: [UInt8] = []
  private var readIndex = 0
  private(set) var failure: FrameError?

  init(limits: Frame.Limits = .standard) {
    self.limits = limits
  }

  /// Bytes received but not yet returned as frames.
  var bufferedByteCount: Int { buffer.count - readIndex }

  /// Adds received bytes.
  mutating func append(_ bytes: UnsafeRawBufferPointer) {
    if readIndex > 0 && readIndex >= buffer.count / 2 {
      buffer.removeFirst(readIndex)
      readIndex = 0
    }
    buffer.append(contentsOf: bytes)
  }

  /// Adds received bytes.
  mutating func append(_ bytes: [UInt8]) {
    bytes.withUnsafeBytes { append($0) }
  }

  /// The next complete frame, nil when more bytes are needed, or the reason the stream is
  /// malformed (checked as soon as a header is complete, before its payload arrives).
  mutating func nextFrame() throws(FrameError) -> Frame? {
    if let failure { throw failure }
    let available = buffer.count - readIndex
    if available < Frame.headerSize { return nil }
    let header = try parseHeader(at: readIndex)
    let total = Frame.headerSize + header.nameLength + header.payloadLength
    if available < total { return nil }
    let nameStart = readIndex + Frame.headerSize
    var name: String?
    if header.nameLength > 0 {
      let bytes = buffer[nameStart..<nameStart + header.nameLength]
      guard let text = String(validating: bytes, as: UTF8.self) else {
        try fail(.invalidReplyName("not UTF-8"))
      }
      do {
        try PortName.validate(text)
      } catch {
        try fail(.invalidReplyName(error.detail))
      }
      name = text
    }
    let payloadStart = nameStart + header.nameLength
    let payload = Array(buffer[payloadStart..<payloadStart + header.payloadLength])
    readIndex += total
    if readIndex == buffer.count {
      buffer.removeAll(keepingCapacity: buffer.capacity <= 64 * 1024)
      readIndex = 0
    }
    return Frame(
      kind: header.kind, msgid: header.msgid, sequence: header.sequence, replyPortName: name, payload: payload)
  }

  private struct Header {
    var kind: Frame.Kind
    var msgid: Int32
    var sequence: UInt32
    var payloadLength: Int
    var nameLength: Int
  }

  private mutating func parseHeader(at start: Int) throws(FrameError) -> Header {
    let magic: UInt32 = read(at: start)
    if magic != Frame.magic { try fail(.badMagic(magic)) }
    let version = buffer[start + 4]
    if version != Frame.version { try fail(.unsupportedVersion(version)) }
    guard let kind = Frame.Kind(rawValue: buffer[start + 5]) else { try fail(.unknownKind(buffer[start + 5])) }
    let flags: UInt16 = read(at: start + 6)
    let reserved: UInt16 = read(at: start + 22)
    if flags != 0 || reserved != 0 { try fail(.nonZeroReservedField) }
    let payloadLength: UInt32 = read(at: start + 16)
    if Int(payloadLength) > limits.maximumPayload {
      try fail(.payloadTooLarge(declared: payloadLength, limit: limits.maximumPayload))
    }
    let nameLength = Int(read(at: start + 20) as UInt16)
    if nameLength > PortName.maximumLength {
      try fail(.invalidReplyName("\(nameLength) bytes, more than \(PortName.maximumLength)"))
    }
    if kind == .reply && nameLength != 0 { try fail(.replyNameOnReply) }
    return Header(
      kind: kind, msgid: Int32(bitPattern: read(at: start + 8)), sequence: read(at: start + 12),
      payloadLength: Int(payloadLength), nameLength: nameLength)
  }

  private func read<T: FixedWidthInteger>(at offset: Int) -> T {
    var value: T = 0
    for index in 0..<MemoryLayout<T>.size {
      value |= T(buffer[offset + index]) << (8 * index)
    }
    return value
  }

  private mutating func fail(_ error: FrameError) throws(FrameError) -> Never {
    failure = error
    throw error
  }
}
