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
  consuming func message(receivedBy receiver: Port) -> PortMessage {
    guard repliesToReceiver else { return stored }
    var message = stored
    message.replyPort = .port(receiver)
    return message
  }

  /// The message as it was sent, taken out of the queue of `receiver`'s port by a run loop
  /// (which holds the port weakly). The reference is loaded only for a message that named
  /// the port as its reply port; while the port is being released there is none, and the
  /// message keeps no reply port.
  consuming func message(receivedBy receiver: WeakPort) -> PortMessage {
    guard repliesToReceiver, let port = receiver.port else { return stored }
    var message = stored
    message.replyPort = .port(port)
    return message
  }
}

/// A port held weakly by its run-loop source (a run loop does not keep a port alive), in a
/// box the source's callback holds, so a delivery pays no weak-reference copy.
final class WeakPort: @unchecked Sendable {
  // @unchecked: written once in init; weak loads are atomic in the Swift runtime.
  weak var port: Port?
  init(_ port: Port) { self.port = port }
}
