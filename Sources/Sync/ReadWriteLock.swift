/// A lock that lets many readers in at once, or one writer alone: the guide's read-write
/// lock (`pthread_rwlock_t`), on a Linux futex.
///
/// **Writers are not starved.** While a writer waits, new readers wait too (the guide's
/// rule), so a steady stream of readers cannot lock a writer out. That also means a thread
/// holding a read lock must not take it again for reading while a writer may be waiting:
/// read locks are not recursive (the second `readLock()` would wait behind the writer, which
/// waits behind the first).
///
/// **Fairness among writers: a bounded wait.** Normally a releasing writer may take the
/// lock again before a woken writer runs (barging). Once a writer has slept about 1 ms
/// without getting the lock, it counts as starving, and from then on each release (by a
/// writer, or by the last reader) hands the write lock directly to a starving writer instead
/// of freeing it, so nobody barges in, until no writer starves. Readers are not covered by
/// this bound: under the writer preference above, a continuous stream of writers still holds
/// new readers back. The cost is paid only while a writer starves: one wake-up per
/// hand-over that the next writer must be scheduled for.
///
/// **Cost.** Uncontended, a read lock is one compare-and-swap and its release one atomic
/// subtraction; the write lock is one compare-and-swap each way. A contended acquisition
/// spins briefly, then sleeps in the kernel.
///
/// **Misuse** stops the process with a message, never undefined behaviour: `unlock()` when no
/// lock is held, taking the write lock (or a read lock) while holding the write lock, and
/// unlocking the write lock from another thread. (A read lock is not tagged with its thread,
/// so one reader releasing on behalf of another is not detected.)
///
/// Timed acquisition uses the monotonic clock. The `Locking` surface (`lock()`,
/// `withLock`...) takes the *write* lock.
///
/// ```swift
/// let lock = ReadWriteLock()
/// var table: [String: Int] = [:]            // protected by `lock`
/// let hits = lock.withReadLock { table["a"] }
/// lock.withWriteLock { table["a", default: 0] += 1 }
/// ```
///
/// The corresponding C functions are `pthread_rwlock_rdlock`, `pthread_rwlock_wrlock`,
/// `pthread_rwlock_clockrdlock`, `pthread_rwlock_clockwrlock`, `pthread_rwlock_tryrdlock`,
/// `pthread_rwlock_trywrlock` and `pthread_rwlock_unlock` with the kind
/// `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`; `ReadWriteLock` replaces them with `futex`.
public final class ReadWriteLock: Locking, @unchecked Sendable {
  // @unchecked: all state is in three words accessed only through atomics and the futex.
  //
  // The algorithm is the writer-preferring futex read-write lock of Rust's standard library.
  // `state` holds, in its low 30 bits, the number of readers, or `writeLocked` (all ones)
  // while a writer holds it; bit 30 says readers sleep on `state`; bit 31 says writers
  // sleep on `writerNotify`, a counter bumped before each writer wake-up so a writer about to
  // sleep cannot miss it.
  //
  // | state                          | meaning                                     |
  // |--------------------------------|---------------------------------------------|
  // | 0                              | free                                        |
  // | n (1 ... maxReaders)           | n readers                                   |
  // | writeLocked                    | one writer                                  |
  // | + readersWaiting               | readers asleep on `state`                   |
  // | + writersWaiting               | writers asleep on `writerNotify`; new readers queue |
  //
  // Acquisitions use acquire ordering and releases release ordering on `state`, which is what
  // makes the protected data visible to the next holder (and tells ThreadSanitizer so).
  @usableFromInline
  static let mask: UInt32 = (1 << 30) - 1
  @usableFromInline
  static let writeLocked: UInt32 = mask
  @usableFromInline
  static let maxReaders: UInt32 = mask - 1
  @usableFromInline
  static let readersWaiting: UInt32 = 1 << 30
  @usableFromInline
  static let writersWaiting: UInt32 = 1 << 31

