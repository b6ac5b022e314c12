/// The result codes of the guide's message ports (`CFMessagePortSendRequest`), with the
/// guide's numeric values.
///
/// A successful operation returns normally; every failure throws a ``PortError`` whose
/// ``PortError/status`` is one of the non-success cases. `rawValue` is the guide's number, so
/// code that logs or forwards the C result codes keeps them:
///
/// | case | value | meaning |
/// |---|---|---|
/// | ``success`` | 0 | the message was sent (and, when asked, the reply arrived) |
/// | ``sendTimeout`` | -1 | the message could not be handed over before the send deadline (queue full, receiver stuck) |
/// | ``receiveTimeout`` | -2 | the message was sent but no reply arrived before the receive deadline |
/// | ``invalid`` | -3 | the port was already invalid, or cannot exist (bad name, name owned elsewhere) |
/// | ``transportError`` | -4 | the operating system or the peer failed the transfer (see ``PortError/cause``) |
/// | ``becameInvalid`` | -5 | the port or its peer was invalidated, or its process died, during the operation |
///
/// The corresponding C constants are `kCFMessagePortSuccess`, `kCFMessagePortSendTimeout`,
/// `kCFMessagePortReceiveTimeout`, `kCFMessagePortIsInvalid`, `kCFMessagePortTransportError`
/// and `kCFMessagePortBecameInvalidError`.
public enum PortStatus: Int32, Sendable, Hashable, CaseIterable, CustomStringConvertible {
  /// The operation completed (0).
  case success = 0
  /// The send deadline passed before the message was handed over (-1).
  case sendTimeout = -1
  /// The receive deadline passed before the reply arrived (-2).
  case receiveTimeout = -2
  /// The port is invalid, or the operation cannot apply to it (-3).
  case invalid = -3
  /// The transfer failed in the operating system or the peer misbehaved (-4).
  case transportError = -4
  /// The port or its peer became invalid while the operation was in progress (-5).
  case becameInvalid = -5

  /// The case name and the guide's value, for example `"sendTimeout (-1)"`.
  public var description: String {
    let name: String
    switch self {
    case .success: name = "success"
    case .sendTimeout: name = "sendTimeout"
    case .receiveTimeout: name = "receiveTimeout"
    case .invalid: name = "invalid"
    case .transportError: name = "transportError"
    case .becameInvalid: name = "becameInvalid"
    }
    return "\(name) (\(rawValue))"
  }
}
