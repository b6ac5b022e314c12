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

  // Locked before a connection's state lock (through `isValid`), never after. No user code
  // is released inside the lock: a port that loses `adopt` is returned to its caller to
  // release, and the only port a lookup can drop here (a strong reference loaded from a
  // weak entry that turned out to be the last one) is invalid, so its invalidation handler
  // has already run and been released.
  private let ports = LockedValue([String: WeakPort]())

  /// The valid remote port registered as `name`, if any.
  func lookup(name: String) -> MessagePort? {
    ports.withLock { ports in
      guard let port = ports[name]?.port, port.isValid else { return nil }
      return port
    }
  }

  /// Registers `port` under its name unless a valid remote port already is (another thread
  /// connected first); returns the registered one, which the caller hands out.
  func adopt(_ port: MessagePort) -> MessagePort {
    ports.withLock { ports in
      if let existing = ports[port.name]?.port, existing.isValid { return existing }
      ports[port.name] = WeakPort(port: port)
      return port
    }
  }
}
