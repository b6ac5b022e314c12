/// A ``PortMessage`` as a ``Port`` keeps it while it waits in the port's queue.
///
/// A message whose reply port is the receiving port itself (a port that sends itself a
/// message naming itself, or a relay that answers to the port it forwards to) is kept
/// without that reference: the queue must not keep its own port alive. Holding it would be a
/// cycle (port → queue → message → port), so a port released with such a message queued
/// would never be invalidated nor release its handlers and eventfd. Nothing is lost by not
/// holding it: only a holder of the port can take the port's messages, and the message gets
/// the port back when it is taken (``message(receivedBy:)``).
struct QueuedPortMessage: Sendable {
  /// The message, with `replyPort` cleared when ``repliesToReceiver`` is set.
  private var stored: PortMessage
  /// Whether the message's reply port was the port it was queued in.
  private let repliesToReceiver: Bool

  /// Wraps `message`, sent to `receiver`.
  init(_ message: PortMessage, sentTo receiver: Port) {
    stored = message
    if case .port(let replyPort)? = message.replyPort, replyPort === receiver {
      stored.replyPort = nil
      repliesToReceiver = true
    } else {
      repliesToReceiver = false
    }
  }

  /// The message as it was sent, taken out of `receiver`'s queue.
  func message(receivedBy receiver: Port) -> PortMessage {
    guard repliesToReceiver else { return stored }
    var message = stored
    message.replyPort = .port(receiver)
    return message
  }
}
