/// One message travelling through a port: the guide's `NSPortMessage` and the arguments of
/// `CFMessagePortSendRequest`.
///
/// A message is a value: an identifier the receiver switches on (the guide's check-in
/// message uses 100), a payload of bytes, and optionally the port the receiver should answer
/// to. Between threads of one process the reply port is a ``Port`` object (the check-in
/// pattern of Listings 3-12..3-15 sends the worker's own port); between processes it is a
/// port *name* that the receiver looks up (Listings 3-17..3-19 send the worker's port name).
///
/// ```swift
/// let checkIn = PortMessage(msgid: 100, replyPort: .port(workerPort))
/// try mainPort.send(checkIn, timeout: .seconds(1))
/// ```
public struct PortMessage: Sendable {
  /// Where the receiver of a message should send its answer.
  public enum ReplyPort: Sendable {
    /// An in-process port object (the guide's `NSMachPort` passed in `sendPort`).
    case port(Port)
    /// The registered name of a message port, in this or another process of the same user
    /// (the guide's `CFMessagePort` name).
    case name(String)

    /// The port object, when this reply port is one.
    public var port: Port? {
      if case .port(let port) = self { return port }
      return nil
    }

    /// The port name, when this reply port is one.
    public var name: String? {
      if case .name(let name) = self { return name }
      return nil
    }
  }

  /// The message identifier (the guide's `msgid`); its meaning is the application's.
  public var msgid: Int32

  /// The message contents. Empty for messages that are only a signal (a check-in).
  public var payload: [UInt8]

  /// Where to reply, if the sender wants an answer or introduces itself.
  public var replyPort: ReplyPort?

  /// Creates a message with identifier `msgid`, `payload` bytes and an optional `replyPort`.
  public init(msgid: Int32, payload: [UInt8] = [], replyPort: ReplyPort? = nil) {
    self.msgid = msgid
    self.payload = payload
    self.replyPort = replyPort
  }
}
