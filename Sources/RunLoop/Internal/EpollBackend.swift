import CThreadingShims
import Sync

/// The Linux wait primitive of one run loop (DESIGN.md): one epoll set holding one eventfd
/// for explicit wake-ups and one CLOCK_MONOTONIC timerfd armed (absolute time) to the
/// earliest instant the loop must wake at. Port and descriptor sources (issue 6) join the
/// same epoll set through ``addMember(descriptor:token:)`` with tokens at or above
/// ``firstMemberToken``.
///
/// Thread safety: the descriptors are immutable after `init`; `signalWakeUp` may be called
/// from any thread (a write to an eventfd is atomic); everything else is called by the run
/// loop with its lock held or from its own thread, as each method says.
final class EpollBackend {
  /// The token epoll reports for the wake-up eventfd.
  static let wakeUpToken: UInt64 = 0
  /// The token epoll reports for the timerfd.
  static let timerToken: UInt64 = 1
  /// The first token available to epoll members added by sources (issue 6).
  static let firstMemberToken: UInt64 = 2
  /// How many ready events one wait collects; all of them are handled in one pass.
  static let eventCapacity: Int32 = 64

  let epollDescriptor: Int32
  let wakeUpDescriptor: Int32
  let timerDescriptor: Int32
  /// Where `wait` stores ready tokens; used only by the owning thread inside `wait`.
  let readyTokens: UnsafeMutablePointer<UInt64>

  init() throws(SystemCallError) {
    let epoll = tk_epoll_create()
    guard epoll >= 0 else { throw SystemCallError(call: "epoll_create1", errno: -epoll) }
    let wake = tk_eventfd_create()
    guard wake >= 0 else {
      _ = tk_close(epoll)
      throw SystemCallError(call: "eventfd", errno: -wake)
    }
    let timer = tk_timerfd_create_monotonic()
    guard timer >= 0 else {
      _ = tk_close(epoll)
      _ = tk_close(wake)
      throw SystemCallError(call: "timerfd_create", errno: -timer)
    }
    // Edge-triggered: every eventfd write is reported once, so a wake-up costs one write and
    // no read (the counter cannot reach its 2^64 - 2 limit at one write per wake-up).
    var result = tk_epoll_add_edge_triggered(epoll, wake, EpollBackend.wakeUpToken)
    if result == 0 { result = tk_epoll_add_readable(epoll, timer, EpollBackend.timerToken) }
    guard result == 0 else {
      _ = tk_close(epoll)
      _ = tk_close(wake)
      _ = tk_close(timer)
      throw SystemCallError(call: "epoll_ctl", errno: -result)
    }
    epollDescriptor = epoll
    wakeUpDescriptor = wake
    timerDescriptor = timer
    readyTokens = .allocate(capacity: Int(EpollBackend.eventCapacity))
  }

  deinit {
    readyTokens.deallocate()
    for descriptor in [timerDescriptor, wakeUpDescriptor, epollDescriptor] {
      let result = tk_close(descriptor)
      // EBADF here would mean someone closed our descriptor: a bug, never ignored.
      if result != 0 && result != -EINTR {
        fatalError("RunLoop: close(\(descriptor)) failed: \(SystemCallError(call: "close", errno: -result))")
      }
    }
  }

  /// Makes the next (or current) `wait` return. Any thread.
  func signalWakeUp() {
    let result = tk_eventfd_signal(wakeUpDescriptor)
    // The counter cannot overflow (wake-ups are coalesced), so any failure is a broken fd.
    if result != 0 { fatalError("RunLoop: \(SystemCallError(call: "write(eventfd)", errno: -result))") }
  }

  /// Consumes the timerfd's expiration count. Owning thread only.
  func drainTimer() {
    let result = tk_counter_fd_drain(timerDescriptor)
    if result != 0 && result != -EAGAIN {
      fatalError("RunLoop: \(SystemCallError(call: "read(timerfd)", errno: -result))")
    }
  }

  /// Arms the timerfd to expire at `deadline` (absolute, CLOCK_MONOTONIC, nanosecond
  /// precision), or disarms it for `.distantFuture`. Called with the run loop's lock held.
  func armTimer(at deadline: MonotonicInstant) {
    let result = tk_timerfd_arm_absolute(timerDescriptor, deadline.nanoseconds)
    if result != 0 { fatalError("RunLoop: \(SystemCallError(call: "timerfd_settime", errno: -result))") }
  }

  /// Waits for ready members; `block` false polls. Returns how many tokens were stored in
  /// ``readyTokens`` (0 when interrupted by a signal: the loop simply re-checks). Owning
  /// thread only, without the run loop's lock.
  func wait(block: Bool) -> Int {
    let count = tk_epoll_wait_tokens(epollDescriptor, readyTokens, EpollBackend.eventCapacity, block ? -1 : 0)
    if count == -EINTR { return 0 }
    if count < 0 { fatalError("RunLoop: \(SystemCallError(call: "epoll_wait", errno: -count))") }
    return Int(count)
  }

  /// Adds a descriptor source's fd to the epoll set (seam for issue 6). Any thread.
  func addMember(descriptor: Int32, token: UInt64) throws(SystemCallError) {
    let result = tk_epoll_add_readable(epollDescriptor, descriptor, token)
    if result != 0 { throw SystemCallError(call: "epoll_ctl", errno: -result) }
  }

  /// Removes a descriptor source's fd from the epoll set (seam for issue 6). Any thread.
  func removeMember(descriptor: Int32) throws(SystemCallError) {
    let result = tk_epoll_remove(epollDescriptor, descriptor)
    if result != 0 { throw SystemCallError(call: "epoll_ctl", errno: -result) }
  }
}
