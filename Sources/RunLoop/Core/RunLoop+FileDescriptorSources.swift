/// Watching descriptor sources in run loops (`CFRunLoopAddSource` with a
/// `CFFileDescriptor`'s source).
///
/// Each behaves like adding a source: a source may be in several modes
/// (``RunLoopMode/common`` for every common mode) and several run loops; adding twice is
/// harmless; removing what was never added is harmless; adding an invalid source adds
/// nothing and returns false. Unlike a ``RunLoopSource``, a ``FileDescriptorSource`` is not
/// kept alive by the run loops it is in: releasing its last reference invalidates it. Every
/// method may be called from any thread.
extension RunLoop {
  /// Watches `source`'s descriptor while the loop runs in `mode`. Returns false when the
  /// source is invalid or the loop's thread has ended. Stops the process if the descriptor
  /// cannot be watched (closed: `EBADF`; a regular file: `EPERM`). (`CFRunLoopAddSource`)
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
