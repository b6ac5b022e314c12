/// A one-shot countdown that threads wait on until it reaches zero: a latch, or a wait
/// group (`std::latch`, Go's `sync.WaitGroup`, Java's `CountDownLatch`).
///
/// Create it with the number of events to wait for; each event calls ``countDown(by:)``;
/// ``wait()`` blocks until the count is zero and then returns at once forever after. Use it
/// to wait for a set of threads to finish a phase, or to release many threads at once
/// (count 1, counted down by a starter thread).
///
/// ```swift
/// let done = Latch(count: workers.count)
/// for worker in workers { start { worker.run(); done.countDown() } }
/// done.wait()                          // all workers have finished `run()`
/// ```
///
/// Writes made before `countDown()` are visible to every thread that returns from `wait()`.
/// Timed waits use the monotonic clock; a passed deadline or a zero or negative timeout
/// makes one check and never blocks.
///
/// **Inside a task.** Waiting in a task holds one of the cooperative pool's few threads; a
/// task that waits for count-downs only other tasks would make can starve the pool for
/// good. With ``Diagnostics/Kind/blockingInTask`` on, a wait inside a task that outlasts
/// ``Diagnostics/blockingInTaskThreshold`` is reported while it waits.
///
/// **Misuse** stops the process with a message: a negative initial count, or counting
/// down below zero.
///
/// Built on a futex; there is no direct C counterpart.
public final class Latch: @unchecked Sendable {
  // @unchecked: `remaining` is an atomic; waiters sleep on it until it is zero.
  @usableFromInline
  let remaining: UnsafeMutablePointer<UInt32>

  /// The name given at creation, or the creation site (see ``name``).
  let reportName: ReportName

  /// Creates a latch that opens after `count` calls to ``countDown(by:)``. A count of 0 is
  /// open from the start; a negative count stops the process. `name` is what a
  /// ``Diagnostics/Kind/blockingInTask`` report calls it; without one the report uses the
  /// creation site, `fileID:line`, which the defaults capture.
  public init(count: Int, name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line) {
    reportName = ReportName(given: name, fileID: fileID, line: line)
    if count < 0 || count > Int(UInt32.max) {
      reportMisuse("Latch", "count \(count) is outside 0...\(UInt32.max)")
    }
    remaining = .allocate(capacity: 1)
    remaining.initialize(to: UInt32(count))
  }

  deinit {
    remaining.deallocate()
  }

  /// What diagnostics reports call the latch: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { reportName.label }

  /// The count still to go; a snapshot.
  public var count: Int {
    Int(UInt32.atomicLoad(at: remaining, ordering: .relaxed))
  }

  /// Whether the count has reached zero (then ``wait()`` returns at once).
  public var isOpen: Bool {
    UInt32.atomicLoad(at: remaining, ordering: .acquiring) == 0
  }

  /// Decreases the count by `amount` (default 1); at zero, wakes every waiting thread.
  /// Never blocks. Stops the process if the count would drop below zero.
  public func countDown(by amount: Int = 1) {
    if amount < 0 || amount > Int(UInt32.max) {
      reportMisuse("Latch", "countDown(by: \(amount)) with a negative or oversized amount")
    }
    let step = UInt32(amount)
    var current = UInt32.atomicLoad(at: remaining, ordering: .relaxed)
    while true {
      if current < step {
        reportMisuse("Latch", "countDown(by: \(amount)) with only \(current) remaining")
      }
      // Releasing: the counting thread's writes happen before a waiter's acquiring load
      // sees zero.
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: current - step, at: remaining, ordering: .releasing)
      if seen == current { break }
      current = seen
    }
    if current == step {
      Futex.wake(remaining, count: Int32.max)
    }
  }

  /// Blocks until the count reaches zero.
  @available(*, noasync, message: "blocks the thread")
  public func wait() {
    _ = wait(before: .distantFuture)
  }

  /// Blocks until the count reaches zero or `deadline` (monotonic clock) passes; returns
  /// whether it reached zero. `false` never comes before the deadline.
  @available(*, noasync, message: "blocks the thread")
  public func wait(before deadline: MonotonicInstant) -> Bool {
    if isOpen { return true }
    return LockDiagnostics.blockingWait("the opening of the Latch \"\(name)\"", before: deadline) {
      sleepUntilOpen(before: deadline)
    }
  }

  /// The sleeping part of a wait: until the count reaches zero or `deadline` passes.
  func sleepUntilOpen(before deadline: MonotonicInstant) -> Bool {
    while true {
      let current = UInt32.atomicLoad(at: remaining, ordering: .acquiring)
      if current == 0 { return true }
      if deadline != .distantFuture, deadline.hasPassed { return false }
      // Sleeps only while the count is still `current`; any count-down makes it re-check.
      _ = Futex.wait(remaining, expected: current, deadline: deadline)
    }
  }

  /// Blocks until the count reaches zero or `timeout` (monotonic clock) has elapsed; see
  /// ``wait(before:)``.
  @available(*, noasync, message: "blocks the thread")
  public func wait(timeout: Duration) -> Bool {
    wait(before: .after(timeout))
  }
}
