import Sync

/// One perform request that a caller waits for: the block and one atomic word that carries
/// both the request's fate and the waiter's sleep.
///
/// The word's low bits are the state; `waiterSleeps` is or-ed in while the waiter sleeps on
/// the word (a futex), so the run-loop thread makes a `futex_wake` only when someone sleeps:
///
/// | state | set by | meaning |
/// |---|---|---|
/// | `queued` | creation | not started |
/// | `running` | run loop (from `queued`) | the block runs: the waiter can no longer withdraw it |
/// | `withdrawn` | waiter (from `queued`, deadline passed) | the block must not run |
/// | `ran` | run loop (from `running`) | done |
/// | `dropped` | ticket release (from `queued`) | the run loop discarded the request unrun |
///
/// The run loop holds the request only through a ``Ticket``: if the loop discards the request
/// unrun (its thread ended), the ticket is released and reports `dropped` to the waiter.
final class PendingPerform: @unchecked Sendable, WithdrawableRequest {
  // @unchecked: `block` is immutable; `word` is an atomic.
  enum Outcome: Sendable {
    case ran
    case dropped
  }

  /// What the queued block holds; its release without having run means "dropped".
  final class Ticket: @unchecked Sendable {
    let request: PendingPerform
    init(_ request: PendingPerform) { self.request = request }
    deinit { request.finish(from: PendingPerform.queued, to: PendingPerform.dropped) }
    func run() { request.run() }
  }

  static let queued: UInt32 = 0
  static let running: UInt32 = 1
  static let withdrawn: UInt32 = 2
  static let ran: UInt32 = 3
  static let dropped: UInt32 = 4
  static let stateMask: UInt32 = 7
  static let waiterSleeps: UInt32 = 8

  private let block: @Sendable () -> Void
  private let word = AtomicInteger<UInt32>(PendingPerform.queued)

  init(_ block: @escaping @Sendable () -> Void) {
    self.block = block
  }

  /// Whether the waiter withdrew the request (its block would do nothing).
  var isWithdrawn: Bool {
    word.load(ordering: .acquiring) & PendingPerform.stateMask == PendingPerform.withdrawn
  }

  /// Runs the block unless the waiter withdrew the request (or it already ran).
  private func run() {
    guard moveState(from: PendingPerform.queued, to: PendingPerform.running) != nil else { return }
    block()
    finish(from: PendingPerform.running, to: PendingPerform.ran)
  }

  /// Moves the state `from` -> `to` keeping the sleep bit; returns the word before, or nil
  /// when the state was not `from`.
  private func moveState(from: UInt32, to: UInt32) -> UInt32? {
    var seen = word.load(ordering: .full)
    while seen & PendingPerform.stateMask == from {
      let (swapped, current) = word.compareExchange(
        expected: seen, desired: (seen & ~PendingPerform.stateMask) | to, ordering: .full)
      if swapped { return seen }
      seen = current
    }
    return nil
  }

  /// Moves to a final state and wakes the waiter if it sleeps.
  private func finish(from: UInt32, to: UInt32) {
    guard let before = moveState(from: from, to: to) else { return }
    if before & PendingPerform.waiterSleeps != 0 { word.wakeAll() }
  }

  /// Waits until the block ran or was dropped, or until `deadline`; on timeout withdraws
  /// the request if it has not started (if it has, waits for it to finish). Returns nil
  /// when withdrawn.
  func wait(before deadline: MonotonicInstant) -> Outcome? {
    var waitUntil = deadline
    while true {
      let seen = word.load(ordering: .full)
      switch seen & PendingPerform.stateMask {
      case PendingPerform.ran: return .ran
      case PendingPerform.dropped: return .dropped
      default: break
      }
      if seen & PendingPerform.waiterSleeps == 0 {
        // Announce the sleep first, so the run loop knows to wake us.
        _ = word.compareAndSwap(expected: seen, desired: seen | PendingPerform.waiterSleeps, ordering: .full)
        continue
      }
      if !word.wait(whileEqualTo: seen, before: waitUntil) {
        // Deadline passed: withdraw it if it has not started; if it runs, its end is near
        // and certain, so wait for it without a deadline.
        if moveState(from: PendingPerform.queued, to: PendingPerform.withdrawn) != nil { return nil }
        waitUntil = .distantFuture
      }
    }
  }
}
