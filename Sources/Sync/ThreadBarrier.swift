/// A rendezvous for a fixed number of threads: each thread that calls
/// ``arriveAndWait()`` blocks until all `parties` threads have arrived, then all continue
/// together (`pthread_barrier_t`). Not to be confused with a memory barrier
/// (``MemoryBarrier``), which orders loads and stores inside one thread.
///
/// The barrier is reusable: once a round completes, the next `parties` arrivals form the
/// next round. In each round exactly one thread - the last to arrive - gets `true` from
/// `arriveAndWait()`, so one thread can do per-round work (merge results, print a line)
/// while the others get `false`.
///
/// ```swift
/// let barrier = ThreadBarrier(parties: workers)
/// // on each worker thread:
/// for step in 0..<steps {
///     compute(step)
///     if barrier.arriveAndWait() { publish(step) }   // exactly one thread per step
/// }
/// ```
///
/// **Inside a task.** Waiting in a task holds one of the cooperative pool's few threads;
/// tasks that wait at a barrier for parties that are tasks queued behind them can starve
/// the pool for good. With ``Diagnostics/Kind/blockingInTask`` on, a wait inside a task
/// that outlasts ``Diagnostics/blockingInTaskThreshold`` is reported while it waits.
///
/// **Misuse** stops the process with a message (it is a programming error, like a negative
/// array count, so it is not thrown): a party count below 1. More threads than `parties`
/// arriving at once simply form the next round.
///
/// Built on a futex lock and a futex sequence word; the C function it replaces is
/// `pthread_barrier_wait` (whose `PTHREAD_BARRIER_SERIAL_THREAD` result is the `true` here).
public final class ThreadBarrier: @unchecked Sendable {
  // @unchecked: `arrived` and `round` are read and written only with `lockCore` held.
  @usableFromInline
  let lockCore: FutexLock
  @usableFromInline
  let waitCore: FutexCondition
  @usableFromInline
  let counters: UnsafeMutablePointer<Int>

  /// The number of threads that make up one round.
  public let parties: Int

  /// The name given at creation, or the creation site (see ``name``).
  let reportName: ReportName

  /// Creates a barrier for `parties` threads. A count below 1 stops the process with a
  /// message. `name` is what a ``Diagnostics/Kind/blockingInTask`` report calls it; without
  /// one the report uses the creation site, `fileID:line`, which the defaults capture.
  public init(parties: Int, name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line) {
    reportName = ReportName(given: name, fileID: fileID, line: line)
    if parties < 1 {
      reportMisuse("ThreadBarrier", "parties must be at least 1, got \(parties)")
    }
    self.parties = parties
    lockCore = FutexLock()
    waitCore = FutexCondition()
    counters = .allocate(capacity: 2)
    counters.initialize(repeating: 0, count: 2)  // [0]: arrived this round, [1]: round
  }

  deinit {
    lockCore.deallocate(typeName: "ThreadBarrier")
    waitCore.deallocate()
    counters.deallocate()
  }

  /// What diagnostics reports call the barrier: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { reportName.label }

  /// Arrives at the barrier and blocks until `parties` threads (this one included) have
  /// arrived in this round. Returns `true` in exactly one thread per round (the last to
  /// arrive, which does not block) and `false` in the others. The C function is
  /// `pthread_barrier_wait`.
  @available(*, noasync, message: "blocks the thread")
  @discardableResult
  public func arriveAndWait() -> Bool {
    _ = lockCore.acquire(before: .distantFuture, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "ThreadBarrier")
    defer { lockCore.release(checkOwner: false, typeName: "ThreadBarrier") }
    let round = counters[1]
    counters[0] += 1
    if counters[0] == parties {
      counters[0] = 0
      counters[1] &+= 1
      waitCore.broadcast()
      return true
    }
    // The round number, not the count, tells a waiter its round is over: the count is
    // already being reused by the next round when a slow waiter wakes.
    LockDiagnostics.blockingWait("the other parties of the ThreadBarrier \"\(name)\"", before: .distantFuture) {
      waitForRound(round)
    }
    return false
  }

  /// Waits, holding `lockCore`, until the round numbered `round` is over.
  func waitForRound(_ round: Int) {
    while counters[1] == round {
      _ = waitCore.wait(releasing: lockCore, before: .distantFuture, typeName: "ThreadBarrier")
    }
  }
}
