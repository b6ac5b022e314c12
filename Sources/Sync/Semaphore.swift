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
/// **Inside a task.** Waiting in a task holds one of the cooperative pool's few threads; a
/// task that waits for a signal only another task would send can starve the pool for good.
/// With ``Diagnostics/Kind/blockingInTask`` on, a wait inside a task that outlasts
/// ``Diagnostics/blockingInTaskThreshold`` is reported while it waits.
///
/// **Misuse** stops the process with a message: a negative initial value, or more than
/// `UInt32.max` permits outstanding (a signal/wait imbalance).
///
/// Built on a futex; the C functions it replaces are `sem_wait`, `sem_trywait`,
/// `sem_clockwait` and `sem_post`.
public final class Semaphore: @unchecked Sendable {
  // @unchecked: the state is one atomic word.
  //
  // The word (the layout glibc's `sem_t` uses): the low 32 bits count the permits, the high
  // 32 bits count the threads registered to sleep. The futex is the low half. Keeping both
  // counts in one word lets a waiter register and learn whether a permit arrived in one
  // operation (no futex call when one did), lets a waker learn whether anyone may sleep from
  // the same operation that adds the permit, and lets a waiter take a permit and leave the
  // sleepers in one compare-and-swap. A waker that sees a registered sleeper wakes one; a
  // sleeper registers before it sleeps and the kernel re-reads the permit count, so no
  // wake-up is lost.
  @usableFromInline
  let word: UnsafeMutablePointer<UInt64>
  /// The low (permit) half of `word`, which the kernel waits on.
  @usableFromInline
  let permits: UnsafeMutablePointer<UInt32>

  @usableFromInline
  static let permitMask: UInt64 = 0xFFFF_FFFF
  @usableFromInline
  static let sleeper: UInt64 = 1 << 32

  /// The name given at creation, or the creation site (see ``name``).
  let reportName: ReportName

  /// Creates a semaphore holding `value` permits. A negative `value` stops the process.
  /// `name` is what a ``Diagnostics/Kind/blockingInTask`` report calls it; without one the
  /// report uses the creation site, `fileID:line`, which the defaults capture.
  public init(value: Int = 0, name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line) {
    reportName = ReportName(given: name, fileID: fileID, line: line)
    if value < 0 || value > Int(UInt32.max) {
      reportMisuse("Semaphore", "initial value \(value) is outside 0...\(UInt32.max)")
    }
    let block = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    word = block.bindMemory(to: UInt64.self, capacity: 1)
    word.initialize(to: UInt64(value))
    #if _endian(little)
      permits = UnsafeMutableRawPointer(word).assumingMemoryBound(to: UInt32.self)
    #else
      permits = (UnsafeMutableRawPointer(word) + 4).assumingMemoryBound(to: UInt32.self)
    #endif
  }

  deinit {
    UnsafeMutableRawPointer(word).deallocate()
  }

  /// What diagnostics reports call the semaphore: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { reportName.label }

  /// The number of permits available right now; a snapshot that may change at once.
  public var value: Int {
    Int(UInt64.atomicLoad(at: word, ordering: .relaxed) & Semaphore.permitMask)
  }

  /// Returns one permit and wakes one waiting thread, if any. Never blocks. The C function
  /// is `sem_post`.
  @inlinable
  public func signal() {
    var current = UInt64.atomicLoad(at: word, ordering: .relaxed)
    while true {
      if current & Semaphore.permitMask == Semaphore.permitMask {
        reportMisuse("Semaphore", "signal() overflowed the permit count")
      }
      // Full: releases what the signalling thread wrote to the thread that takes the
      // permit. The sleeper count is in the same word, read by this very operation, so the
      // wake decision needs no fence between two words, on arm64 either.
      let seen = UInt64.atomicCompareExchange(expected: current, desired: current + 1, at: word, ordering: .full)
      if seen == current { break }
      current = seen
    }
    if current >> 32 != 0 {
      Futex.wake(permits, count: 1)
    }
  }

  /// Takes one permit if one is available right now; never blocks. Returns whether it did.
  /// The C function is `sem_trywait`.
  @inlinable
  public func tryWait() -> Bool {
    var current = UInt64.atomicLoad(at: word, ordering: .relaxed)
    while current & Semaphore.permitMask != 0 {
      let seen = UInt64.atomicCompareExchange(expected: current, desired: current - 1, at: word, ordering: .acquiring)
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
    LockDiagnostics.blockingWait("a permit of the Semaphore \"\(name)\"", before: deadline) {
      sleepForPermit(before: deadline)
    }
  }

  /// The sleeping part of a wait: registers as a sleeper until a permit is taken or
  /// `deadline` passes.
  func sleepForPermit(before deadline: MonotonicInstant) -> Bool {
    // Register as a possible sleeper; the same operation says whether a permit is there.
    var current = UInt64.atomicFetchAdd(Semaphore.sleeper, at: word, ordering: .full) + Semaphore.sleeper
    var timedOut = false
    while true {
      if current & Semaphore.permitMask != 0 {
        // Take a permit and stop being a sleeper, in one step.
        let seen = UInt64.atomicCompareExchange(
          expected: current, desired: current - 1 - Semaphore.sleeper, at: word, ordering: .acquiring)
        if seen == current { return true }
        current = seen
        continue
      }
      if timedOut || (deadline != .distantFuture && deadline.hasPassed) {
        // Leave only while no permit is there, so a wake-up meant for a sleeper is never
        // swallowed by a thread that goes away without the permit.
        let seen = UInt64.atomicCompareExchange(
          expected: current, desired: current - Semaphore.sleeper, at: word, ordering: .relaxed)
        if seen == current { return false }
        current = seen
        continue
      }
      // Sleeps only while the permit count is still 0.
      timedOut = !Futex.wait(permits, expected: 0, deadline: deadline)
      current = UInt64.atomicLoad(at: word, ordering: .relaxed)
    }
  }
}
