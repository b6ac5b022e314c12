import Sync

/// This process's local message ports by name, so that registering a name twice returns
/// the existing port (the guide's rule). Holds the ports weakly: a port nobody references
/// is gone, and its name free again.
final class LocalPortRegistry: @unchecked Sendable {
  static let shared = LocalPortRegistry()

  private struct WeakPort {
    weak var port: MessagePort?
  }

  // Protected by `mutex`.
  private let mutex = Sync.Lock()
  private var ports: [String: WeakPort] = [:]
  /// `ports.count`, readable without the mutex: a process with no local port (the usual
  /// sending side) answers `lookup` with one load. Written with `mutex` held.
  private let entryCount = AtomicInteger<Int>(0)

  /// The valid port registered as `name`, or the one `create` makes (and registers).
  func register(name: String, create: () throws(PortError) -> MessagePort) throws(PortError) -> MessagePort {
    mutex.lock()
    defer { mutex.unlock() }
    if let existing = ports[name]?.port, existing.isValid { return existing }
    let port = try create()
    ports[name] = WeakPort(port: port)
    entryCount.store(ports.count, ordering: .releasing)
    return port
  }

  func lookup(name: String) -> MessagePort? {
    if entryCount.load(ordering: .acquiring) == 0 { return nil }
    return mutex.withLock {
      guard let port = ports[name]?.port, port.isValid else { return nil }
      return port
    }
  }

  /// Forgets `name` if it still maps to `port`.
  func remove(name: String, port: MessagePort) {
    mutex.withLock {
      if let current = ports[name], current.port == nil || current.port === port {
        ports[name] = nil
        entryCount.store(ports.count, ordering: .releasing)
      }
    }
  }
}
