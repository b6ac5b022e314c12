/// The rules for message-port names, shared by registration, lookup and the wire format.
///
/// A name is 1...64 bytes of ASCII letters, digits and `. _ - @ + :`, not starting with a
/// dot. The limit keeps `<directory>/<name>.sock` inside the 107 bytes a Unix socket address
/// holds; the character set keeps names from escaping the port directory (no `/`, no `..`)
/// and from needing any escaping. Names are unique per user, as the guide requires.
enum PortName {
  static let maximumLength = 64

  /// Throws ``PortStatus/invalid`` with the reason when `name` breaks the rules.
  static func validate(_ name: String) throws(PortError) {
    let bytes = Array(name.utf8)
    if bytes.isEmpty { throw PortError(.invalid, detail: "empty port name") }
    if bytes.count > maximumLength {
      throw PortError(.invalid, detail: "port name of \(bytes.count) bytes exceeds \(maximumLength)")
    }
    if bytes[0] == UInt8(ascii: ".") { throw PortError(.invalid, detail: "port name \"\(name)\" starts with a dot") }
    for byte in bytes where !isAllowed(byte) {
      throw PortError(.invalid, detail: "port name \"\(name)\" contains byte 0x\(String(byte, radix: 16))")
    }
  }

  private static func isAllowed(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"):
      return true
    case UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "@"), UInt8(ascii: "+"),
      UInt8(ascii: ":"):
      return true
    default:
      return false
    }
  }
}
