/// Why a perform request did not run its block.
///
/// Thrown by the waiting requests (``RunLoop/performAndWait(inModes:before:_:)`` and its
/// `timeout:` and unbounded twins, the `on: Thread` statics, ``RunLoopThread``'s
/// forwarders), and as ``noRunLoop`` by every `on: Thread` request. A request that fails this
/// way has not run and never will.
public enum PerformError: Error, Hashable, Sendable, CustomStringConvertible {
  /// The deadline passed before the target run loop ran the block (its thread is busy, or
  /// not running its loop in one of the request's modes). The request is withdrawn.
  case timedOut
  /// The target thread ended, and its run loop discarded the request unrun.
  case targetExited
  /// The target thread has no run loop (it never asked for one, it has ended, or its run
  /// loop's descriptors cannot be made: the caller's own, or the main thread's, made on first
  /// use), so nothing could ever run the block.
  case noRunLoop

  /// A sentence for logs.
  public var description: String {
    switch self {
    case .timedOut: return "the target run loop did not run the request before the deadline"
    case .targetExited: return "the target thread ended before running the request"
    case .noRunLoop: return "the target thread has no run loop"
    }
  }
}
