/// Switches that let a benchmark measure the locks against variants of themselves, reached
/// with `@_spi(Benchmarking) import Sync`.
///
/// Not API: nothing here is covered by source or behaviour stability, and a program has no
/// reason to touch it. Each switch is process-wide and applies to every lock at once.
@_spi(Benchmarking)
public enum LockBenchmarkSwitches {
  /// Whether a waiter that has slept for the starvation threshold (about 1 ms) counts as
  /// starving, so that the next unlock hands the lock to it: the bounded wait of `Lock`,
  /// `LockedValue`, `RecursiveLock`, `SpinLock` and `ReadWriteLock` writers. `true` unless a
  /// benchmark sets it.
  ///
  /// With `false` no waiter becomes starving and the locks always barge, as they would
  /// without the bound: the lock the bound's throughput cost is measured against. A waiter
  /// reads the switch after each of its sleeps, so a change applies to the waits that reach
  /// that point after it; a waiter already starving stays so until it has the lock.
  public static var handOverBound: Bool {
    get { handOverBoundSwitch.load(ordering: .relaxed) }
    set { handOverBoundSwitch.store(newValue, ordering: .relaxed) }
  }
}

/// The storage of ``LockBenchmarkSwitches/handOverBound``. Relaxed accesses suffice on any
/// CPU: the switch orders no other memory, and a waiter that reads a stale value decides one
/// wait by the previous rule, which both rules allow.
let handOverBoundSwitch = AtomicBool(true)
