/// Scheduling in-process ports in run loops (the guide's `addPort:forMode:`).
///
/// Each behaves like adding a source: it may be in several modes (``RunLoopMode/common`` for
/// every common mode) and several run loops; adding twice is harmless; removing what was
/// never added is harmless; adding an invalid port adds nothing and returns false. Adding
/// does not wake the loop, except a port with messages already waiting (see
/// ``add(_:forMode:)-(Port,_)``). Every method may be called from any thread.
extension RunLoop {
  /// Delivers `port`'s messages to its handler (``Port/setHandler(_:)``) on this loop's
  /// thread while the loop runs in `mode`. Returns false when the port is invalid or the
  /// loop's thread has ended.
  /// Messages sent before the add (or while it happens) are delivered too: when some wait,
  /// the add signals the port's source and wakes the loop, so they do not wait for a later
  /// send. (`-[NSRunLoop addPort:forMode:]`)
  @discardableResult
  public func add(_ port: Port, forMode mode: RunLoopMode) -> Bool {
    guard let source = port.link.runLoopSource(for: port) else { return false }
    return add(source, forMode: mode)
  }

  /// Stops delivering `port`'s messages in `mode`. (`-[NSRunLoop removePort:forMode:]`)
  public func remove(_ port: Port, forMode mode: RunLoopMode) {
    if let source = port.link.existingSource { remove(source, forMode: mode) }
  }

  /// Whether `port` is scheduled in `mode`.
  public func contains(_ port: Port, inMode mode: RunLoopMode) -> Bool {
    guard let source = port.link.existingSource else { return false }
    return contains(source, inMode: mode)
  }
}