  @usableFromInline
  let state: UnsafeMutablePointer<UInt32>
  @usableFromInline
  let writerNotify: UnsafeMutablePointer<UInt32>
  /// Thread tag of the write holder, 0 when none. Written by the holder only (relaxed); it
  /// serves misuse checks and `unlock()`'s choice between read and write release.
  @usableFromInline
  let writer: UnsafeMutablePointer<UInt64>
  /// The writers' bounded wait: bit 0 says the write lock has been handed over to a starving
  /// writer that has not claimed it yet (`state` stays write-locked meanwhile, so nobody
  /// else gets in); bits 1-15 count the starving writers (``starvingWriter`` each),
  /// writers that have slept ``FutexLock/starvationThreshold`` without getting the lock;
  /// bits 16-31 count hand-overs taken back (see ``handOverToStarvingWriter()``). Starving
  /// writers sleep on this word, so any hand-over, or taking one back, changes the value
  /// they sleep on.
  @usableFromInline
  let fair: UnsafeMutablePointer<UInt32>
  @usableFromInline
  static var handedOver: UInt32 { 1 }
  @usableFromInline
  static var starvingWriter: UInt32 { 2 }
  @usableFromInline
  static var starvingWriters: UInt32 { 0xFFFE }
  @usableFromInline
  static var takenBack: UInt32 { 1 << 16 }

  /// Creates an unlocked, writer-preferring read-write lock.
  public init() {
    let block = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    state = block.bindMemory(to: UInt32.self, capacity: 1)
    state.initialize(to: 0)
    writerNotify = (block + 4).bindMemory(to: UInt32.self, capacity: 1)
    writerNotify.initialize(to: 0)
    writer = (block + 8).bindMemory(to: UInt64.self, capacity: 1)
    writer.initialize(to: 0)
    fair = (block + 16).bindMemory(to: UInt32.self, capacity: 1)
    fair.initialize(to: 0)
  }

  deinit {
    if UInt32.atomicLoad(at: state, ordering: .relaxed) & Self.mask != 0 {
      reportMisuse("ReadWriteLock", "deinitialized while locked")
    }
    UnsafeMutableRawPointer(state).deallocate()
  }

  // MARK: State predicates

  @inlinable
  static func isUnlocked(_ state: UInt32) -> Bool { state & mask == 0 }

  @inlinable
  static func isWriteLocked(_ state: UInt32) -> Bool { state & mask == writeLocked }

  /// Free or read-locked, below the reader limit, and nobody queued (writers first).
  @inlinable
  static func isReadLockable(_ state: UInt32) -> Bool {
    state & mask < maxReaders && state & (readersWaiting | writersWaiting) == 0
  }

  @inlinable
  var writerTag: UInt64 { UInt64.atomicLoad(at: writer, ordering: .relaxed) }

  @usableFromInline
  func refuseIfWriter(_ operation: String) {
    if writerTag == currentThreadTag() {
      reportMisuse("ReadWriteLock", "\(operation) by the thread that holds the write lock (self-deadlock)")
    }
  }

  // MARK: Readers

  /// Takes a shared (read) lock, blocking while a writer holds or waits for the lock.
  /// Stops the process if the calling thread holds the write lock.
  @available(*, noasync, message: "blocks the thread; use withReadLock")
  @inlinable
  public func readLock() {
    if !tryReadLockFast() {
      _ = readLockSlow(before: .distantFuture)
    }
  }

  /// Takes a read lock if possible right now; never blocks. Fails while a writer holds the
  /// lock or waits for it.
  @inlinable
  public func tryReadLock() -> Bool {
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    while Self.isReadLockable(current) {
      let seen = UInt32.atomicCompareExchange(expected: current, desired: current + 1, at: state, ordering: .acquiring)
      if seen == current { return true }
      current = seen
    }
    return false
  }

