import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// Which process the run loops' kernel objects belong to, so that a child made by `fork()`
/// can tell the objects it inherited from the ones it made.
///
/// `fork()` copies a run loop (and a port, a descriptor member) but not its epoll set,
/// eventfd and timerfd: the child's copies name the parent's kernel objects. A child that
/// waited on that epoll set would take the parent's ready events (and timer expirations);
/// one that re-armed the timerfd would move the parent's timers; one that removed a
/// descriptor would remove it for the parent. So each such object records the process that
/// made it (``start()`` at creation) and compares on use: in another process, the explicit
/// uses (running a loop, adding to it, sending on a port) are misuse, and the implicit ones
/// (wake-ups, timer re-arms, descriptor removals, which releasing the copies in the child
/// triggers) leave the kernel objects alone.
///
/// The process id is `getpid()` cached in C (set on first start, and again by a
/// `pthread_atfork` child handler), so a comparison costs one relaxed load, not a system
/// call. A process that never made such an object has nothing to inherit, so registering
/// on the first creation is early enough.
enum ForkDetection {
  /// Registers the fork handler (once per process) and returns the calling process's id,
  /// to record in an object that owns kernel objects.
  static func start() -> Int32 {
    let registered = tk_fork_detection_start()
    if registered != 0 {
      fatalError(
        "RunLoop: \(SystemCallError(call: "pthread_atfork", code: SystemErrorCode(rawValue: registered)))")
    }
    return tk_fork_detection_cached_process_id()
  }

  /// Whether an object that recorded `creator` was inherited through `fork()`: the calling
  /// process is not the one that made it.
  @inline(__always)
  static func isInherited(_ creator: Int32) -> Bool {
    creator != tk_fork_detection_cached_process_id()
  }

  /// Stops the process: `operation` used a `what` that process `creator` made, in a child
  /// of that process.
  static func reportInheritedUse(_ type: String, _ what: String, _ operation: String, creator: Int32) -> Never {
    reportMisuse(
      type,
      "\(operation): this \(what) was created by process \(creator) and inherited through fork() by process "
        + "\(getpid()), where it cannot be used (its kernel objects are the parent's); a child of fork() "
        + "creates its own on a new thread, or execs")
  }
}
