/// A 32-bit integer type whose ``AtomicInteger`` can be waited on: `Int32` and `UInt32`.
/// No requirements: conforming adds no members.
public protocol AtomicWaitableValue: AtomicIntegerValue {}

extension Int32: AtomicWaitableValue {}
extension UInt32: AtomicWaitableValue {}

/// Waiting for a 32-bit atomic to change, and waking its waiters: C++20's
/// `std::atomic<T>::wait` / `notify_one` / `notify_all`, on a Linux futex.
///
/// This is the building block under every sleeping primitive of the toolkit: a thread
/// publishes "I am about to sleep" in an atomic word, re-checks its condition, and sleeps only
/// while the word still holds the value it saw; whoever changes the condition changes the
/// word and wakes it. The kernel compares the word and queues the sleeper atomically, so a
/// change made between the check and the sleep is never missed.
///
/// Only 32-bit values (`UInt32`, `Int32`, the ``AtomicWaitableValue`` types) can be waited
/// on: a futex is a 32-bit word.
///
/// ```swift
/// let state = AtomicInteger<UInt32>(0)
/// // Waiter: sleep until state is no longer 0. Wake-ups can be spurious: loop on the condition.
/// while state.load(ordering: .acquiring) == 0 {
///   state.wait(whileEqualTo: 0)
/// }
/// // Another thread: publish, then wake.
/// state.store(1, ordering: .releasing)
/// state.wakeAll()
/// ```
extension AtomicInteger where Value: AtomicWaitableValue {
  /// Blocks the calling thread while the value equals `expected`, until a ``wake(count:)``
  /// or ``wakeAll()`` on this atomic, or until `deadline` (monotonic clock) passes.
  ///
  /// Returns at once when the value already differs. May also return spuriously (a signal
  /// handler ran, or a wake-up meant for an earlier wait arrived), so callers re-check their
  /// condition in a loop. Returns false only when the deadline passed; true otherwise.
  ///
  /// Throws nothing: a failing futex call other than a timeout, a signal or a changed value
  /// means a kernel without futexes and stops the process with the failing call and errno.
  @available(*, noasync, message: "blocks the calling thread; use it from a thread, not a task")
  @discardableResult
  public func wait(whileEqualTo expected: Value, before deadline: MonotonicInstant = .distantFuture) -> Bool {
    Futex.wait(word, expected: UInt32(truncatingIfNeeded: expected), deadline: deadline)
  }

  /// Blocks the calling thread while the value equals `expected`, until a ``wake(count:)``
  /// or ``wakeAll()`` on this atomic, or until `timeout` (monotonic clock) has elapsed; see
  /// ``wait(whileEqualTo:before:)``. Returns false only when the time is up; a zero or
  /// negative timeout returns false at once if the value equals `expected`.
  @available(*, noasync, message: "blocks the calling thread; use it from a thread, not a task")
  @discardableResult
  public func wait(whileEqualTo expected: Value, timeout: Duration) -> Bool {
    wait(whileEqualTo: expected, before: .after(timeout))
  }

  /// Wakes at most `count` threads blocked in ``wait(whileEqualTo:before:)`` on this atomic
  /// and returns how many woke. Never blocks. Change the value first (with at least
  /// releasing ordering), then wake: a waiter that has not yet slept sees the new value and
  /// does not sleep. A `count` below 1 is misuse and stops the process.
  @discardableResult
  public func wake(count: Int = 1) -> Int {
    if count < 1 { reportMisuse("AtomicInteger", "wake(count: \(count)): count must be at least 1") }
    // The kernel's futex_wake issues a full barrier before it looks for sleepers, paired
    // with one in futex_wait before it reads the word: the caller's earlier store needs no
    // fence of its own (on arm64 either) to be seen by a waiter that is not yet asleep.
    return Int(Futex.wake(word, count: Int32(clamping: count)))
  }

  /// Wakes every thread blocked in ``wait(whileEqualTo:before:)`` on this atomic and returns
  /// how many woke. Never blocks.
  @discardableResult
  public func wakeAll() -> Int {
    Int(Futex.wake(word, count: Int32.max))
  }

  /// The futex word: the value's 32-bit pattern. A custom conformance to
  /// ``AtomicWaitableValue`` of another width is misuse and stops the process.
  var word: UnsafeMutablePointer<UInt32> {
    if Value.bitWidth != 32 {
      reportMisuse("AtomicInteger", "\(Value.self) is \(Value.bitWidth) bits wide; only 32-bit values can be waited on")
    }
    return storage.assumingMemoryBound(to: UInt32.self)
  }
}
