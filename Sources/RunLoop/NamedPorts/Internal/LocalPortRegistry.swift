import Sync

/// This process's local message ports by name, so that registering a name twice returns
/// the existing port (the guide's rule). Holds the ports weakly: a port nobody references
/// is gone, and its name free again.
final class LocalPortRegistry: Sendable {
  static let shared = LocalPortRegistry()

  private struct WeakPort {
    weak var port: MessagePort?
  }

  private let ports = LockedValue([String: WeakPort]())
  /// `ports.count`, readable without the lock: a process with no local port (the usual
  /// sending side) answers `lookup` with one load. Written inside the lock.
  private let entryCount = AtomicInteger<Int>(0)

  /// The valid port registered as `name`, or the one `create` makes (and registers).
  /// `create` runs inside the lock, so two threads registering one name make one port; the
  /// caller still holds the handler it captures, so nothing user-owned is freed there.
  func register(name: String, create: () throws(PortError) -> MessagePort) throws(PortError) -> MessagePort {
    try ports.withLock { (ports) throws(PortError) -> MessagePort in
      if let existing = ports[name]?.port, existing.isValid { return existing }
      let port = try create()
      ports[name] = WeakPort(port: port)
      // Releasing: a `lookup` that acquires the count sees the entry behind it.
      entryCount.store(ports.count, ordering: .releasing)
      return port
    }
  }

  func lookup(name: String) -> MessagePort? {
    if entryCount.load(ordering: .acquiring) == 0 { return nil }
    return ports.withLock { ports in
      guard let port = ports[name]?.port, port.isValid else { return nil }
      return port
    }
  }

  /// Forgets `name` if it still maps to `port`.
  func remove(name: String, port: MessagePort) {
    ports.withLock { ports in
      if let current = ports[name], current.port == nil || current.port === port {
        ports[name] = nil
        entryCount.store(ports.count, ordering: .releasing)
      }
    }
  }
}
