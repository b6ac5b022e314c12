import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// A lock that waits by polling: for critical sections of a few instructions only (the
/// guide's spin lock).
///
/// A waiting thread first spins with `pause` backoff, then yields the processor
/// a bounded number of times, and finally sleeps on a futex. It never busy-waits without
/// bound, so a preempted holder cannot make waiters burn a core.
///
/// **Why `unlock()` is one store.** Uncontended, `lock()` is one compare-and-swap and
/// `unlock()` a plain release store (as `pthread_spin_unlock`), where ``Lock`` pays a second
/// compare-and-swap to learn whether someone sleeps. Waiters never write the lock word while
/// it is held: they count themselves in a word of their own, which `unlock()` reads before
/// its store. A waiter that registers just as the lock is released can miss that release's
/// wake-up, so every sleep has a time limit: 50 µs at first, doubling to 1 ms. The price of
/// the single store is therefore at most that limit of extra wait in a rare race, paid only
/// by a thread that has already spun and yielded for tens of microseconds.
///
/// **Fairness: a bounded wait.** Spinning alone is unfair: the thread that just released
/// (its cache hot) usually wins the next round. Once a waiter has slept about 1 ms it counts
/// as starving, and from then on every `unlock()` hands the lock directly to a starving
/// waiter: the word says "handed over", which no other thread may take, until a starving
/// waiter claims it (``Lock``'s rule). So the longest wait is about 1 ms plus the critical
/// sections of the starving waiters ahead. The cost: while someone starves, each unlock is
/// one wake-up system call.
///
/// **When not to use it:** when the critical section may block, allocate, take another lock
/// or run longer than roughly a microsecond; when threads outnumber cores (the holder may
/// be descheduled while others spin); when in doubt. ``Lock`` is nearly as fast
/// uncontended and far better behaved under contention on this kind of machine.
///
/// `unlock()` of an unlocked spin lock and re-locking on the holding thread always stop the
/// process with a message; unlocking from another thread does in checked mode (as
/// ``Lock``; see ``MisuseChecking``).
public final class SpinLock: Locking, @unchecked Sendable {
  // @unchecked: all state is in `core`'s words, accessed through atomics and the futex.

  /// The lock's words, inside the object (one allocation per lock); first, so `core` finds
  /// them (see ``FutexLock/init(inside:)``). Never read or written through the property.
  ///
  /// The spin lock uses them its own way:
  ///
  /// | word | meaning |
  /// |---|---|
  /// | `word` | 0 free; 1 held, with the holder's thread tag in bits 16-63 (as ``Lock``); 3 handed over to a starving waiter (nobody else may take it) |
  /// | `handOff` | bumped by each hand-over; starving waiters sleep on it |
  /// | `depth` | the waiters: sleeping ones in the low 32 bits, starving ones above |
  ///
  /// Only the holder writes `word` while it is held (waiters only compare-and-swap 0 -> held,
  /// or 3 -> held when starving), which is what lets `unlock()` store instead of
  /// compare-and-swap; the store of 0 clears the owner's tag with the lock.
  private var words = FutexLock.Words()

  /// The futex lock on `words`, for the addresses of the words and the holder's tag.
  @inlinable
  var core: FutexLock { FutexLock(inside: self) }

  /// The waiters count (the `depth` word; see `words`). The spin lock never uses it as a
  /// recursion depth: it is only ever reached through these 64-bit atomics.
  @inlinable
  var waiters: UnsafeMutablePointer<UInt64> { UnsafeMutableRawPointer(core.depth).assumingMemoryBound(to: UInt64.self) }

  /// Whether `unlock()` verifies the calling thread holds the lock.
  public let isChecked: Bool

