import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// The Linux scheduling policy a thread runs under.
///
/// Normal threads share the CPU by nice value (see ``ThreadConfiguration/relativePriority``).
/// The real-time policies run a thread ahead of every normal thread for as long as it is
/// runnable: use them only for short, bounded work, or they starve the rest of the system
/// (the guide's warning about priorities applies doubly). Starting a real-time thread needs
/// `CAP_SYS_NICE` or a non-zero `RLIMIT_RTPRIO`; without it, thread creation throws
/// ``ThreadStartError/system(_:)`` for `pthread_create` with the code `.operationNotPermitted`
/// (EPERM). A priority outside ``realTimePriorityRange`` is refused before that, with
/// ``ThreadConfigurationError/realTimePriorityOutOfRange(_:allowed:)``.
///
/// ```swift
/// var configuration = ThreadConfiguration()
/// configuration.schedulingPolicy = .fifo(priority: ThreadSchedulingPolicy.realTimePriorityRange.lowerBound)
/// do { _ = try Thread.spawn(configuration: configuration) { audioLoop() } }
/// catch let error where error.systemError?.code == .operationNotPermitted { /* no permission: fall back */ }
/// ```
public enum ThreadSchedulingPolicy: Sendable, Hashable, CustomStringConvertible {
  /// Time sharing (`SCHED_OTHER`): the default for every thread.
  case normal
  /// Real-time first-in first-out (`SCHED_FIFO`) at `priority` (see ``realTimePriorityRange``):
  /// runs until it blocks, yields or a higher real-time priority becomes runnable.
  case fifo(priority: Int)
  /// Real-time round robin (`SCHED_RR`) at `priority`: like ``fifo(priority:)``, but threads of
  /// equal priority take turns in time slices.
  case roundRobin(priority: Int)

  /// The real-time priorities the kernel accepts (`sched_get_priority_min/max`; 1...99 on
  /// Linux). Higher runs first.
  public static var realTimePriorityRange: ClosedRange<Int> {
    let minimum = sched_get_priority_min(tk_sched_fifo())
    let maximum = sched_get_priority_max(tk_sched_fifo())
    // Both calls fail only for an unknown policy; SCHED_FIFO always exists on Linux.
    if minimum < 0 || maximum < 0 { fatalError("sched_get_priority_min/max(SCHED_FIFO) failed: errno \(errno)") }
    return Int(minimum)...Int(maximum)
  }

  /// The scheduling policy of the calling thread, read from the kernel
  /// (`pthread_getschedparam`). Policies other than these three (`SCHED_BATCH`,
  /// `SCHED_IDLE`) read back as ``normal``. A failed call is thrown as a
  /// ``/Sync/SystemCallError``.
  public static func ofCurrentThread() throws(SystemCallError) -> ThreadSchedulingPolicy {
    var policy: Int32 = 0
    var priority: Int32 = 0
    _ = try shimCall("pthread_getschedparam") { tk_thread_get_scheduling(&policy, &priority) }
    if policy == tk_sched_fifo() { return .fifo(priority: Int(priority)) }
    if policy == tk_sched_rr() { return .roundRobin(priority: Int(priority)) }
    return .normal
  }

  /// `"normal"`, `"fifo(10)"`, `"roundRobin(10)"`.
  public var description: String {
    switch self {
    case .normal: return "normal"
    case .fifo(let priority): return "fifo(\(priority))"
    case .roundRobin(let priority): return "roundRobin(\(priority))"
    }
  }

  /// The C policy constant and priority.
  var policyAndPriority: (policy: Int32, priority: Int32) {
    switch self {
    case .normal: return (tk_sched_other(), 0)
    case .fifo(let priority): return (tk_sched_fifo(), Int32(clamping: priority))
    case .roundRobin(let priority): return (tk_sched_rr(), Int32(clamping: priority))
    }
  }
}
