import Sync

// Where errors escaping detached threads go.
extension Thread {
  /// Receives an error that escaped a detached thread's body, with that thread.
  public typealias DetachedErrorHandler = @Sendable (_ error: any Error, _ thread: Thread) -> Void

  /// What happens to an error escaping a detached thread (``detach(name:configuration:_:)``,
  /// ``start()``, or a ``JoinableThread`` detached before its body threw). Runs on the
  /// thread that threw (or on the detaching thread, if the error was already stored). The
  /// default writes `Thread "<name>" (id N): error escaped a detached thread: <error>` to
  /// standard error. Set it early, once, from any thread.
  public static var detachedErrorHandler: DetachedErrorHandler {
    get { DetachedErrors.handler.withLock { $0 } }
    set {
      let old = DetachedErrors.handler.withLock { handler in
        let old = handler
        handler = newValue
        return old
      }
      _ = old  // released after the lock: its captures' deinitializers may run
    }
  }

  /// Restores the default ``detachedErrorHandler`` (print to standard error).
  public static func resetDetachedErrorHandler() {
    detachedErrorHandler = DetachedErrors.printToStandardError
  }
}
