/// Why a timed run returned (``RunLoop/run(mode:before:returnAfterSourceHandled:)``), with
/// Core Foundation's values.
///
/// Core Foundation equivalent: `CFRunLoopRunResult`.
public enum RunLoopRunResult: Int32, Sendable, Hashable, CustomStringConvertible {
  /// The mode has no sources or timers (and no queued blocks): nothing could ever wake it.
  /// Returned at once, without entry or exit notifications, when the mode is empty on entry.
  case finished = 1
  /// ``RunLoop/stop()`` ended this activation.
  case stopped = 2
  /// The deadline passed (a zero timeout makes exactly one pass and returns this).
  case timedOut = 3
  /// A source was handled and the caller asked to return after one.
  case handledSource = 4

  /// `"finished"`, `"stopped"`, `"timedOut"` or `"handledSource"`.
  public var description: String {
    switch self {
    case .finished: return "finished"
    case .stopped: return "stopped"
    case .timedOut: return "timedOut"
    case .handledSource: return "handledSource"
    }
  }
}