  /// Spin rounds before each yield, then yields before sleeping. The rounds start where
  /// ``Lock``'s do (32 pauses, then 64 between polls: 8 polls over 480 pauses per yield), for
  /// the same reason: a waiter that polls less often lets the holder run several
  /// acquisitions on an unshared cache line. Two threads with private work between
  /// acquisitions went from 1.14-1.30x `pthread_spinlock_t`'s time per acquisition (12
  /// rounds from the first: 13 polls over 447 pauses) to 0.69-0.74x (`cost-tables`,
  /// `contention.scaling-with-work-2`, 2-vCPU Intel Xeon VM). On a 2-vCPU AMD EPYC VM the
  /// same row depends on how cheaply the host moves a line between the two vCPUs, a state
  /// that lasts seconds: 0.59-0.73x `pthread_spinlock_t` when that is dear, 1.06-1.28x when
  /// it is cheap and `pthread_spinlock_t`'s continuous polling overlaps the two threads'
  /// work. Continuous polling tried here lost in both states (Benchmarks/MEASUREMENTS.md).
  @usableFromInline
  static let spinRounds = 8
  @usableFromInline
  static let yieldRounds = 8
  /// A sleeping waiter's first time limit, doubled after each sleep up to `longestNap`.
  static let firstNap = Duration.microseconds(50)
  static let longestNap = Duration.milliseconds(1)
  /// One starving waiter in `waiters`.
  static let starvingUnit: UInt64 = 1 << 32
  static let handedOver: UInt64 = FutexLock.handedOver

  /// Who the lock is to the lock detectors and contention statistics of ``Diagnostics``
  /// (after `words`, which must stay the first stored property).
  @usableFromInline
  let identity: LockIdentity

  /// Creates an unlocked spin lock; `checked` turns on the owner check in `unlock()`. By
  /// default it follows the process's ``MisuseChecking/mode``. `name` is what diagnostics
  /// reports call it (lock-order cycles, deadlocks, contention statistics; see
  /// ``Diagnostics``); without one they use the creation site, `fileID:line`, which the
  /// defaults capture.
  public init(
    checked: Bool = MisuseChecking.isChecked, name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line
  ) {
    isChecked = checked
    identity = LockIdentity(name: name, fileID: fileID, line: line)
    // The layout `core` relies on (checked in debug builds).
    assert(withUnsafeMutablePointer(to: &words) { UnsafeMutableRawPointer($0) } == core.base)
  }

  deinit {
    core.checkNotHeld(typeName: "SpinLock")
    LockDiagnostics.lockWillBeDestroyed(identity)
  }

  /// What diagnostics reports call the lock: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { identity.label }

  /// Acquires the lock, spinning briefly, then yielding, then sleeping until it is free.
  @available(*, noasync, message: "blocks the thread; use withLock for a short critical section")
  @inlinable
  public func lock() {
    // Diagnostics off: one relaxed load, a test and a not-taken branch before the fast path.
    if LockDiagnostics.acquisitionHooksRun {
      _ = lockHooked(before: .distantFuture)
      return
    }
    if core.tryAcquire() { return }
    _ = lockSlow(before: .distantFuture)
  }

