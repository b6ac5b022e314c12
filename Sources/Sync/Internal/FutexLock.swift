import CThreadingShims

/// The lock word shared by ``Lock``, ``LockedValue``, ``RecursiveLock``, ``SpinLock`` and
/// `synchronized`: a three-state futex lock (Drepper, "Futexes Are Tricky", mutex 3) with a
/// bounded wait ("eventual fairness", as WebKit's `WTF::Lock`, parking_lot and Go's
/// `sync.Mutex` starvation mode), whose word also holds the owner's thread tag.
///
/// `word` is 64 bits. Its low 32 bits are the futex word (the kernel compares and sleeps on
/// them; Linux on x86_64 and arm64 is little-endian, so they are the first four bytes):
///
/// | bits | meaning |
/// |---|---|
/// | 0-1 = 0 | unlocked |
/// | 0-1 = 1 | locked, nobody sleeping |
/// | 0-1 = 2 | locked, someone may be sleeping in the kernel: unlock must wake one |
/// | 0-1 = 3 | handed over: unlocked by its holder and given to a starving waiter, who has not claimed it yet (no thread owns it; nobody else may take it) |
/// | 2-15 | the number of *starving* waiters (at most ``maxStarving``) |
/// | 16-63 | the holder's thread tag (`currentThreadTag()`, below 2^48), 0 when nobody owns it |
///
/// Starving waiters are threads that have slept for ``starvationThreshold`` or longer
/// without getting the lock. While their count is not zero, unlock never frees the lock: it
/// marks it handed over (3) and wakes one starving waiter, which sleeps on `handOff` rather
/// than on the lock word, so it is woken before the others; nobody can barge in between. So
/// a waiter waits at most about the threshold plus the critical sections of the starving
/// waiters ahead of it (each one hand-over, one wake-up), whatever the others do. While
/// nobody starves, the lock barges: a releasing thread may take it again before a woken
/// sleeper runs, which keeps throughput high.
///
/// Why every unlock while someone starves, not a hand-over now and then: a waiter that is
/// not starving stops spinning and sleeps while the count is not zero (``spin(_:)``), so
/// during a starving phase few threads compete for the processors. Spacing hand-overs out
/// (the next one after nine times the last claim's delay, unlocks in between freeing the
/// lock) measured about twice the time per acquisition of this rule at 64 threads on 2
/// CPUs, with longest waits no shorter, whether or not contenders kept spinning meanwhile.
///
/// The owner's tag lives in the word so that the uncontended pair is exactly two
/// compare-and-swaps and nothing else (as `Synchronization.Mutex`, which keeps the kernel
/// thread id in its word): acquire 0 -> `1 | tag`, release `1 | tag` -> 0. A separate owner
/// word cost two more stores per pair (about 5% of the pair, measured). Only the acquiring
/// thread writes its own tag, with the compare-and-swap that takes the lock, so reading
/// one's own tag back is exact; every way of giving the lock up clears it. The tag serves
/// misuse checks, recursion and the diagnostics' holder names, never mutual exclusion.
///
/// Acquire: one compare-and-swap 0 -> `1 | tag` with acquire ordering (the fast path,
/// inlined into the caller). Otherwise spin a bounded number of times (once more if another
/// thread takes the lock first), then mark the word 2 and sleep on the futex. Release: one
/// compare-and-swap `1 | tag` -> 0 with release ordering; anything else (sleepers, starving
/// waiters, a release by another thread in unchecked mode) takes the slow path. Acquire
/// ordering on every way of taking the lock (including claiming a hand-over) and release
/// ordering on every way of giving it up (including handing it over) make the protected
/// writes visible to the next owner on x86 and arm64 alike (and tell ThreadSanitizer so).
///
/// The words (``wordsSize`` bytes: `word`, `handOff`, `takeBackWake`, `depth`) live
/// wherever the owner puts them, 8-byte aligned and at a stable address: inside the owning
/// object (``Lock``, ``LockedValue``...) or in a heap block (`init()`).
@usableFromInline
struct FutexLock {
  /// The start of the words.
  @usableFromInline
  let base: UnsafeMutableRawPointer

