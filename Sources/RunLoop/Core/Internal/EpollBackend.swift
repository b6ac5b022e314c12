import CThreadingShims
import Sync

/// The Linux wait primitive of one run loop: one epoll set holding one eventfd
/// for explicit wake-ups and one CLOCK_MONOTONIC timerfd armed (absolute time) to the
/// earliest instant the loop must wake at. Port and descriptor sources join the same epoll
/// set (`DescriptorMember`) with tokens at or above ``firstMemberToken``.
///
/// Thread safety: the descriptors are immutable after `init`; `signalWakeUp` may be called
/// from any thread (a write to an eventfd is atomic); everything else is called by the run
/// loop with its lock held or from its own thread, as each method says.
final class EpollBackend {
  /// The token epoll reports for the wake-up eventfd.
  static let wakeUpToken: UInt64 = 0
  /// The token epoll reports for the timerfd.
  static let timerToken: UInt64 = 1
  /// The first token available to epoll members added by sources.
  static let firstMemberToken: UInt64 = 2
  /// How many ready events one wait collects; all of them are handled in one pass.
  static let eventCapacity: Int32 = 64

  let epollDescriptor: Int32
  let wakeUpDescriptor: Int32
  let timerDescriptor: Int32
  /// Where `wait` stores ready tokens; used only by the owning thread inside `wait`.
  let readyTokens: UnsafeMutablePointer<UInt64>
  /// The process that created the descriptors (see `ForkDetection`): in a child of `fork()`
  /// they are the parent's, and the calls below leave them alone.
  let creatorProcess: Int32

  /// Whether this backend was inherited through `fork()` (the calling process did not
  /// create it): its descriptors are the parent's.
  var isInherited: Bool { ForkDetection.isInherited(creatorProcess) }

  init() throws(SystemCallError) {
    creatorProcess = ForkDetection.start()
    let epoll = try shimCall("epoll_create1") { tk_epoll_create() }
    let wake: Int32
    let timer: Int32
    do throws(SystemCallError) {
      wake = try shimCall("eventfd") { tk_eventfd_create() }
    } catch {
      _ = tk_close(epoll)
      throw error
    }
    do throws(SystemCallError) {
      timer = try shimCall("timerfd_create") { tk_timerfd_create_monotonic() }
    } catch {
      _ = tk_close(epoll)
      _ = tk_close(wake)
      throw error
    }
    do throws(SystemCallError) {
      // Edge-triggered: every eventfd write is reported once, so a wake-up costs one write and
      // no read (the counter cannot reach its 2^64 - 2 limit at one write per wake-up).
      let edgeTriggered = UInt32(TK_EPOLL_READABLE) | UInt32(truncatingIfNeeded: TK_EPOLL_EDGE_TRIGGERED)
      _ = try shimCall("epoll_ctl") { tk_epoll_add(epoll, wake, edgeTriggered, EpollBackend.wakeUpToken) }
      _ = try shimCall("epoll_ctl") { tk_epoll_add(epoll, timer, UInt32(TK_EPOLL_READABLE), EpollBackend.timerToken) }
    } catch {
      _ = tk_close(epoll)
      _ = tk_close(wake)
      _ = tk_close(timer)
      throw error
    }
    epollDescriptor = epoll
    wakeUpDescriptor = wake
    timerDescriptor = timer
    readyTokens = .allocate(capacity: Int(EpollBackend.eventCapacity))
  }

  deinit {
    readyTokens.deallocate()
    for descriptor in [timerDescriptor, wakeUpDescriptor, epollDescriptor] {
      // EBADF here would mean someone closed our descriptor: a bug, never ignored. EINTR is
      // not retried: Linux releases the descriptor either way.
      let result = tk_close(descriptor)
      if result != -EINTR {
        _ = mustSucceed("RunLoop") { () throws(SystemCallError) in try shimCall("close(\(descriptor))") { result } }
      }
    }
  }

  /// Makes the next (or current) `wait` return. Any thread. In a child of `fork()` it does
  /// nothing: the eventfd would wake the parent's loop (and the child's copy cannot wait).
  func signalWakeUp() {
    if isInherited { return }
    let result = tk_eventfd_signal(wakeUpDescriptor)
    // The counter cannot overflow (wake-ups are coalesced), so any failure is a broken fd.
    // Checked inline rather than through shimCall: this is every wake-up's path.
    if result != 0 {
      fatalError("RunLoop: \(SystemCallError(call: "write(eventfd)", code: SystemErrorCode(rawValue: -result)))")
    }
  }

  /// Consumes the timerfd's expiration count. Owning thread only. Never in a child of
  /// `fork()`, which would take the parent's expiration.
  func drainTimer() {
    if isInherited { return }
    let result = tk_counter_fd_drain(timerDescriptor)
    if result != -EAGAIN {
      _ = mustSucceed("RunLoop") { () throws(SystemCallError) in try shimCall("read(timerfd)") { result } }
    }
  }

  /// Arms the timerfd to expire at `deadline` (absolute, CLOCK_MONOTONIC, nanosecond
  /// precision), or disarms it for `.distantFuture`. Called with the run loop's lock held.
  /// Never in a child of `fork()`, where it would move the parent's timers.
  func armTimer(at deadline: MonotonicInstant) {
    if isInherited { return }
    _ = mustSucceed("RunLoop") { () throws(SystemCallError) in
      try shimCall("timerfd_settime") { tk_timerfd_arm_absolute(timerDescriptor, deadline.nanoseconds) }
    }
  }

  /// Waits for ready members; `block` false polls. Returns how many tokens were stored in
  /// ``readyTokens`` (0 for a poll that found none). A signal does not end the wait: the
  /// shim waits again, and a wake-up written by a signal handler is reported as any other.
  /// Owning thread only, without the run loop's lock.
  func wait(block: Bool) -> Int {
    // Running checked it already; a wait in the child would take the parent's events.
    if isInherited {
      ForkDetection.reportInheritedUse("RunLoop", "run loop", "run", creator: creatorProcess)
    }
    var poll = timespec(tv_sec: 0, tv_nsec: 0)
    let count = mustSucceed("RunLoop") { () throws(SystemCallError) in
      try shimCall("epoll_wait") {
        block
          ? tk_epoll_wait(epollDescriptor, readyTokens, nil, EpollBackend.eventCapacity, nil)
          : tk_epoll_wait(epollDescriptor, readyTokens, nil, EpollBackend.eventCapacity, &poll)
      }
    }
    return Int(count)
  }
}