  /// Acquires the lock, giving up when `deadline` (monotonic clock) passes.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func lock(before deadline: MonotonicInstant) -> Bool {
    if LockDiagnostics.acquisitionHooksRun { return lockHooked(before: deadline) }
    if core.tryAcquire() { return true }
    return lockSlow(before: deadline)
  }

  /// Releases the lock (see the type's doc for misuse).
  @inlinable
  public func unlock() {
    if LockDiagnostics.releaseHooksRun { return unlockHooked() }
    release()
  }

  /// Acquires the lock if it is free right now; never blocks. A lock handed over to a
  /// starving waiter is not free.
  @inlinable
  public func tryLock() -> Bool {
    if LockDiagnostics.tryAcquisitionHooksRun { return tryLockHooked() }
    return core.tryAcquire()
  }

  /// The release: misuse checks, then one plain store unless waiters are counted.
  @inlinable
  @inline(__always)
  func release() {
    // Only the holder writes `word` while it is held, so this relaxed load is exact for the
    // holder; 0 or 3 means nobody holds it.
    let current = UInt64.atomicLoad(at: core.word, ordering: .relaxed)
    if current & FutexLock.stateMask != 1 || (isChecked && current &>> FutexLock.ownerShift != currentThreadTag()) {
      core.releaseMisuse(typeName: "SpinLock")
    }
    // Relaxed: a waiter that registers after this load (or whose registration this load
    // does not see yet, on x86 and arm64 alike) is not woken by this release; it sleeps at
    // most its time limit, then finds the lock free. Mutual exclusion does not depend on it.
    if UInt64.atomicLoad(at: waiters, ordering: .relaxed) != 0 { return releaseSlow() }
    // Releasing: the next owner's acquiring compare-and-swap reads this store, so it sees
    // every write of the critical section (x86 and arm64 alike).
    UInt64.atomicStore(0, at: core.word, ordering: .releasing)
  }

  /// A release with waiters counted: hands the lock over when one starves, else frees it
  /// and wakes one sleeper.
  @usableFromInline
  @inline(never)
  func releaseSlow() {
    let counted = UInt64.atomicLoad(at: waiters, ordering: .relaxed)
    if counted >= SpinLock.starvingUnit {
      // Releasing, as any release: the claimer's acquiring compare-and-swap reads it.
      UInt64.atomicStore(SpinLock.handedOver, at: core.word, ordering: .releasing)
      wakeStarvingWaiter()
      return
    }
    UInt64.atomicStore(0, at: core.word, ordering: .releasing)
    if counted & 0xFFFF_FFFF != 0 { Futex.wake(core.futexWord, count: 1) }
  }

  /// Tells the starving waiters of the hand-over in `word`: bumps the hand-over counter and
  /// wakes one; when that wakes nobody, ``takeBackHandOver()``.
  func wakeStarvingWaiter() {
    // Bumped after the hand-over is visible: a starving waiter that reads the new value
    // (acquiring) before sleeping also reads the hand-over and claims it; one that read the
    // old value has its futex wait refused or woken.
    _ = UInt32.atomicFetchAdd(1, at: core.handOff, ordering: .full)
    if Futex.wake(core.handOff, count: 1) == 0 { takeBackHandOver() }
  }

  /// A hand-over whose wake-up woke nobody: the starving waiters are running (about to
  /// sleep, or giving up), or they do not exist (the child of a fork). Gives a running one a
  /// few microseconds to claim it, then frees the lock if still unclaimed and wakes one
  /// sleeper, so a lock whose starving waiters are gone keeps working.
  func takeBackHandOver() {
    for _ in 0..<256 {
      if UInt64.atomicLoad(at: core.word, ordering: .relaxed) != SpinLock.handedOver { return }
      tk_cpu_relax()
    }
    // Releasing, as any release: the next owner reads it.
    if UInt64.atomicCompareAndSwap(expected: SpinLock.handedOver, desired: 0, at: core.word, ordering: .releasing) {
      Futex.wake(core.futexWord, count: 1)
    }
  }

  // The outlined hooked operations (see `LockDiagnostics.hooksMayRun`): methods of the lock,
  // so the inlined call site passes `self` only.

  @usableFromInline
  @inline(never)
  func lockHooked(before deadline: MonotonicInstant) -> Bool {
    guard LockDiagnostics.diagnosesAcquisition else {
      if core.tryAcquire() { return true }
      return lockSlow(before: deadline)
    }
    return LockDiagnostics.acquire(
      identity, before: deadline, holder: { core.ownerTag }, tryAcquire: { core.tryAcquire() },
      acquire: { lockSlow(before: deadline) })
  }

  @usableFromInline
  @inline(never)
  func tryLockHooked() -> Bool {
    guard LockDiagnostics.tracksHeldLocks else { return core.tryAcquire() }
    return LockDiagnostics.tryAcquire(identity) { core.tryAcquire() }
  }

  @usableFromInline
  @inline(never)
  func unlockHooked() {
    guard LockDiagnostics.diagnosesRelease else { return release() }
    LockDiagnostics.release(identity) { release() }
  }

  /// Spins, yields, then sleeps until the lock is taken or `deadline` passes.
  @usableFromInline
  func lockSlow(before deadline: MonotonicInstant) -> Bool {
    if core.isHeldByCurrentThread {
      reportMisuse("SpinLock", "lock() by the thread that already holds it (self-deadlock)")
    }
    for _ in 0..<SpinLock.yieldRounds {
      // Spin phase: bounded exponential pauses.
      if core.tryAcquire() { return true }
      for round in 0..<SpinLock.spinRounds {
        if UInt64.atomicLoad(at: core.word, ordering: .relaxed) == 0, core.tryAcquire() { return true }
        Backoff.pause(round + FutexLock.firstSpinRound)
      }
      if deadline.hasPassed { return false }
      sched_yield()
    }
    return sleepUntilAcquired(before: deadline)
  }

  /// The sleeping phase: counted in `waiters` from first to last, each sleep limited (see
  /// the type's doc), starving after about 1 ms.
  func sleepUntilAcquired(before deadline: MonotonicInstant) -> Bool {
    // Full: the count is visible before the state is read below, so a release that reads
    // the count after this takes its slow path and wakes or hands over.
    _ = UInt64.atomicFetchAdd(1, at: waiters, ordering: .full)
    var starving = false
    let firstSleep = MonotonicInstant.now
    var nap = SpinLock.firstNap
    let held = FutexLock.heldByCurrentThread
    while true {
      let current = UInt64.atomicLoad(at: core.word, ordering: .relaxed)
      // Acquiring on both ways in: reads the releasing store (or hand-over) of the previous
      // holder, so its writes are visible.
      if current == 0 || (current == SpinLock.handedOver && starving) {
        if UInt64.atomicCompareAndSwap(expected: current, desired: held, at: core.word, ordering: .acquiring) {
          leaveWaiters(starving: starving)
          return true
        }
        continue
      }
      if deadline != .distantFuture, deadline.hasPassed {
        leaveWaiters(starving: starving)
        // A hand-over that may have been meant for this waiter: pass it on, or free it.
        if starving && UInt64.atomicLoad(at: core.word, ordering: .relaxed) == SpinLock.handedOver {
          wakeStarvingWaiter()
        }
        return false
      }
      if !starving && MonotonicInstant.now - firstSleep >= FutexLock.starvationThreshold {
        // From sleeping to starving in one update: the count never reads zero meanwhile.
        _ = UInt64.atomicFetchAdd(SpinLock.starvingUnit - 1, at: waiters, ordering: .full)
        starving = true
        continue
      }
      let wake = Swift.min(deadline, .after(nap))
      if starving {
        // Read the counter (acquiring) before re-reading the state, so a hand-over made
        // after that read is seen through the counter (see `releaseSlow`).
        let sequence = UInt32.atomicLoad(at: core.handOff, ordering: .acquiring)
        if UInt64.atomicLoad(at: core.word, ordering: .relaxed) & FutexLock.lockBits != 1 { continue }
        _ = Futex.wait(core.handOff, expected: sequence, deadline: wake)
      } else {
        // The kernel compares the word's low half (owner bits 16-31 included): a new holder
        // since `current` was read refuses the sleep, and the loop looks again.
        _ = Futex.wait(core.futexWord, expected: UInt32(truncatingIfNeeded: current), deadline: wake)
      }
      nap = Swift.min(nap * 2, SpinLock.longestNap)
    }
  }

  /// Takes this waiter out of the count.
  func leaveWaiters(starving: Bool) {
    // Wrapping: adding the two's complement subtracts.
    _ = UInt64.atomicFetchAdd(0 &- (starving ? SpinLock.starvingUnit : 1), at: waiters, ordering: .relaxed)
  }
}