  /// The lock word: state and owner (see the type's table). Only ever accessed as a whole,
  /// through 64-bit atomics; the kernel reads its low half (`futexWord`).
  @inlinable
  var word: UnsafeMutablePointer<UInt64> { base.assumingMemoryBound(to: UInt64.self) }
  /// The low 32 bits of `word`, for the futex calls only (never through Swift atomics).
  @inlinable
  var futexWord: UnsafeMutablePointer<UInt32> { base.assumingMemoryBound(to: UInt32.self) }
  /// The starving waiters' wake-up counter: bumped by each hand-over, slept on by them.
  @inlinable
  var handOff: UnsafeMutablePointer<UInt32> { (base + 8).assumingMemoryBound(to: UInt32.self) }
  /// When a taken-back hand-over last woke a sleeper on the lock word (``takeBackWakeNow``'s
  /// units; see ``takeBackHandOver()``).
  @inlinable
  var takeBackWake: UnsafeMutablePointer<UInt32> { (base + 12).assumingMemoryBound(to: UInt32.self) }
  /// Recursion depth, used by ``RecursiveLock`` and `synchronized` only; touched by the
  /// holder only. (``SpinLock`` counts its waiters here instead.)
  @inlinable
  var depth: UnsafeMutablePointer<Int> { (base + 16).assumingMemoryBound(to: Int.self) }

  /// The words' storage inside an owning object: a stored property of this type placed
  /// first in the object, reached only through ``init(inside:)``.
  @usableFromInline
  struct Words {
    @usableFromInline
    var word: UInt64 = 0
    @usableFromInline
    var handOff: UInt32 = 0
    @usableFromInline
    var takeBackWake: UInt32 = 0
    @usableFromInline
    var depth: Int = 0
    @usableFromInline
    init() {}
  }

  /// The bytes the words take (8-byte aligned); whatever follows them shares their cache
  /// line (``LockedValue`` keeps its wait words and its value there).
  @inlinable
  static var wordsSize: Int { 24 }

  /// Lock state values, the starving count's unit and mask, and the owner's place (see
  /// the type's table).
  @usableFromInline
  static var lockBits: UInt64 { 3 }
  @usableFromInline
  static var handedOver: UInt64 { 3 }
  @usableFromInline
  static var starvingUnit: UInt64 { 4 }
  @usableFromInline
  static var starvingMask: UInt64 { 0xFFFC }
  /// The most starving waiters the word counts; a waiter past the threshold beyond them
  /// stays an ordinary sleeper until a slot frees (16,383 threads waiting for one lock).
  @usableFromInline
  static var maxStarving: UInt64 { starvingMask >> 2 }
  /// The state bits (lock bits and starving count), below the owner.
  @usableFromInline
  static var stateMask: UInt64 { 0xFFFF }
  @usableFromInline
  static var ownerShift: UInt64 { 16 }

  /// `tag` placed in the owner bits.
  @inlinable
  @inline(__always)
  static func ownerBits(_ tag: UInt64) -> UInt64 { tag &<< ownerShift }

  /// The word of a lock the calling thread holds with nobody sleeping or starving: what an
  /// uncontended acquire writes and an uncontended release expects.
  @inlinable
  @inline(__always)
  static var heldByCurrentThread: UInt64 { 1 | ownerBits(currentThreadTag()) }

  /// How long a waiter sleeps without getting the lock before it counts as starving and
  /// the lock switches to hand-over (about 1 ms, as Go's `sync.Mutex`). About 31,700 years,
  /// so never reached, while a benchmark has turned ``LockBenchmarkSwitches/handOverBound``
  /// off. Read only by a waiter that has just slept.
  @usableFromInline
  static var starvationThreshold: Duration {
    handOverBoundSwitch.load(ordering: .relaxed) ? .milliseconds(1) : .seconds(1_000_000_000_000)
  }

  /// Called with the lock's words by a starving waiter just before it reads the hand-over
  /// counter to go to sleep: the window in which a whole hand-over (and its take-back) can
  /// pass unseen. Tests set it, before starting any thread, to make that interleaving
  /// happen; nil otherwise (one load on a path that is about to sleep in the kernel).
  nonisolated(unsafe) static var beforeStarvingSleep: ((UnsafeMutableRawPointer) -> Void)?

