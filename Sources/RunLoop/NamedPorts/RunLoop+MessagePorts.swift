/// Serving named message ports in run loops (`CFMessagePortCreateRunLoopSource` with
/// `CFRunLoopAddSource`).
///
/// Each behaves like adding a source: a port may be in several modes (``RunLoopMode/common``
/// for every common mode) and several run loops; adding twice is harmless; removing what was
/// never added is harmless; adding a remote or invalid port adds nothing and returns false.
/// Every method may be called from any thread.
extension RunLoop {
  /// Serves the local message port `port` (its handler runs on this loop's thread) while the
  /// loop runs in `mode`. Returns false for a remote or invalid port, which has nothing to
  /// serve, and when the loop's thread has ended. (`CFMessagePortCreateRunLoopSource` + `CFRunLoopAddSource`)
  @discardableResult
  public func add(_ port: MessagePort, forMode mode: RunLoopMode) -> Bool {
    guard let source = port.runLoopSource() else { return false }
    return add(source, forMode: mode)
  }

  /// Stops serving `port` in `mode`.
  public func remove(_ port: MessagePort, forMode mode: RunLoopMode) {
    if let source = port.existingRunLoopSource { remove(source, forMode: mode) }
  }

  /// Whether `port` is served in `mode`.
  public func contains(_ port: MessagePort, inMode mode: RunLoopMode) -> Bool {
    guard let source = port.existingRunLoopSource else { return false }
    return contains(source, inMode: mode)
  }
}
