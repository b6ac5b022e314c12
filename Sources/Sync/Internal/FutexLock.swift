import CThreadingShims

/// The lock word shared by ``Lock``, ``RecursiveLock`` and ``SpinLock``: a three-state futex
/// lock (Drepper, "Futexes Are Tricky", mutex 3) plus an owner tag.
///
/// State table of `state`:
///
/// | value | meaning |
/// |---|---|
/// | 0 | unlocked |
/// | 1 | locked, nobody sleeping |
/// | 2 | locked, someone may be sleeping in the kernel: unlock must wake one |
///
/// Acquire: one compare-and-swap 0 -> 1 with acquire ordering (the fast path, inlined into
/// the caller). Otherwise spin a bounded number of times, then exchange in 2 and sleep on the
/// futex while the exchange returns non-zero. Release: one compare-and-swap 1 -> 0 with
/// release ordering; if it sees 2, store 0 (release) and wake one sleeper. Acquire ordering
/// on taking the lock and release ordering on giving it up make the protected writes
/// visible to the next owner (and tell ThreadSanitizer so).
///
/// `owner` holds the holder's thread tag (0 when free). It is written with relaxed atomics
/// by the holder only, so reading one's own tag back is exact; it serves misuse checks and
/// recursion, never mutual exclusion.
///
/// The words live in a 64-byte, 64-aligned heap block (one cache line) owned by the lock
/// object, so their addresses never move.
@usableFromInline
struct FutexLock {
  @usableFromInline
  let state: UnsafeMutablePointer<UInt32>
  @usableFromInline
  let owner: UnsafeMutablePointer<UInt64>
  /// Recursion depth, used by ``RecursiveLock`` only; touched by the holder only.
  @usableFromInline
  let depth: UnsafeMutablePointer<Int>