  /// Takes a read lock, giving up when `deadline` (monotonic clock) passes; returns whether
  /// it was taken. A deadline in the past makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func readLock(before deadline: MonotonicInstant) -> Bool {
    tryReadLockFast() || readLockSlow(before: deadline)
  }

  /// Takes a read lock, waiting at most `timeout` (monotonic clock); returns whether it was
  /// taken. A zero or negative timeout makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func readLock(timeout: Duration) -> Bool {
    tryReadLockFast() || readLockSlow(before: .after(timeout))
  }

  @inlinable
  @inline(__always)
  func tryReadLockFast() -> Bool {
    let current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    return Self.isReadLockable(current)
      && UInt32.atomicCompareAndSwap(expected: current, desired: current + 1, at: state, ordering: .acquiring)
  }

  @usableFromInline
  func readLockSlow(before deadline: MonotonicInstant) -> Bool {
    refuseIfWriter("readLock()")
    var current = spin()
    while true {
      if Self.isReadLockable(current) {
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current + 1, at: state, ordering: .acquiring)
        if seen == current { return true }
        current = seen
        continue
      }
      if current & Self.mask == Self.maxReaders {
        reportMisuse("ReadWriteLock", "too many read locks held (\(Self.maxReaders)); are read locks leaking?")
      }
      // Announce a sleeping reader before sleeping, so the releasing side wakes us.
      if current & Self.readersWaiting == 0 {
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current | Self.readersWaiting, at: state, ordering: .relaxed)
        if seen != current {
          current = seen
          continue
        }
      }
      if deadline != .distantFuture, deadline.hasPassed { return false }
      if !Futex.wait(state, expected: current | Self.readersWaiting, deadline: deadline) { return false }
      current = spin()
    }
  }

  // MARK: Writers

  /// Takes the exclusive (write) lock, blocking while anyone holds the lock. Stops the process
  /// if the calling thread already holds the write lock.
  @available(*, noasync, message: "blocks the thread; use withWriteLock")
  @inlinable
  public func writeLock() {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: Self.writeLocked, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
    } else {
      _ = writeLockSlow(before: .distantFuture)
    }
  }

  /// Takes the write lock if the lock is free right now; never blocks.
  @inlinable
  public func tryWriteLock() -> Bool {
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    while Self.isUnlocked(current) {
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: current | Self.writeLocked, at: state, ordering: .acquiring)
      if seen == current {
        UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
        return true
      }
      current = seen
    }
    return false
  }

  /// Takes the write lock, giving up when `deadline` (monotonic clock) passes; returns
  /// whether it was taken. A deadline in the past makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func writeLock(before deadline: MonotonicInstant) -> Bool {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: Self.writeLocked, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
      return true
    }
    return writeLockSlow(before: deadline)
  }

  /// Takes the write lock, waiting at most `timeout` (monotonic clock); returns whether it
  /// was taken. A zero or negative timeout makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func writeLock(timeout: Duration) -> Bool {
    writeLock(before: .after(timeout))
  }

  @usableFromInline
  func writeLockSlow(before deadline: MonotonicInstant) -> Bool {
    refuseIfWriter("writeLock()")
    let me = currentThreadTag()
    var current = spin()
    // Once this writer has slept, other writers may be asleep too: keep their bit when
    // taking the lock so the release wakes the next one.
    var otherWritersWaiting: UInt32 = 0
    var firstSleep = MonotonicInstant.distantPast
    var starving = false
    while true {
      if Self.isUnlocked(current) {
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current | Self.writeLocked | otherWritersWaiting, at: state,
          ordering: .acquiring)
        if seen == current {
          // Took a free lock (so no hand-over is pending: that keeps the lock write-locked).
          if starving { _ = UInt32.atomicFetchAdd(0 &- Self.starvingWriter, at: fair, ordering: .relaxed) }
          UInt64.atomicStore(me, at: writer, ordering: .relaxed)
          return true
        }
        current = seen
        continue
      }
      if starving {
        // Claim a hand-over, or sleep on `fair` until one (or a free lock) comes.
        let observed = UInt32.atomicLoad(at: fair, ordering: .acquiring)
        if observed & Self.handedOver != 0 {
          // Acquiring: reads the releasing hand-over, so the previous holder's writes are
          // visible.
          if UInt32.atomicCompareAndSwap(
            expected: observed, desired: observed - Self.starvingWriter - Self.handedOver, at: fair,
            ordering: .acquiring)
          {
            UInt64.atomicStore(me, at: writer, ordering: .relaxed)
            return true
          }
          continue
        }
        current = UInt32.atomicLoad(at: state, ordering: .relaxed)
        if Self.isUnlocked(current) { continue }
        if deadline != .distantFuture, deadline.hasPassed { return leaveStarving(owner: me) }
        // Every release that frees or hands over the lock while writers starve changes
        // `fair` (see `wakeWriterOrReaders`), so this sleep cannot miss it.
        _ = Futex.wait(fair, expected: observed, deadline: deadline)
        current = UInt32.atomicLoad(at: state, ordering: .relaxed)
        continue
      }
      if current & Self.writersWaiting == 0 {
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current | Self.writersWaiting, at: state, ordering: .relaxed)
        if seen != current {
          current = seen
          continue
        }
      }
      otherWritersWaiting = Self.writersWaiting
      // Read the notification counter before re-checking the state: a release between the
      // two bumps the counter, and the futex then refuses to sleep.
      let sequence = UInt32.atomicLoad(at: writerNotify, ordering: .acquiring)
      current = UInt32.atomicLoad(at: state, ordering: .relaxed)
      if Self.isUnlocked(current) || current & Self.writersWaiting == 0 { continue }
      if deadline != .distantFuture, deadline.hasPassed { return false }
      if firstSleep == .distantPast { firstSleep = .now }
      if !Futex.wait(writerNotify, expected: sequence, deadline: deadline) { return false }
      if MonotonicInstant.now - firstSleep >= FutexLock.starvationThreshold {
        // Count ourselves, then announce a sleeping writer with a read-modify-write of the
        // state (full: releasing our count to any release that reads this state or a later
        // one, see `wakeWriterOrReaders`); from now on we sleep on `fair`.
        _ = UInt32.atomicFetchAdd(Self.starvingWriter, at: fair, ordering: .relaxed)
        current = UInt32.atomicFetchOr(Self.writersWaiting, at: state, ordering: .full) | Self.writersWaiting
        starving = true
        continue
      }
      current = spin()
    }
  }

  /// A starving writer whose deadline passed: takes itself out of the count, or claims the
  /// write lock if it was handed over meanwhile (then returns true: acquired).
  @usableFromInline
  func leaveStarving(owner me: UInt64) -> Bool {
    var observed = UInt32.atomicLoad(at: fair, ordering: .relaxed)
    while true {
      let claim = observed & Self.handedOver != 0
      let desired = observed - Self.starvingWriter - (claim ? Self.handedOver : 0)
      let seen = UInt32.atomicCompareExchange(
        expected: observed, desired: desired, at: fair, ordering: claim ? .acquiring : .relaxed)
      if seen == observed {
        if claim { UInt64.atomicStore(me, at: writer, ordering: .relaxed) }
        return claim
      }
      observed = seen
    }
  }

  // MARK: Releasing

  /// Releases the lock the calling thread holds: the write lock if it holds that, otherwise
  /// one read lock. Stops the process if no lock is held, or if the write lock is held by
  /// another thread.
  @inlinable
  public func unlock() {
    if writerTag == currentThreadTag() {
      UInt64.atomicStore(0, at: writer, ordering: .relaxed)
      // Nobody waiting: one compare-and-swap, as uncontended as the acquisition.
      if !UInt32.atomicCompareAndSwap(expected: Self.writeLocked, desired: 0, at: state, ordering: .releasing) {
        writeUnlockSlow()
      }
    } else {
      let previous = UInt32.atomicFetchAdd(0 &- 1, at: state, ordering: .releasing)
      if previous & Self.mask == 0 || previous & Self.mask == Self.writeLocked {
        unlockMisuse(previous)
      }
      let now = previous &- 1
      if Self.isUnlocked(now), now & Self.writersWaiting != 0 { wakeWriterOrReaders(now) }
    }
  }

  /// The write holder's release while someone sleeps: hands the lock to a starving writer if
  /// there is one, else frees it and wakes the next.
  @usableFromInline
  @inline(never)
  func writeUnlockSlow() {
    // Acquiring: our compare-and-swap failed on a sleeper's bit; reading the state again
    // (acquiring) makes a starving writer's count, released with its announcement, visible.
    _ = UInt32.atomicLoad(at: state, ordering: .acquiring)
    if UInt32.atomicLoad(at: fair, ordering: .relaxed) & Self.starvingWriters != 0 {
      if !handOverToStarvingWriter() { releaseAfterTakeBack() }
      return
    }
    let previous = UInt32.atomicFetchAdd(0 &- Self.writeLocked, at: state, ordering: .full)
    let now = previous &- Self.writeLocked
    if now & (Self.readersWaiting | Self.writersWaiting) != 0 { wakeWriterOrReaders(now) }
  }

  /// Frees the write lock the caller holds after a hand-over was taken back (or found no
  /// starving writer left), then lets running starving writers see it: bumps `fair` (full:
  /// after the free), so none sleeps on a value read before, and wakes any that slept since.
  /// A starving writer that reads the bumped value (acquiring) then sees the lock free.
  /// Does not serve starving writers again: they are running, or absent (a forked child).
  @usableFromInline
  func releaseAfterTakeBack() {
    let previous = UInt32.atomicFetchAdd(0 &- Self.writeLocked, at: state, ordering: .full)
    let now = previous &- Self.writeLocked
    _ = UInt32.atomicFetchAdd(Self.takenBack, at: fair, ordering: .full)
    Futex.wake(fair, count: Int32.max)
    if now & (Self.readersWaiting | Self.writersWaiting) != 0 { wakeWriterOrReaders(now, serving: false) }
  }

  /// With the write lock held by the caller (or taken on a starving writer's behalf): marks
  /// it handed over if writers starve, and wakes one; returns whether it did. The state
  /// stays write-locked, so nobody barges in before the starving writer claims it.
  ///
  /// A hand-over whose wake-up woke nobody is taken back (returns false: the caller still
  /// holds the lock and releases it): the starving writers are running (about to sleep, or
  /// giving up), or they do not exist (the child of a fork). Taking back bumps the word's
  /// upper half, so a writer about to sleep on the value it read does not sleep, and sees
  /// the lock the caller then frees.
  @usableFromInline
  func handOverToStarvingWriter() -> Bool {
    var observed = UInt32.atomicLoad(at: fair, ordering: .relaxed)
    while observed & Self.starvingWriters != 0 {
      // Releasing: the claimer's acquiring compare-and-swap reads this value.
      let seen = UInt32.atomicCompareExchange(
        expected: observed, desired: observed | Self.handedOver, at: fair, ordering: .releasing)
      if seen == observed {
        if Futex.wake(fair, count: 1) > 0 { return true }
        var current = observed | Self.handedOver
        while current & Self.handedOver != 0 {
          let back = UInt32.atomicCompareExchange(
            expected: current, desired: (current &+ Self.takenBack) & ~Self.handedOver, at: fair, ordering: .relaxed)
          if back == current { return false }
          current = back
        }
        return true  // claimed meanwhile
      }
      observed = seen
    }
    return false
  }

  /// Called after a release (full ordering) left the lock free with sleepers' bits: if a
  /// writer starves, takes the write lock on its behalf and hands it over (or, when another
  /// thread took the lock first, makes sure that thread's release sees a sleeper's bit and
  /// hands over in its turn). Returns whether a starving writer is taken care of.
  @usableFromInline
  func serveStarvingWriter() -> Bool {
    // Acquiring: synchronizes with a starving writer's announcement (a full read-modify-write
    // of the state earlier in its modification order), so its count is visible below.
    var current = UInt32.atomicLoad(at: state, ordering: .acquiring)
    guard UInt32.atomicLoad(at: fair, ordering: .relaxed) & Self.starvingWriters != 0 else { return false }
    while true {
      if Self.isUnlocked(current) {
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current | Self.writeLocked | Self.writersWaiting, at: state,
          ordering: .full)
        if seen != current {
          current = seen
          continue
        }
        if handOverToStarvingWriter() { return true }
        // The starving writers left (timed out), run, or are absent: release what we took.
        releaseAfterTakeBack()
        return true
      }
      if current & Self.writersWaiting != 0 { return true }
      // Held without a sleeper's bit: set it, so the holder's release takes the slow path.
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: current | Self.writersWaiting, at: state, ordering: .full)
      if seen == current { return true }
      current = seen
    }
  }

  @usableFromInline
  func unlockMisuse(_ previous: UInt32) -> Never {
    if previous & Self.mask == 0 {
      reportMisuse("ReadWriteLock", "unlock() of a lock that is not locked")
    }
    reportMisuse("ReadWriteLock", "unlock() of the write lock from a thread that does not hold it")
  }

  /// Called with the lock free and someone asleep: serves a starving writer if any (unless
  /// `serving` is false: right after a hand-over was taken back), else wakes one writer if
  /// any, else all readers.
  @usableFromInline
  func wakeWriterOrReaders(_ observed: UInt32, serving: Bool = true) {
    if serving, serveStarvingWriter() { return }
    defer {
      // A writer that started starving after the check above announced itself with a full
      // read-modify-write of the state, which the compare-and-swaps below read (full), so
      // its count is visible now: serve it (its sleep on `fair` waits for exactly that).
      if serving { _ = serveStarvingWriter() }
    }
    var current = observed
    if current == Self.writersWaiting {
      let seen = UInt32.atomicCompareExchange(expected: current, desired: 0, at: state, ordering: .full)
      if seen == current {
        wakeWriter()
        return
      }
      current = seen
    }
    if current == Self.readersWaiting | Self.writersWaiting {
      // Hand over to a writer first; the readers' bit stays for the writer's release.
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: Self.readersWaiting, at: state, ordering: .full)
      if seen != current { return }  // someone took the lock; its release wakes the rest
      if wakeWriter() { return }
      // No writer was asleep (it timed out or is about to re-check): wake the readers.
      current = Self.readersWaiting
    }
    if current == Self.readersWaiting {
      if UInt32.atomicCompareAndSwap(expected: current, desired: 0, at: state, ordering: .full) {
        Futex.wake(state, count: Int32.max)
      }
    }
  }

  /// Bumps the writers' counter and wakes one; returns whether a writer was asleep.
  @usableFromInline
  @discardableResult
  func wakeWriter() -> Bool {
    _ = UInt32.atomicFetchAdd(1, at: writerNotify, ordering: .releasing)
    return Futex.wake(writerNotify, count: 1) > 0
  }

  /// Spins briefly while the lock is held and nobody sleeps yet; returns the last state seen.
  @usableFromInline
  func spin() -> UInt32 {
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    var round = 0
    while round < 8 && current & Self.mask != 0 && current & (Self.readersWaiting | Self.writersWaiting) == 0 {
      Backoff.pause(round)
      round += 1
      current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    }
    return current
  }

  // MARK: Scoped forms and Locking

  /// Runs `body` holding a read lock; releases it however `body` exits.
  @inlinable
  public func withReadLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    if !tryReadLockFast() { _ = readLockSlow(before: .distantFuture) }
    defer { unlock() }
    return try body()
  }

  /// Runs `body` holding the write lock; releases it however `body` exits.
  @inlinable
  public func withWriteLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: Self.writeLocked, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
    } else {
      _ = writeLockSlow(before: .distantFuture)
    }
    defer { unlock() }
    return try body()
  }

  /// `Locking` conformance: takes the write lock.
  @available(*, noasync, message: "blocks the thread; use withWriteLock")
  @inlinable
  public func lock() { writeLock() }

  /// `Locking` conformance: tries the write lock.
  @inlinable
  public func tryLock() -> Bool { tryWriteLock() }

  /// `Locking` conformance: takes the write lock before `deadline`.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func lock(before deadline: MonotonicInstant) -> Bool { writeLock(before: deadline) }

  /// Whether the calling thread holds the write lock.
  @inlinable
  public var isWriteLockedByCurrentThread: Bool {
    writerTag == currentThreadTag()
  }
}