  /// Called with the lock's words by a starving waiter whose deadline passed, just before
  /// it leaves the starving count (``leaveStarving(owner:)``): the window in which a
  /// hand-over to it can be taken back. Tests set it as ``beforeStarvingSleep``; nil
  /// otherwise (one load on a path that is giving up).
  nonisolated(unsafe) static var beforeLeavingStarving: ((UnsafeMutableRawPointer) -> Void)?

  /// Allocates a 64-byte, 64-aligned heap block for the words (its own cache line); the
  /// owner frees it with ``deallocate(typeName:)``.
  init() {
    self.init(wordsAt: UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64))
  }

  /// Uses the first ``wordsSize`` bytes of `block` (8-byte aligned, stable, owned by the
  /// caller, who frees it after ``checkNotHeld(typeName:)``).
  init(wordsAt block: UnsafeMutableRawPointer) {
    block.initializeMemory(as: Words.self, repeating: Words(), count: 1)
    base = block
  }

  /// The lock whose words ``init(wordsAt:)`` already initialized at the start of `block`.
  @inlinable
  init(existingWordsAt block: UnsafeMutableRawPointer) {
    base = block
  }

  /// The lock whose words are the first stored property of `object`, a `final` class with
  /// no superclass: a `Words` value initialized when the object was. Swift lays out a
  /// class's stored properties in declaration order after the object header, so the first
  /// one starts at the address `_getUnsafePointerToStoredProperties` gives (the technique
  /// of swift-atomics' `ManagedAtomic`); the words are then only ever reached through
  /// atomics at that address, never through the property. The object's lifetime covers
  /// every use: each caller holds a reference to it.
  @inlinable
  @inline(__always)
  init(inside object: AnyObject) {
    base = _getUnsafePointerToStoredProperties(object)
  }

  /// Frees the block allocated by `init()`. The owning object calls this from `deinit`.
  func deallocate(typeName: String) {
    checkNotHeld(typeName: typeName)
    base.deallocate()
  }

  /// Stops the process if the lock is held: a lock destroyed while held means some thread
  /// still thinks it owns it.
  @usableFromInline
  func checkNotHeld(typeName: String) {
    // The lock bits only: a starving count can remain in the child of a fork, counting
    // waiters that do not exist there.
    if UInt64.atomicLoad(at: word, ordering: .relaxed) & Self.lockBits != 0 {
      reportMisuse(typeName, "deinitialized while locked")
    }
  }

  /// The holder's thread tag, or 0.
  @inlinable
  var ownerTag: UInt64 { UInt64.atomicLoad(at: word, ordering: .relaxed) &>> Self.ownerShift }

  /// Whether the calling thread holds the lock.
  @inlinable
  var isHeldByCurrentThread: Bool { ownerTag == currentThreadTag() }

  /// One attempt, never blocks.
  @inlinable
  @inline(__always)
  func tryAcquire() -> Bool {
    UInt64.atomicCompareAndSwap(expected: 0, desired: Self.heldByCurrentThread, at: word, ordering: .acquiring)
  }

  /// One attempt for `tryLock()`: as ``tryAcquire()``, and also takes a free lock whose
  /// word still counts starving waiters (after a hand-over nobody was woken for; in a
  /// forked child, waiters that do not exist there).
  @inlinable
  @inline(__always)
  func tryAcquireFree() -> Bool {
    tryAcquire() || tryAcquireCounted()
  }

  @usableFromInline
  func tryAcquireCounted() -> Bool {
    let current = UInt64.atomicLoad(at: word, ordering: .relaxed)
    // Free: no lock bits, and then no owner either (every release clears it).
    guard current != 0, current & Self.lockBits == 0 else { return false }
    return UInt64.atomicCompareAndSwap(
      expected: current, desired: current | Self.heldByCurrentThread, at: word, ordering: .acquiring)
  }

  /// Acquires, blocking as long as it takes. No deadline is evaluated before the fast path
  /// (`MonotonicInstant.distantFuture` is a global whose accessor the compiler cannot sink
  /// into the slow branch).
  @inlinable
  @inline(__always)
  func acquire(spinRounds: Int, quickPolls: Int = 0, typeName: String) {
    if tryAcquire() { return }
    _ = acquireSlow(before: .distantFuture, spinRounds: spinRounds, quickPolls: quickPolls, typeName: typeName)
  }

  /// Acquires, blocking until `deadline`; returns false if it passed first.
  @inlinable
  @inline(__always)
  func acquire(before deadline: MonotonicInstant, spinRounds: Int, quickPolls: Int = 0, typeName: String) -> Bool {
    if tryAcquire() { return true }
    return acquireSlow(before: deadline, spinRounds: spinRounds, quickPolls: quickPolls, typeName: typeName)
  }

  /// Releases. `checkOwner` verifies the caller holds the lock (checked mode); releasing an
  /// unlocked lock is always detected, because it costs nothing here. Unchecked, a release
  /// by another thread frees the lock on the holder's behalf (it takes the slow path).
  @inlinable
  @inline(__always)
  func release(checkOwner: Bool, typeName: String) {
    // The word says exactly "held by me, nobody sleeping, nobody starving" or this fails.
    if !UInt64.atomicCompareAndSwap(expected: Self.heldByCurrentThread, desired: 0, at: word, ordering: .releasing) {
      releaseSlow(checkOwner: checkOwner, typeName: typeName)
    }
  }

  /// The uncontended release alone: one compare-and-swap "held by me, nobody sleeping,
  /// nobody starving" -> 0 with release ordering; false (nothing changed) when the word says
  /// anything else, and the caller must then call ``releaseSlow(checkOwner:typeName:)``. For
  /// a lock whose slow path needs state the fast path should not load (``Lock``'s checked
  /// flag).
  @inlinable
  @inline(__always)
  func tryReleaseUncontended() -> Bool {
    UInt64.atomicCompareAndSwap(expected: Self.heldByCurrentThread, desired: 0, at: word, ordering: .releasing)
  }

  @usableFromInline
  func releaseMisuse(typeName: String) -> Never {
    let bits = UInt64.atomicLoad(at: word, ordering: .relaxed) & Self.lockBits
    if bits == 0 || bits == Self.handedOver {
      reportMisuse(typeName, "unlock() of a lock that is not locked")
    }
    reportMisuse(typeName, "unlock() from a thread that does not hold the lock")
  }

  @usableFromInline
  @inline(never)
  func releaseSlow(checkOwner: Bool, typeName: String) {
    // The compare-and-swap failed: sleepers (2), starving waiters (count), another thread's
    // release, or not locked at all (0, or 3: handed over, so nobody holds it). Waiters
    // change the word too (marking 2, counting themselves), hence a compare-and-swap loop.
    var current = UInt64.atomicLoad(at: word, ordering: .relaxed)
    if checkOwner, current &>> Self.ownerShift != currentThreadTag() { releaseMisuse(typeName: typeName) }
    while true {
      let bits = current & Self.lockBits
      if bits == 0 || bits == Self.handedOver {
        reportMisuse(typeName, "unlock() of a lock that is not locked")
      }
      // Whatever happens, the owner bits go: handed over or free, nobody owns it.
      let state = current & Self.stateMask
      if state >= Self.starvingUnit {
        // Someone starves: hand the lock over instead of freeing it. Releasing: the
        // claimer's acquiring compare-and-swap reads this value, so it sees our writes.
        let seen = UInt64.atomicCompareExchange(
          expected: current, desired: state | Self.handedOver, at: word, ordering: .releasing)
        if seen == current {
          // Bumped after the hand-over is visible (releasing): a starving waiter that reads
          // this value (acquiring) before sleeping then also reads the hand-over and claims
          // it instead; one that read the old value has its futex wait refused or woken.
          // The object's lifetime covers this: our caller holds a reference to it.
          _ = UInt32.atomicFetchAdd(1, at: handOff, ordering: .releasing)
          if Futex.wake(handOff, count: 1) == 0 { takeBackHandOver() }
          return
        }
        current = seen
      } else {
        let seen = UInt64.atomicCompareExchange(expected: current, desired: 0, at: word, ordering: .releasing)
        if seen == current {
          if bits == 2 { Futex.wake(futexWord, count: 1) }
          return
        }
        current = seen
      }
    }
  }

  /// A hand-over whose wake-up woke nobody: the starving waiters are running (about to
  /// sleep, woken but not yet on a processor, or giving up), or they do not exist (the child
  /// of a fork, where only the forking thread lives). Frees the lock instead, if no starving
  /// waiter claimed it meanwhile: a running starving waiter finds the counter bumped, so it
  /// does not sleep, and takes the free lock.
  ///
  /// It need not wake a sleeper on the lock word, though the hand-over dropped the word's
  /// "someone may sleep" state, because a starving waiter stands in for that wake-up: the
  /// count is at least one while the word says handed over (a starving waiter leaves it
  /// only by claiming the hand-over or, with its deadline passed, by
  /// ``leaveStarving(owner:)``), and each counted waiter either takes the lock marked
  /// "sleepers" (2), so the release that ends the starving phase wakes one, or leaves the
  /// count and wakes one itself. So it wakes one at most once a millisecond (``takeBackWake``),
  /// enough for sleepers to wake, find they have waited past the threshold and count
  /// themselves as starving while the phase lasts. Waking one at every take-back was the
  /// cost of the bound with many more threads than processors: a woken starving waiter that
  /// waits for a processor makes every release meanwhile a hand-over that wakes nobody, and
  /// each such release woke a sleeper that then competed for the processors with the
  /// starving waiter (64 threads on 2 CPUs: 2.2x the time per acquisition of the lock without
  /// the bound, 1.1x without those wake-ups). In the child of a fork the count may stand for
  /// waiters that do not exist there, so a forked child (or a process whose fork handler
  /// could not be registered) wakes a sleeper at every take-back as a plain release would,
  /// and the lock keeps working (its count of absent waiters only keeps it on the slow
  /// paths).
  @usableFromInline
  func takeBackHandOver() {
    var current = UInt64.atomicLoad(at: word, ordering: .relaxed)
    while current & Self.lockBits == Self.handedOver {
      // Releasing, as any release: the next owner reads it. (A handed-over word has no
      // owner bits.)
      let seen = UInt64.atomicCompareExchange(
        expected: current, desired: current & ~Self.lockBits, at: word, ordering: .releasing)
      if seen == current {
        if Self.starvingCountMayBeStale {
          Futex.wake(futexWord, count: 1)
          return
        }
        if Self.claimTakeBackWake(takeBackWake) { Futex.wake(futexWord, count: 1) }
        return
      }
      current = seen
    }
  }

  /// The monotonic clock in the units of a take-back stamp: 2^20 ns (about 1 ms), truncated
  /// to 32 bits (wrapping every 52 days, which the stamp's subtraction tolerates).
  static var takeBackWakeNow: UInt32 { UInt32(truncatingIfNeeded: MonotonicInstant.now.nanoseconds &>> 20) }

  /// Whether a take-back may wake a sleeper now: true, recording now in `stamp`, unless
  /// `stamp` says a take-back of the same lock already woke one in the current unit of
  /// ``takeBackWakeNow`` (``FutexLock`` and ``ReadWriteLock`` each keep a stamp in their
  /// words). Relaxed: the stamp orders nothing; two releases racing here may both wake one,
  /// or a stale read skip one, which both locks' take-backs allow: the wake-up is spare, a
  /// starving waiter stands in for it.
  static func claimTakeBackWake(_ stamp: UnsafeMutablePointer<UInt32>) -> Bool {
    let now = takeBackWakeNow
    guard now &- UInt32.atomicLoad(at: stamp, ordering: .relaxed) >= 1 else { return false }
    UInt32.atomicStore(now, at: stamp, ordering: .relaxed)
    return true
  }

  /// Whether a starving count may stand for waiters that do not exist: in the child of a
  /// fork (the flag is set by a fork handler registered when the toolkit loads, before any
  /// thread can fork), or when that handler could not be registered.
  @usableFromInline
  static var starvingCountMayBeStale: Bool {
    tk_diagnostics_fork_handler_status() != 0 || tk_diagnostics_in_forked_child() != 0
  }

  @usableFromInline
  @inline(never)
  func acquireSlow(before deadline: MonotonicInstant, spinRounds: Int, quickPolls: Int = 0, typeName: String) -> Bool {
    let me = currentThreadTag()
    if ownerTag == me {
      reportMisuse(
        typeName, "lock() by the thread that already holds it (self-deadlock); use RecursiveLock to re-acquire")
    }
    let mine = Self.ownerBits(me)
    // Bounded spinning: poll with exponential backoff while the lock is held; a holder about
    // to leave hands over without a system call. Never unbounded.
    var current = spin(spinRounds, quickPolls: quickPolls)
    // Whether this thread has slept (then it must take a free lock with 2: it cannot know
    // whether others sleep), since when, and whether it counts itself as starving.
    var slept = false
    var firstSleep = MonotonicInstant.distantPast
    var starving = false
    var becomeStarving = false
    // One more spin before the first sleep (see below).
    var mayRespin = true
    while true {
      let bits = current & Self.lockBits
      if bits == 0 {
        // Free (so no owner bits). While someone starves, only after a hand-over nobody
        // was woken for (see `takeBackHandOver`); a starving waiter that takes it leaves
        // the count. A thread that has not slept may take it with 1 even if others sleep:
        // the release that freed it has already woken one of them, which re-marks the
        // word 2.
        let desired = (starving ? (current - Self.starvingUnit) | 2 : current | (slept ? 2 : 1)) | mine
        let seen = UInt64.atomicCompareExchange(expected: current, desired: desired, at: word, ordering: .acquiring)
        if seen == current { return true }
        current = seen
        continue
      }
      if bits == Self.handedOver, starving {
        // Claim the hand-over: locked with sleepers possible, one starving waiter fewer.
        // Acquiring: reads the releasing hand-over, so the previous holder's writes are
        // visible.
        let seen = UInt64.atomicCompareExchange(
          expected: current, desired: (current - Self.starvingUnit - 1) | mine, at: word, ordering: .acquiring)
        if seen == current { return true }
        current = seen
        continue
      }
      // Locked, and this thread has not slept yet: it lost the race for the free lock its
      // spin saw (or the spin ran out). Spin once more rather than sleep: the lock is being
      // passed around in user space, and a thread that sleeps now pays a futex wait (which
      // mostly returns at once, the word having changed) and, having slept, takes the lock
      // marked "sleepers", so its release makes a futex wake for nobody. Not while a hand-over
      // is pending or someone starves (the spin stops at once then anyway), and not past
      // the caller's deadline.
      if mayRespin, !slept, current & Self.stateMask < Self.handedOver,
        deadline == .distantFuture || !deadline.hasPassed
      {
        mayRespin = false
        current = spin(spinRounds, quickPolls: quickPolls)
        continue
      }
      // Locked: make sure the word says "sleepers" (1 -> 2) and counts us once we starve
      // (unless the count is full: then we stay an ordinary sleeper). Marked before giving
      // up too: a thread woken by a release may have consumed the wake-up meant for the
      // sleepers, so it must leave the word saying "wake one".
      var desired = bits == 1 ? current + 1 : current
      if becomeStarving {
        if current & Self.starvingMask != Self.starvingMask {
          desired += Self.starvingUnit
        } else {
          becomeStarving = false
        }
      }
      if desired != current {
        let seen = UInt64.atomicCompareExchange(expected: current, desired: desired, at: word, ordering: .relaxed)
        if seen != current {
          current = seen
          continue
        }
        current = desired
        if becomeStarving {
          starving = true
          becomeStarving = false
        }
      }
      if deadline != .distantFuture, deadline.hasPassed {
        if starving {
          if let hook = Self.beforeLeavingStarving { hook(base) }
          return leaveStarving(owner: me)
        }
        // Our 2 may remain in the word: the next unlock makes one spare wake.
        return false
      }
      if !slept {
        slept = true
        firstSleep = .now
      }
      if starving {
        // Sleep on the hand-over counter: read it (acquiring) before re-reading the state,
        // so a hand-over made after the state read is seen through the counter (see
        // `releaseSlow`). Sleep only while the lock is held: a hand-over that woke nobody
        // may already have been taken back (`takeBackHandOver`), leaving the lock free and
        // the counter at the value just read; sleeping then would wait for a release that
        // may never come. Handed over or free, go round and claim or take it.
        if let hook = Self.beforeStarvingSleep { hook(base) }
        let sequence = UInt32.atomicLoad(at: handOff, ordering: .acquiring)
        current = UInt64.atomicLoad(at: word, ordering: .relaxed)
        let seenBits = current & Self.lockBits
        if seenBits == Self.handedOver || seenBits == 0 { continue }
        _ = Futex.wait(handOff, expected: sequence, deadline: deadline)
        current = UInt64.atomicLoad(at: word, ordering: .relaxed)
      } else {
        // Untimed (but for the caller's deadline): a timed sleep would count a waiter as
        // starving even when no release wakes it, but arming the timer costs on every sleep
        // (a one-CPU condition hand-off takes 20 us instead of 8 on a KVM guest). The kernel
        // compares the word's low half, owner bits 16-31 included: a new owner since
        // `current` was read refuses the sleep, and the loop looks again.
        _ = Futex.wait(futexWord, expected: UInt32(truncatingIfNeeded: current), deadline: deadline)
        if MonotonicInstant.now - firstSleep >= Self.starvationThreshold { becomeStarving = true }
        current = spin(spinRounds, quickPolls: quickPolls)
      }
    }
  }

  /// A starving waiter whose deadline passed: takes itself out of the starving count, or
  /// claims the lock if it was handed over meanwhile (then it returns true: acquired).
  ///
  /// Leaving without the lock, it wakes one sleeper on the lock word: a hand-over taken back
  /// while it was counted woke nobody (``takeBackHandOver()``), counting on it to take the
  /// lock marked "sleepers", and the lock may now be free, or held by a thread that took it
  /// without that mark. A sleeper woken while the lock is held marks the word and sleeps
  /// again, so the wake-up is never lost and at worst spare.
  @usableFromInline
  func leaveStarving(owner me: UInt64) -> Bool {
    var current = UInt64.atomicLoad(at: word, ordering: .relaxed)
    while true {
      let bits = current & Self.lockBits
      let claim = bits == Self.handedOver
      let desired = claim ? (current - Self.starvingUnit - 1) | Self.ownerBits(me) : current - Self.starvingUnit
      // Acquiring for the claim (it reads the releasing hand-over); nothing is published by
      // merely leaving.
      let seen = UInt64.atomicCompareExchange(
        expected: current, desired: desired, at: word, ordering: claim ? .acquiring : .relaxed)
      if seen == current {
        if !claim { Futex.wake(futexWord, count: 1) }
        return claim
      }
      current = seen
    }
  }
}