  init() {
    self.init(wordsAt: UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64))
  }

  /// The bytes the words take at the start of their block (8-byte aligned); whatever the
  /// block holds after them shares their cache line (``LockedValue`` keeps its value there).
  static let wordsSize = 24

  /// Uses the first ``wordsSize`` bytes of `block` (8-byte aligned, stable, owned by the
  /// caller, who frees it after ``checkNotHeld(typeName:)``).
  init(wordsAt block: UnsafeMutableRawPointer) {
    state = block.bindMemory(to: UInt32.self, capacity: 1)
    state.initialize(to: 0)
    owner = (block + 8).bindMemory(to: UInt64.self, capacity: 1)
    owner.initialize(to: 0)
    depth = (block + 16).bindMemory(to: Int.self, capacity: 1)
    depth.initialize(to: 0)
  }

  /// The lock whose words ``init(wordsAt:)`` already initialized at the start of `block`.
  init(existingWordsAt block: UnsafeMutableRawPointer) {
    state = block.assumingMemoryBound(to: UInt32.self)
    owner = (block + 8).assumingMemoryBound(to: UInt64.self)
    depth = (block + 16).assumingMemoryBound(to: Int.self)
  }

  /// Frees the block allocated by `init()`. The owning object calls this from `deinit`.
  func deallocate(typeName: String) {
    checkNotHeld(typeName: typeName)
    UnsafeMutableRawPointer(state).deallocate()
  }

  /// Stops the process if the lock is held: a lock destroyed while held means some thread
  /// still thinks it owns it.
  func checkNotHeld(typeName: String) {
    if UInt32.atomicLoad(at: state, ordering: .relaxed) != 0 {
      reportMisuse(typeName, "deinitialized while locked")
    }
  }

  /// The holder's thread tag, or 0.
  @inlinable
  var ownerTag: UInt64 { UInt64.atomicLoad(at: owner, ordering: .relaxed) }

  /// Whether the calling thread holds the lock.
  @inlinable
  var isHeldByCurrentThread: Bool { ownerTag == currentThreadTag() }

  /// One attempt, never blocks.
  @inlinable
  @inline(__always)
  func tryAcquire() -> Bool {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: 1, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: owner, ordering: .relaxed)
      return true
    }
    return false
  }

  /// Acquires, blocking until `deadline`; returns false if it passed first.
  @inlinable
  @inline(__always)
  func acquire(before deadline: MonotonicInstant, spins: Int, typeName: String) -> Bool {
    if tryAcquire() { return true }
    return acquireSlow(before: deadline, spins: spins, typeName: typeName)
  }

  /// Releases. `checkOwner` verifies the caller holds the lock (checked mode); releasing an
  /// unlocked lock is always detected, because it costs nothing here.
  @inlinable
  @inline(__always)
  func release(checkOwner: Bool, typeName: String) {
    if checkOwner, ownerTag != currentThreadTag() {
      releaseMisuse(typeName: typeName)
    }
    UInt64.atomicStore(0, at: owner, ordering: .relaxed)
    if !UInt32.atomicCompareAndSwap(expected: 1, desired: 0, at: state, ordering: .releasing) {
      releaseSlow(typeName: typeName)
    }
  }

  @usableFromInline
  func releaseMisuse(typeName: String) -> Never {
    if UInt32.atomicLoad(at: state, ordering: .relaxed) == 0 {
      reportMisuse(typeName, "unlock() of a lock that is not locked")
    }
    reportMisuse(typeName, "unlock() from a thread that does not hold the lock")
  }

  @usableFromInline
  func releaseSlow(typeName: String) {
    // The compare-and-swap failed: the state is 2 (sleepers) or 0 (not locked at all).
    let seen = UInt32.atomicLoad(at: state, ordering: .relaxed)
    if seen == 0 {
      reportMisuse(typeName, "unlock() of a lock that is not locked")
    }
    // Only the holder moves the state away from 1 or 2 to 0, so a plain releasing store is
    // enough; a thread exchanging 2 in concurrently either sees our 0 (and owns the lock) or
    // sleeps and is woken below.
    UInt32.atomicStore(0, at: state, ordering: .releasing)
    Futex.wake(state, count: 1)
  }

  @usableFromInline
  func acquireSlow(before deadline: MonotonicInstant, spins: Int, typeName: String) -> Bool {
    let me = currentThreadTag()
    if ownerTag == me {
      reportMisuse(
        typeName, "lock() by the thread that already holds it (self-deadlock); use RecursiveLock to re-acquire")
    }
    // Bounded spinning: poll, one pause per poll, while the lock is held; a holder about to
    // leave hands over without a system call. Never unbounded. A thread that has not slept
    // may take a free lock with 1 even if others sleep: the release that freed it has
    // already woken one of them, which re-marks the word 2 before sleeping again.
    var current = spin(spins)
    if current == 0,
      UInt32.atomicCompareAndSwap(expected: 0, desired: 1, at: state, ordering: .acquiring)
    {
      UInt64.atomicStore(me, at: owner, ordering: .relaxed)
      return true
    }
    while true {
      // Mark "sleepers possible" and take the lock if it was free; else sleep on it. A thread
      // woken from the futex must take the lock with 2: it cannot know whether others sleep.
      if current != 2, UInt32.atomicExchange(2, at: state, ordering: .acquiring) == 0 { break }
      if deadline != .distantFuture, deadline.hasPassed { return false }
      if !Futex.wait(state, expected: 2, deadline: deadline) {
        // Timed out. Our 2 may remain in the word: the next unlock makes one spare wake.
        return false
      }
      current = spin(spins)
    }
    UInt64.atomicStore(me, at: owner, ordering: .relaxed)
    return true
  }
}

extension FutexLock {
  /// Polls the lock word up to `limit` times (one pause each) while it is held, sleepers or
  /// not; returns the last value seen. Polling on while others sleep lets a thread whose
  /// critical sections alternate with private work take the lock in user space instead of
  /// joining the sleepers (measured: `mutex.contended-with-work-*` in `cost-tables`).
  @usableFromInline
  func spin(_ limit: Int) -> UInt32 {
    var remaining = limit
    while true {
      let current = UInt32.atomicLoad(at: state, ordering: .relaxed)
      if current == 0 || remaining == 0 { return current }
      tk_cpu_relax()
      remaining -= 1
    }
  }
}

/// Spin-wait pacing: exponential pause bursts, capped.
@usableFromInline
enum Backoff {
  /// Executes `min(2^round, 64)` pause instructions.
  @usableFromInline
  static func pause(_ round: Int) {
    let count = 1 << Swift.min(round, 6)
    for _ in 0..<count { tk_cpu_relax() }
  }
}
