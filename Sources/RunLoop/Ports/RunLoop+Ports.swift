/// Scheduling ports and descriptor sources in run loops (the guide's `addPort:forMode:`,
/// `CFRunLoopAddSource` with a `CFMessagePort`'s or `CFFileDescriptor`'s source).
///
/// Each behaves like adding a source: it may be in several modes (``RunLoopMode/common`` for
/// every common mode) and several run loops; adding twice is harmless; removing what was
/// never added is harmless; adding an invalid item adds nothing and returns false. Adding
/// does not wake the loop, except a port with messages already waiting (see
/// ``add(_:forMode:)-(Port,_)``). Every method may be called from any thread.
extension RunLoop {
  /// Delivers `port`'s messages to its handler (``Port/setHandler(_:)``) on this loop's
  /// thread while the loop runs in `mode`. Returns false when the port is invalid.
  /// Messages sent before the add (or while it happens) are delivered too: when some wait,
  /// the add signals the port's source and wakes the loop, so they do not wait for a later
  /// send. (`-[NSRunLoop addPort:forMode:]`)
  @discardableResult
  public func add(_ port: Port, forMode mode: RunLoopMode) -> Bool {
    guard let source = port.link.runLoopSource(draining: port.queue) else { return false }
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

  /// Serves the local message port `port` (its handler runs on this loop's thread) while the
  /// loop runs in `mode`. Returns false for a remote or invalid port, which has nothing to
  /// serve. (`CFMessagePortCreateRunLoopSource` + `CFRunLoopAddSource`)
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

  /// Watches `source`'s descriptor while the loop runs in `mode`. Returns false when the
  /// source is invalid. Stops the process if the descriptor cannot be watched (closed:
  /// `EBADF`; a regular file: `EPERM`). (`CFRunLoopAddSource`)
  @discardableResult
  public func add(_ source: FileDescriptorSource, forMode mode: RunLoopMode) -> Bool {
    add(source.member.source, forMode: mode)
  }

  /// Stops watching `source` in `mode`.
  public func remove(_ source: FileDescriptorSource, forMode mode: RunLoopMode) {
    remove(source.member.source, forMode: mode)
  }

  /// Whether `source` is watched in `mode`.
  public func contains(_ source: FileDescriptorSource, inMode mode: RunLoopMode) -> Bool {
    contains(source.member.source, inMode: mode)
  }
}
