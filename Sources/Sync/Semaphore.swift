/// A counting semaphore: a count of available permits that ``wait()`` takes and
/// ``signal()`` returns (`sem_t`, `DispatchSemaphore`).
///
/// `wait` takes one permit, blocking while none is available; `signal` adds one and wakes
/// one waiting thread. Start with the number of permits you hand out: `Semaphore(value: 4)`
/// lets at most four threads into a section at once, `Semaphore(value: 0)` makes a one-way
/// signal between threads.
///
/// ```swift
/// let slots = Semaphore(value: 4)
/// slots.wait()
/// defer { slots.signal() }
/// download()                          // at most four at a time
/// ```
///
/// Timed waits (``wait(before:)``, ``wait(timeout:)``) use the monotonic clock; a passed
/// deadline or a zero or negative timeout makes one attempt and never blocks. Not fair: a
/// thread that arrives as a permit is returned may take it before a sleeper wakes.
///
/// **Misuse** stops the process with a message: a negative initial value, or more than
/// `UInt32.max` permits outstanding (a signal/wait imbalance).
///
/// Built on a futex; the C functions it replaces are `sem_wait`, `sem_trywait`,
/// `sem_clockwait` and `sem_post`.
public final class Semaphore: @unchecked Sendable {
  // @unchecked: `count` and `waiters` are atomics. Wake-ups are not lost for the reason
  // given in FutexCondition: `signal` increments `count` and then reads `waiters`, a waiter
  // increments `waiters` and then the kernel re-reads `count`, all with full ordering.
  @usableFromInline
  let count: UnsafeMutablePointer<UInt32>
  @usableFromInline
  let waiters: UnsafeMutablePointer<UInt32>

  /// Creates a semaphore holding `value` permits. A negative `value` stops the process.
  public init(value: Int = 0) {
    if value < 0 || value > Int(UInt32.max) {
      reportMisuse("Semaphore", "initial value \(value) is outside 0...\(UInt32.max)")
    }
    let block = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    count = block.bindMemory(to: UInt32.self, capacity: 1)
    count.initialize(to: UInt32(value))
    waiters = (block + 4).bindMemory(to: UInt32.self, capacity: 1)
    waiters.initialize(to: 0)
  }

  deinit {
    UnsafeMutableRawPointer(count).deallocate()
  }

  /// The number of permits available right now; a snapshot that may change at once.
  public var value: Int {
    Int(UInt32.atomicLoad(at: count, ordering: .relaxed))
  }

  /// Returns one permit and wakes one waiting thread, if any. Never blocks. The C function
  /// is `sem_post`.
  @inlinable
  public func signal() {
    // Full: pairs with the waiter's full increment of `waiters` (see the type's comment),
    // and releases what the signalling thread wrote to the thread that takes the permit.
    let old = UInt32.atomicFetchAdd(1, at: count, ordering: .full)
    if old == UInt32.max {
      reportMisuse("Semaphore", "signal() overflowed the permit count")
    }
    // Relaxed suffices: the `.full` increment is fenced on both sides, so this load stays
    // after it.
    if UInt32.atomicLoad(at: waiters, ordering: .relaxed) != 0 {
      Futex.wake(count, count: 1)
    }
  }

  /// Takes one permit if one is available right now; never blocks. Returns whether it did.
  /// The C function is `sem_trywait`.
  @inlinable
  public func tryWait() -> Bool {
    var current = UInt32.atomicLoad(at: count, ordering: .relaxed)
    while current != 0 {
      let seen = UInt32.atomicCompareExchange(expected: current, desired: current - 1, at: count, ordering: .acquiring)
      if seen == current { return true }
      current = seen
    }
    return false
  }

  /// Takes one permit, blocking until one is available. The C function is `sem_wait`.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func wait() {
    if tryWait() { return }
    _ = waitSlow(before: .distantFuture)
  }

  /// Takes one permit, blocking until one is available or `deadline` (monotonic clock)
  /// passes. Returns whether it took one; `false` never comes before the deadline. The C
  /// function is `sem_clockwait` with `CLOCK_MONOTONIC`.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func wait(before deadline: MonotonicInstant) -> Bool {
    if tryWait() { return true }
    return waitSlow(before: deadline)
  }

  /// Takes one permit, waiting at most `timeout` (monotonic clock); see
  /// ``wait(before:)``. A zero or negative timeout makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func wait(timeout: Duration) -> Bool {
    wait(before: .after(timeout))
  }

  @usableFromInline
  func waitSlow(before deadline: MonotonicInstant) -> Bool {
    while true {
      if deadline != .distantFuture, deadline.hasPassed { return false }
      _ = UInt32.atomicFetchAdd(1, at: waiters, ordering: .full)
      let woken = Futex.wait(count, expected: 0, deadline: deadline)
      _ = UInt32.atomicFetchAdd(UInt32.max, at: waiters, ordering: .relaxed)
      if tryWait() { return true }
      if !woken { return false }
    }
  }
}
