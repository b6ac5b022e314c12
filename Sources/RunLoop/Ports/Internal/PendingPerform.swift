import Sync

/// One perform request that a caller waits for: the block, a once-only state, and a
/// one-slot queue that carries the outcome to the waiter.
///
/// State (an atomic, so the run-loop thread and a waiter whose deadline passed race safely):
/// 0 = queued, 1 = running or ran (the run loop won), 2 = withdrawn (the waiter won: the
/// block must not run). The run loop holds the request only through a ``Ticket``: if the
/// loop discards the request unrun (its thread ended), the ticket is released and reports
/// `.dropped` to the waiter.
final class PendingPerform: @unchecked Sendable {
  enum Outcome: Sendable {
    case ran
    case dropped
  }

  /// What the queued block holds; its release without having run means "dropped".
  final class Ticket: @unchecked Sendable {
    let request: PendingPerform
    init(_ request: PendingPerform) { self.request = request }
    deinit { request.report(.dropped) }
    func run() { request.run() }
  }

  private let block: @Sendable () -> Void
  private let state = AtomicInteger<UInt32>(0)
  private let reported = AtomicInteger<UInt32>(0)
  private let outcome = MessageQueue<Outcome>(capacity: 1)

  init(_ block: @escaping @Sendable () -> Void) {
    self.block = block
  }

  /// Runs the block unless the waiter withdrew the request.
  private func run() {
    guard state.compareAndSwap(expected: 0, desired: 1, ordering: .full) else { return }
    block()
    report(.ran)
  }

  /// Delivers the first outcome only.
  private func report(_ result: Outcome) {
    guard reported.compareAndSwap(expected: 0, desired: 1, ordering: .full) else { return }
    _ = outcome.send(result, before: .distantPast)
  }

  /// Waits until the block ran or was dropped, or until `deadline`; on timeout withdraws
  /// the request if it has not started (if it has, waits for it to finish). Returns nil
  /// when withdrawn.
  func wait(before deadline: MonotonicInstant) -> Outcome? {
    switch outcome.receive(before: deadline) {
    case .element(let result):
      return result
    case .timedOut, .invalid:
      if state.compareAndSwap(expected: 0, desired: 2, ordering: .full) { return nil }
      // Already running: its end is near and certain.
      if case .element(let result) = outcome.receive(before: .distantFuture) { return result }
      return .dropped
    }
  }
}
