import Sync

/// This process's remote message ports by name, so that looking a name up again returns the
/// port already connected (one connection per name, as Core Foundation keeps one remote
/// port per name) while it is valid. Holds the ports weakly: a remote port nobody
/// references is closed, and the next lookup connects anew.
final class RemotePortRegistry: Sendable {
  static let shared = RemotePortRegistry()

  private struct WeakPort {
    weak var port: MessagePort?
  }

  // Locked before a connection's state lock (through `isUsable`), never after. No port is
  // released inside the lock: a port loaded from a weak entry may turn out to be the last
  // reference (its owner let go meanwhile), and a port whose peer hung up still holds its
  // invalidation handler, so its release may run user code. Lookups therefore take the
  // entry out and judge it after the lock, where `isValid` may also invalidate it and run
  // its handler.
  private let ports = LockedValue([String: WeakPort]())

  /// The valid remote port registered as `name`, if any. A registered port found with its
  /// peer gone is invalidated here (its handler runs on the calling thread, see
  /// ``MessagePort/isValid``), and nil is returned.
  func lookup(name: String) -> MessagePort? {
    let found = ports.withLock { ports in ports[name]?.port }
    guard let found, found.isValid else { return nil }
    return found
  }

  /// Registers `port` under its name unless a valid remote port already is (another thread
  /// connected first); returns the registered one, which the caller hands out.
  func adopt(_ port: MessagePort) -> MessagePort {
    var displaced: MessagePort? = nil
    let chosen = ports.withLock { ports -> MessagePort in
      if let existing = ports[port.name]?.port {
        if existing.isUsable { return existing }
        displaced = existing
      }
      ports[port.name] = WeakPort(port: port)
      return port
    }
    // After the lock: tells the displaced port's handler its peer is gone (if no one did
    // yet), then lets it go.
    if let displaced { _ = displaced.isValid }
    return chosen
  }
}