extension FutexLock {
  /// The backoff round a contended waiter's spin starts at (``Backoff/pause(_:)`` of round
  /// 5 is 32 pauses; see ``spin(_:)``).
  @usableFromInline
  static var firstSpinRound: Int { 5 }

  /// Polls the lock word while it is held, sleepers or not, in up to `rounds` rounds of
  /// exponential backoff starting at ``firstSpinRound`` (``Backoff/pause(_:)``: 32, then 64
  /// `pause` instructions between polls); returns the last value seen.
  ///
  /// Few polls, spread out: every poll pulls the lock's cache line to this core, and the
  /// holder's next lock or unlock must then take it back, and a waiter that takes the lock
  /// the moment it is free makes every acquisition move the line between cores. Waiting 32
  /// pauses before the second poll lets the holder run several of its acquisitions on an
  /// unshared line before a waiter takes its turn, which is why a contended lock runs at a
  /// fraction of the time per acquisition of one whose waiters pounce (the price is paid in
  /// fairness, which the hand-over rule bounds). Measured in `cost-tables` on a 2-vCPU
  /// Intel Xeon VM (`contention.scaling-*`, three runs each, against pthread and `NSLock`):
  /// polling after every `pause` (100 polls) ran two contending threads at 1.2-1.8x
  /// pthread's time per acquisition; 8 rounds from the first (9 polls over 191 pauses) ran
  /// 2-64 threads at 0.5-1.2x without private work between acquisitions and 0.7-1.5x with
  /// it; 6 rounds from the sixth (7 polls over 352 pauses) at 0.3-0.7x and 0.5-0.7x.
  /// Starting at the fourth or fifth round measured between the two; 4 rounds from the sixth
  /// much as 6. One scenario measured slower with it in 20-ms samples: 32 threads in bursts
  /// with idle gaps between (waiters that poll less often sleep more), a row that one
  /// scheduler stall inside a burst could decide; in 200-ms samples `Lock`, `LockedValue`
  /// and `RecursiveLock` take 0.93-1.10x their peers' time there. The slow samples of one thread
  /// taking the lock back-to-back beside 32 that do private work between acquisitions are
  /// the scheduler's, not the spin's or the hand-over rule's: with 33 runnable threads on 2
  /// CPUs a thread that sleeps once or is preempted once waits about 20 ms for a CPU (the
  /// whole of a 20-ms sample), under a pthread mutex and `NSLock` as under this lock, and as
  /// often with the bound switched off as with it on (Benchmarks/MEASUREMENTS.md).
  ///
  /// Polling on while others sleep lets a thread whose critical sections alternate with
  /// private work take the lock in user space instead of joining the sleepers
  /// (`contention.scaling-with-work-*`). It stops at once while the lock is being handed to
  /// starving waiters (bits 3 or a starving count): the word cannot become free then, so
  /// polling could only lose.
  ///
  /// A waiter that saw the lock free but lost the compare-and-swap to another thread spins
  /// once more before its first sleep (``acquireSlow(before:spinRounds:quickPolls:typeName:)``).
  /// Without that, two threads alternating critical sections with private work sent one
  /// slow-path acquisition in ten to the futex (a wait that returned at once, then a wake
  /// for nobody at its release: 72,000 futex calls in 8.9 million acquisitions, on a 2-vCPU
  /// AMD EPYC VM). With it, on that VM, `Lock`'s time per acquisition went from 56-61 ns to
  /// 51-53 ns at 2-64 threads with private work between acquisitions, and from 8.1-9.4 ns
  /// to 7.3-8.4 ns back-to-back (`contention.scaling-*`, medians of two or three runs);
  /// longest waits and the bursts rows did not change beyond their spread.
  ///
  /// `quickPolls` polls one `pause` apart come first (``LockedValue`` asks for two): a lock
  /// whose value shares the word's line gains from taking it the moment a short critical
  /// section ends, because the line it pulls is the one it needs next anyway. Measured in
  /// `cost-tables` on the 2-vCPU AMD EPYC VM (`contention.scaling-*`, medians of three
  /// processes, two batches): two quick polls brought `LockedValue` with private work between
  /// acquisitions from 36.2-39.4 ns to 31.3-36.0 ns at 2-64 threads
  /// (`Synchronization.Mutex<Int>` 33.4-39.0 ns at 2 and 4), and cost it 7.7 ns to 9.6 ns at
  /// two threads back-to-back (8.5-10.8 ns at 4-64; its peers 26-37 ns). One quick poll,
  /// or two polls two `pause`s apart, gained less; for ``Lock`` and ``SpinLock``, whose
  /// callers keep their data on another line, the same two polls made private work slower
  /// (50.8-59.0 ns against 48.3-52.0 ns for `Lock`): a waiter that pulls the word away
  /// makes the holder fetch it back while its other line is still moving.
  @usableFromInline
  func spin(_ rounds: Int, quickPolls: Int = 0) -> UInt64 {
    var quick = quickPolls
    while quick > 0 {
      let current = UInt64.atomicLoad(at: word, ordering: .relaxed)
      if current == 0 || current & Self.stateMask >= Self.handedOver { return current }
      tk_cpu_relax()
      quick -= 1
    }
    return Backoff.poll(rounds: rounds, firstRound: Self.firstSpinRound) {
      UInt64.atomicLoad(at: word, ordering: .relaxed)
    } while: { current in
      current != 0 && current & Self.stateMask < Self.handedOver
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

  /// The bounded spin of the futex locks: reads `load()`, and while `keepWaiting` holds for
  /// the value read, pauses (``pause(_:)`` of rounds `firstRound`, `firstRound + 1` ...: 1,
  /// 2, 4 ... 64 `pause` instructions from round 0) and reads again, at most `rounds` times;
  /// returns the last value read (`rounds + 1` reads at most). Polls are spread out
  /// because every poll pulls the polled cache line to this core, away from the thread that
  /// holds the lock (see ``FutexLock/spin(_:)``).
  @inline(__always)
  static func poll<Value>(rounds: Int, firstRound: Int = 0, _ load: () -> Value, while keepWaiting: (Value) -> Bool)
    -> Value
  {
    var round = 0
    while true {
      let value = load()
      if round >= rounds || !keepWaiting(value) { return value }
      pause(round + firstRound)
      round += 1
    }
  }
}
