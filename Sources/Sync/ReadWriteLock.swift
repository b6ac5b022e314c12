/// A lock that lets many readers in at once, or one writer alone: the guide's read-write
/// lock (`pthread_rwlock_t`), on a Linux futex.
///
/// **Writers are not starved.** While a writer waits, new readers wait too (the guide's
/// rule), so a steady stream of readers cannot lock a writer out. A writer that gives up (a
/// timed `writeLock` that times out) stops holding them back at once, as with
/// `pthread_rwlock_timedwrlock`. That also means a thread
/// holding a read lock must not take it again for reading while a writer may be waiting:
/// read locks are not recursive (the second `readLock()` would wait behind the writer, which
/// waits behind the first).
///
/// **A bounded wait for writers.** Normally a releasing thread may take the lock again
/// before a woken writer runs (barging), which keeps throughput high. Once a writer has slept
/// about a millisecond without getting the lock, it counts as *starving*; from then on, each
/// release that would free the lock (a writer's, or the last reader's) hands the write lock
/// directly to a starving writer instead, and nobody barges in, until no writer starves. So a
/// writer waits at most about a millisecond plus the critical sections of the starving
/// writers ahead of it (up to 255 count at once; more wait their turn to count). The cost is
/// paid only while a writer starves: each hand-over is a wake-up the next writer must be
/// scheduled for.
///
/// **Readers are not covered by that bound**, by design: a reader waits while any writer
/// holds or waits for the lock (the preference above), so a continuous stream of writers
/// holds new readers back, as `pthread_rwlock_t`'s writer-preferring kind does. Readers wait
/// for writers, never for other readers, and are all let in together when the writers are
/// done. Use ``Lock`` where every thread needs the bound.
///
/// **Cost.** Uncontended, a read lock is one compare-and-swap and its release one atomic
/// subtraction; the write lock is one compare-and-swap each way. A contended acquisition
/// spins briefly, then sleeps in the kernel.
///
/// **Misuse** stops the process with a message, never undefined behaviour: `unlock()` when no
/// lock is held, taking the write lock (or a read lock) while holding the write lock,
/// unlocking the write lock from another thread, and holding more than 2,097,150 read locks
/// at once (a sign of leaked read locks). (A read lock is not tagged with its thread, so one
/// reader releasing on behalf of another is not detected, nor is taking the write lock while
/// holding a read lock: that upgrade waits for its own read lock forever, as with
/// `pthread_rwlock_t` and GLib's `GRWLock`. Release the read lock first, then re-check.)
///
/// Timed acquisition uses the monotonic clock. The `Locking` surface (`lock()`,
/// `withLock`...) takes the *write* lock.
///
/// **Diagnostics.** A lock has a name for ``Diagnostics`` reports (`ReadWriteLock(name:)`, by
/// default its creation site `fileID:line`) and is watched by the lock-order detector (read
/// and write acquisitions alike; a read lock taken again by a thread that holds one adds no
/// order), the deadlock watchdog (a writer waits for the lock's holders, a reader for the
/// writer holding it and the writers waiting for it; readers are not tracked one by one, so
/// a report names only the readers that are blocked themselves) and contention statistics,
/// when they are on. While they are all off, each operation adds one relaxed load and a
/// branch that is not taken.
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
  // @unchecked: all state is in four words accessed only through atomics and the futex.
  //
  // The algorithm is the writer-preferring futex read-write lock of Rust's standard library,
  // plus the writers' bounded wait on the model of `FutexLock`'s. `state`:
  //
  // | bits  | meaning                                                                    |
  // |-------|----------------------------------------------------------------------------|
  // | 0-20  | 0: free; n (1 ... maxReaders): n readers; `writeLocked` (all ones): a writer |
  // | 21    | `handedOver` (only with `writeLocked`): the write lock was handed over to a starving writer that has not claimed it; no thread owns it and nobody else may take it |
  // | 22-29 | the number of starving writers (`starvingWriter` each, at most 255)       |
  // | 30    | `readersWaiting`: readers may be asleep on `state`                         |
  // | 31    | `writersWaiting`: writers may be asleep on `writerNotify`; new readers queue |
  //
  // The rules that keep the wake-ups from getting lost:
  // - A release that leaves the lock free (bits 0-20 zero) with a waiting bit set calls
  //   `wakeWriterOrReaders`, which clears those bits and wakes whom the cleared bit stood
  //   for. That covers a writer's release, the last reader's release, and the last starving
  //   writer giving up while the lock is free. The only other place that clears them is
  //   `withdrawWritersWaiting`, a writer giving up while readers hold the lock, and it too
  //   wakes everyone they stood for. The one release that leaves the lock free with the
  //   bits set and unserved is a hand-over taken back: the starving writers it counts
  //   (at least one) serve them, each taking the lock with the bits kept or leaving last
  //   from a free lock (in a forked child, where they may not exist, it serves them). It
  //   may wake one writer besides, at most once a millisecond, keeping the bits: a spare
  //   wake-up, so that a writer asleep since before the starving phase can join it.
  // - While the starving count is not zero, a writer's release and the last reader's release
  //   never free the lock: they set `writeLocked | handedOver`, bump `handOff` (releasing)
  //   and wake one starving writer. If that woke nobody, every starving writer is running
  //   (or, in a forked child, absent), and the hand-over is taken back: the lock is freed,
  //   its waiting bits left to the starving writers as above.
  // - A starving writer sleeps on `handOff` only while the lock is *held* (not free, not
  //   handed over) by someone else, as read *after* loading `handOff` (acquiring). It stays
  //   counted until it claims a hand-over, takes a free lock, or gives up.
  // - A starving writer keeps `writersWaiting` set while it waits, so new readers queue.
  //
  // Who sleeps where, and who wakes them:
  //
  // | sleeper         | word, expected value                       | checked just before | woken by |
  // |-----------------|--------------------------------------------|---------------------|----------|
  // | reader          | `state`, the value it saw with `readersWaiting` | that value is not read-lockable | `wakeWriterOrReaders` clearing `readersWaiting` (wakes all); any other change to `state` before the sleep refuses it |
  // | writer          | `writerNotify`, the value read before the state | the state, read after, is held with `writersWaiting` | `wakeWriterOrReaders` clearing `writersWaiting` (bumps `writerNotify`, wakes one), or a taken-back hand-over keeping it (at most once a millisecond); a bump before the sleep refuses it |
  // | starving writer | `handOff`, the value read before the state | the state, read after, is held and counts it | the release of that hold, which must hand over (the count includes this writer): it bumps `handOff` and wakes one |
  //
  // The dangerous case of the last row, a hand-over that woke nobody and was taken back while
  // a starving writer stood between loading `handOff` and loading `state`: if it loaded
  // `handOff` before the bump, its futex wait is refused (the value changed) and it re-reads
  // the state; if after, the acquiring load orders the hand-over before its state load, so it
  // sees the lock handed over (it claims it), free (taken back: it takes it) or held by a
  // thread that barged in after the take-back, whose release hands over again since the
  // count still includes the writer. A reader barging in after a take-back is no different:
  // the last reader's release looks at the starving count, not only at `writersWaiting`.
  //
  // Acquisitions (including claiming a hand-over) use acquire ordering and releases
  // (including handing over, which a releasing reader does on a writer's behalf: a
  // read-modify-write continuing the release sequence of its release) release ordering on
  // `state`, which makes the protected data visible to the next holder on x86 and arm64
  // alike (and tells ThreadSanitizer so). Bits other than the lock bits change with relaxed
  // read-modify-writes of the same word: coherence alone orders them.
  @usableFromInline
  static let mask: UInt32 = (1 << 21) - 1
  @usableFromInline
  static let writeLocked: UInt32 = mask
  @usableFromInline
  static let maxReaders: UInt32 = mask - 1
  @usableFromInline
  static let handedOver: UInt32 = 1 << 21
  @usableFromInline
  static let starvingWriter: UInt32 = 1 << 22
  @usableFromInline
  static let starvingWriters: UInt32 = 0xFF << 22
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
  /// The starving writers' wake-up counter: bumped by each hand-over, slept on by them.
  @usableFromInline
  let handOff: UnsafeMutablePointer<UInt32>
  /// When a taken-back hand-over last woke a writer asleep on `writerNotify`
  /// (`FutexLock.takeBackWakeNow`'s units; see ``takeBackHandOver()``). In the lock's block
  /// after `handOff`.
  @usableFromInline
  var takeBackWake: UnsafeMutablePointer<UInt32> { handOff + 1 }

  /// Who the lock is to the lock detectors and contention statistics of ``Diagnostics``.
  @usableFromInline
  let identity: LockIdentity

  /// How long a writer sleeps without getting the lock before it counts as starving.
  static var starvationThreshold: Duration { FutexLock.starvationThreshold }

  /// Called with the lock's `state` word by a starving writer just before it loads the
  /// hand-over counter to go to sleep: the window in which a whole hand-over, its take-back
  /// and a barging reader can pass unseen. Tests set it, before starting any thread, to make
  /// those interleavings happen; nil otherwise (one load on a path about to sleep).
  nonisolated(unsafe) static var beforeStarvingSleep: ((UnsafeMutablePointer<UInt32>) -> Void)?

  /// Creates an unlocked, writer-preferring read-write lock. `name` is what diagnostics
  /// reports call it (lock-order cycles, deadlocks, contention statistics; see
  /// ``Diagnostics``); without one they use the creation site, `fileID:line`, which the
  /// defaults capture.
  public init(name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line) {
    identity = LockIdentity(name: name, fileID: fileID, line: line)
    let block = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    state = block.bindMemory(to: UInt32.self, capacity: 1)
    state.initialize(to: 0)
    writerNotify = (block + 4).bindMemory(to: UInt32.self, capacity: 1)
    writerNotify.initialize(to: 0)
    writer = (block + 8).bindMemory(to: UInt64.self, capacity: 1)
    writer.initialize(to: 0)
    handOff = (block + 16).bindMemory(to: UInt32.self, capacity: 2)
    handOff.initialize(repeating: 0, count: 2)
  }

  deinit {
    if UInt32.atomicLoad(at: state, ordering: .relaxed) & Self.mask != 0 {
      reportMisuse("ReadWriteLock", "deinitialized while locked")
    }
    UnsafeMutableRawPointer(state).deallocate()
    LockDiagnostics.lockWillBeDestroyed(identity)
  }

  /// What diagnostics reports call the lock: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { identity.label }

  // MARK: State predicates

  @inlinable
  static func isUnlocked(_ state: UInt32) -> Bool { state & mask == 0 }

  @inlinable
  static func isWriteLocked(_ state: UInt32) -> Bool { state & mask == writeLocked }

  /// Free or read-locked, below the reader limit, and nobody queued (writers first). The
  /// starving count is not looked at: a starving writer also sets `writersWaiting`, and a
  /// count left by writers that do not exist (a forked child) must not lock readers out.
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
    // Diagnostics off: one relaxed load, a test and a not-taken branch before the fast path.
    if LockDiagnostics.acquisitionHooksRun {
      _ = readLockHooked()
      return
    }
    if !tryReadLockFast() {
      _ = readLockSlow(before: .distantFuture)
    }
  }

  /// Takes a read lock if possible right now; never blocks. Fails while a writer holds the
  /// lock or waits for it.
  @inlinable
  public func tryReadLock() -> Bool {
    if LockDiagnostics.tryAcquisitionHooksRun { return tryReadLockHooked() }
    return tryReadLockPlain()
  }

  /// `tryReadLock()` without diagnostics.
  @inlinable
  func tryReadLockPlain() -> Bool {
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
    if LockDiagnostics.acquisitionHooksRun { return readLockHooked(before: deadline) }
    return tryReadLockFast() || readLockSlow(before: deadline)
  }

  /// Takes a read lock, waiting at most `timeout` (monotonic clock); returns whether it was
  /// taken. A zero or negative timeout makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func readLock(timeout: Duration) -> Bool {
    readLock(before: .after(timeout))
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
    if LockDiagnostics.acquisitionHooksRun {
      _ = writeLockHooked()
      return
    }
    if UInt32.atomicCompareAndSwap(expected: 0, desired: Self.writeLocked, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
    } else {
      _ = writeLockSlow(before: .distantFuture)
    }
  }

  /// Takes the write lock if the lock is free right now; never blocks.
  @inlinable
  public func tryWriteLock() -> Bool {
    if LockDiagnostics.tryAcquisitionHooksRun { return tryWriteLockHooked() }
    return tryWriteLockPlain()
  }

  /// `tryWriteLock()` without diagnostics.
  @inlinable
  func tryWriteLockPlain() -> Bool {
    // Free includes a free lock that still counts starving writers (a hand-over nobody was
    // woken for; in a forked child, writers that do not exist there).
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
    if LockDiagnostics.acquisitionHooksRun { return writeLockHooked(before: deadline) }
    return writeLockPlain(before: deadline)
  }

  /// `writeLock(before:)` without diagnostics.
  @inlinable
  func writeLockPlain(before deadline: MonotonicInstant) -> Bool {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: Self.writeLocked, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
      return true
    }
    return writeLockSlow(before: deadline)
  }

  // The outlined hooked operations (see `LockDiagnostics.hooksMayRun`): methods of the lock,
  // so the inlined operations pass nothing but `self`.

  /// `readLock(before:)`'s hooked path.
  @usableFromInline
  @inline(never)
  func readLockHooked(before deadline: MonotonicInstant = .distantFuture) -> Bool {
    guard LockDiagnostics.diagnosesAcquisition else { return tryReadLockFast() || readLockSlow(before: deadline) }
    return LockDiagnostics.acquire(
      identity, before: deadline, access: .read, holder: { writerTag }, tryAcquire: { tryReadLockPlain() },
      acquire: { readLockSlow(before: deadline) })
  }

  /// `tryReadLock()`'s hooked path: diagnosed while a lock detector is on (contention
  /// statistics do not count try-locks).
  @usableFromInline
  @inline(never)
  func tryReadLockHooked() -> Bool {
    guard LockDiagnostics.tracksHeldLocks else { return tryReadLockPlain() }
    return LockDiagnostics.tryAcquire(identity, access: .read) { tryReadLockPlain() }
  }

  /// `writeLock(before:)`'s hooked path.
  @usableFromInline
  @inline(never)
  func writeLockHooked(before deadline: MonotonicInstant = .distantFuture) -> Bool {
    guard LockDiagnostics.diagnosesAcquisition else { return writeLockPlain(before: deadline) }
    return LockDiagnostics.acquire(
      identity, before: deadline, access: .write, holder: { writerTag }, tryAcquire: { tryWriteLockPlain() },
      acquire: { writeLockSlow(before: deadline) })
  }

  /// `tryWriteLock()`'s hooked path.
  @usableFromInline
  @inline(never)
  func tryWriteLockHooked() -> Bool {
    guard LockDiagnostics.tracksHeldLocks else { return tryWriteLockPlain() }
    return LockDiagnostics.tryAcquire(identity, access: .write) { tryWriteLockPlain() }
  }

  /// `unlock()`'s hooked path.
  @usableFromInline
  @inline(never)
  func unlockHooked() {
    guard LockDiagnostics.diagnosesRelease else { return unlockPlain() }
    LockDiagnostics.release(identity) { unlockPlain() }
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
    var becomeStarving = false
    // One more spin before the first sleep (see below).
    var mayRespin = true
    while true {
      if Self.isUnlocked(current) {
        // Free (a hand-over keeps it write-locked). A starving writer leaves the count.
        var desired = current | Self.writeLocked | otherWritersWaiting
        if starving { desired -= Self.starvingWriter }
        let seen = UInt32.atomicCompareExchange(expected: current, desired: desired, at: state, ordering: .acquiring)
        if seen == current {
          UInt64.atomicStore(me, at: writer, ordering: .relaxed)
          return true
        }
        current = seen
        continue
      }
      if starving {
        if current & Self.handedOver != 0 {
          // Claim the hand-over (any starving writer may). Acquiring: reads the releasing
          // hand-over, so the previous holders' writes are visible.
          let seen = UInt32.atomicCompareExchange(
            expected: current, desired: (current & ~Self.handedOver) - Self.starvingWriter, at: state,
            ordering: .acquiring)
          if seen == current {
            UInt64.atomicStore(me, at: writer, ordering: .relaxed)
            return true
          }
          current = seen
          continue
        }
        // Held by someone else.
        if deadline != .distantFuture, deadline.hasPassed { return leaveStarving(owner: me) }
        // Load the counter (acquiring) before re-reading the state, and sleep only while the
        // lock is held: see the type's table (a hand-over taken back leaves the lock free and
        // the counter at the value just loaded; sleeping then would wait for a release that
        // may never come).
        if let hook = Self.beforeStarvingSleep { hook(state) }
        let sequence = UInt32.atomicLoad(at: handOff, ordering: .acquiring)
        current = UInt32.atomicLoad(at: state, ordering: .relaxed)
        // Keep new readers out while we sleep (a take-back may have served the bit since).
        while !Self.isUnlocked(current), current & (Self.handedOver | Self.writersWaiting) == 0 {
          let seen = UInt32.atomicCompareExchange(
            expected: current, desired: current | Self.writersWaiting, at: state, ordering: .relaxed)
          current = seen == current ? current | Self.writersWaiting : seen
        }
        if Self.isUnlocked(current) || current & Self.handedOver != 0 { continue }
        _ = Futex.wait(handOff, expected: sequence, deadline: deadline)
        current = UInt32.atomicLoad(at: state, ordering: .relaxed)
        continue
      }
      // Held, and this writer has not slept yet: it lost the race for the free lock its spin
      // saw (or the spin ran out). Spin once more rather than mark "writers waiting" and
      // sleep, as `FutexLock` does: the lock is being passed around in user space, and a
      // sleep now is a futex wait that mostly returns at once, after which the writer takes
      // the lock keeping the waiting bit, so its release makes a wake-up call for nobody.
      // Only while nobody waits or starves (the spin stops at once otherwise), and not past
      // the caller's deadline.
      if mayRespin, firstSleep == .distantPast, current & ~Self.mask == 0,
        deadline == .distantFuture || !deadline.hasPassed
      {
        mayRespin = false
        current = spin()
        continue
      }
      if becomeStarving, current & Self.starvingWriters != Self.starvingWriters {
        // Held after over the threshold asleep: count ourselves (every release now hands
        // over) and keep new readers out. At the count's limit, stay an ordinary waiter and
        // try again after the next wake-up.
        let desired = (current + Self.starvingWriter) | Self.writersWaiting
        let seen = UInt32.atomicCompareExchange(expected: current, desired: desired, at: state, ordering: .relaxed)
        if seen != current {
          current = seen
          continue
        }
        current = desired
        starving = true
        continue
      }
      becomeStarving = false
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
      if deadline != .distantFuture, deadline.hasPassed {
        withdrawWritersWaiting()
        return false
      }
      if firstSleep == .distantPast { firstSleep = .now }
      if !Futex.wait(writerNotify, expected: sequence, deadline: deadline) {
        withdrawWritersWaiting()
        return false
      }
      if MonotonicInstant.now - firstSleep >= Self.starvationThreshold { becomeStarving = true }
      current = spin()
    }
  }

  /// A starving writer whose deadline passed: leaves the count, or claims the write lock if
  /// it was handed over meanwhile (then returns true: acquired). The last starving writer to
  /// leave a free lock serves its waiting bits, which no release will (see the type's rules).
  @usableFromInline
  func leaveStarving(owner me: UInt64) -> Bool {
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    while true {
      let claim = current & Self.handedOver != 0
      let desired = (claim ? current & ~Self.handedOver : current) - Self.starvingWriter
      // Acquiring for the claim (it reads the releasing hand-over); nothing is published by
      // merely leaving.
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: desired, at: state, ordering: claim ? .acquiring : .relaxed)
      if seen == current {
        if claim {
          UInt64.atomicStore(me, at: writer, ordering: .relaxed)
          return true
        }
        if Self.isUnlocked(desired), desired & Self.starvingWriters == 0,
          desired & (Self.readersWaiting | Self.writersWaiting) != 0
        {
          wakeWriterOrReaders(desired)
        } else {
          withdrawWritersWaiting()
        }
        return false
      }
      current = seen
    }
  }

  /// A writer whose deadline passed while readers hold the lock: the `writersWaiting` bit it
  /// set (one bit for every waiting writer) would otherwise keep new readers queued behind a
  /// writer that is gone until the last reader leaves, where `pthread_rwlock_t` lets them in
  /// (and a reader the holders wait for would deadlock). Clears both waiting bits and wakes
  /// everyone they stood for: every sleeping writer (bump `writerNotify`, wake all), which
  /// finds the lock still held and sets its bit again, and the sleeping readers, which get in
  /// unless such a writer set it first. Only while nobody starves (a starving writer's bit is
  /// its own, and its hand-over serves the rest) and the lock is read-held (the release of a
  /// write hold serves the bits). The timeout path only; the cost is the wake-ups.
  @usableFromInline
  func withdrawWritersWaiting() {
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    while current & Self.writersWaiting != 0, current & Self.starvingWriters == 0, !Self.isUnlocked(current),
      !Self.isWriteLocked(current)
    {
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: current & ~(Self.readersWaiting | Self.writersWaiting), at: state,
        ordering: .relaxed)
      if seen != current {
        current = seen
        continue
      }
      // Releasing bump after the clear: a writer that loads the bumped
      // counter (acquiring) then reads the cleared state and sets its bit again instead of
      // sleeping; one that loaded it before has its futex wait refused.
      _ = UInt32.atomicFetchAdd(1, at: writerNotify, ordering: .releasing)
      Futex.wake(writerNotify, count: Int32.max)
      // A reader sleeps expecting the state with `readersWaiting` set: it changed.
      if current & Self.readersWaiting != 0 { Futex.wake(state, count: Int32.max) }
      return
    }
  }

  // MARK: Releasing

  /// Releases the lock the calling thread holds: the write lock if it holds that, otherwise
  /// one read lock. Stops the process if no lock is held, or if the write lock is held by
  /// another thread.
  @inlinable
  public func unlock() {
    if LockDiagnostics.releaseHooksRun { return unlockHooked() }
    unlockPlain()
  }

  /// `unlock()` without diagnostics.
  @inlinable
  func unlockPlain() {
    if writerTag == currentThreadTag() {
      UInt64.atomicStore(0, at: writer, ordering: .relaxed)
      // Nobody waiting or starving: one compare-and-swap, as uncontended as the acquisition.
      if !UInt32.atomicCompareAndSwap(expected: Self.writeLocked, desired: 0, at: state, ordering: .releasing) {
        writeUnlockSlow()
      }
    } else {
      let previous = UInt32.atomicFetchAdd(0 &- 1, at: state, ordering: .releasing)
      if previous & Self.mask == 0 || previous & Self.mask == Self.writeLocked {
        unlockMisuse(previous)
      }
      let now = previous &- 1
      if Self.isUnlocked(now), now & (Self.writersWaiting | Self.starvingWriters) != 0 { lastReaderReleased(now) }
    }
  }

  @usableFromInline
  func unlockMisuse(_ previous: UInt32) -> Never {
    if previous & Self.mask == 0 {
      reportMisuse("ReadWriteLock", "unlock() of a lock that is not locked")
    }
    reportMisuse("ReadWriteLock", "unlock() of the write lock from a thread that does not hold it")
  }

  /// The write holder's release while someone waits or starves: hands the write lock over if
  /// a writer starves, else frees it and wakes the next.
  @usableFromInline
  @inline(never)
  func writeUnlockSlow() {
    // Waiters change the flags and the count meanwhile, hence a compare-and-swap loop; the
    // lock bits are ours.
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    while true {
      if current & Self.starvingWriters != 0 {
        // Releasing: the claimer's acquiring compare-and-swap reads this value.
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current | Self.handedOver, at: state, ordering: .releasing)
        if seen == current {
          handOver()
          return
        }
        current = seen
      } else {
        let now = current & ~Self.mask
        let seen = UInt32.atomicCompareExchange(expected: current, desired: now, at: state, ordering: .releasing)
        if seen == current {
          if now & (Self.readersWaiting | Self.writersWaiting) != 0 { wakeWriterOrReaders(now) }
          return
        }
        current = seen
      }
    }
  }

  /// The last reader left (its subtraction was releasing) with writers waiting or starving:
  /// if a writer starves, takes the write lock on its behalf and hands it over; else wakes the
  /// next.
  @usableFromInline
  @inline(never)
  func lastReaderReleased(_ observed: UInt32) {
    var current = observed
    while Self.isUnlocked(current), current & Self.starvingWriters != 0 {
      // A read-modify-write after our releasing subtraction: it continues its release
      // sequence, so the claimer's acquiring compare-and-swap sees the readers done.
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: current | Self.writeLocked | Self.handedOver, at: state, ordering: .releasing)
      if seen == current {
        handOver()
        return
      }
      // A starving writer may have taken the free lock itself (then its release serves the
      // rest), or the flags changed.
      current = seen
    }
    if Self.isUnlocked(current), current & (Self.readersWaiting | Self.writersWaiting) != 0 {
      wakeWriterOrReaders(current)
    }
  }

  /// With `state` just set to `writeLocked | handedOver`: tells the starving writers (bumps
  /// `handOff` after the hand-over, releasing, and wakes one); takes the hand-over back if
  /// that woke nobody.
  @usableFromInline
  func handOver() {
    // A starving writer that loads this value (acquiring) then also sees the hand-over; one
    // that loaded the old value has its futex wait refused or woken here. Our caller holds a
    // reference to the lock, so the words outlive this.
    _ = UInt32.atomicFetchAdd(1, at: handOff, ordering: .releasing)
    if Futex.wake(handOff, count: 1) == 0 { takeBackHandOver() }
  }

  /// A hand-over whose wake-up woke nobody: the starving writers are running (about to
  /// sleep, woken but not yet on a processor, or giving up), or they do not exist (a forked
  /// child). Frees the lock instead, if no starving writer claimed it meanwhile; a running
  /// starving writer finds the counter bumped (so it does not sleep) and takes the free lock.
  ///
  /// The waiting bits stay set and need not be served here, because a starving writer
  /// stands in for that wake-up: the count is at least one while the lock is handed over (a
  /// starving writer leaves it only by claiming or, its deadline passed, by
  /// ``leaveStarving(owner:)``), and each counted writer either takes the lock keeping the
  /// bits, so that its release serves them, or leaves the count serving them itself when it
  /// leaves a free lock last. Meanwhile the bits keep new readers queued, as they did while
  /// the starving writer slept. Serving them at every take-back was the cost of the bound
  /// with many more threads than processors: each hand-over whose starving writer waited for
  /// a processor woke another writer to compete with it (64 writers on 2 CPUs: 2.3x the time
  /// per acquisition of the lock without the bound). So, as ``FutexLock``'s take-back, it
  /// wakes one writer asleep on `writerNotify` at most once a millisecond (``takeBackWake``;
  /// the bits stay set, so the wake-up is spare at worst: a writer woken while the lock is
  /// held sleeps again), enough for writers that went to sleep before the starving phase
  /// began to wake, find they have waited past the threshold and count themselves as
  /// starving while the phase lasts. Readers are not woken: while a writer waits they queue,
  /// and the release that ends the phase serves them. In the child of a fork the count may
  /// stand for writers left in the parent, so there (or if the fork handler could not be
  /// registered) the bits are served as a release would, and the lock keeps working (its
  /// count of absent writers only keeps it on the slow paths).
  @usableFromInline
  func takeBackHandOver() {
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    while current & Self.handedOver != 0 {
      let now = current & ~(Self.mask | Self.handedOver)
      // Releasing, as any release: the next owner reads it.
      let seen = UInt32.atomicCompareExchange(expected: current, desired: now, at: state, ordering: .releasing)
      if seen == current {
        if FutexLock.starvingCountMayBeStale {
          if now & (Self.readersWaiting | Self.writersWaiting) != 0 { wakeWriterOrReaders(now) }
          return
        }
        if now & Self.writersWaiting != 0, FutexLock.claimTakeBackWake(takeBackWake) { _ = wakeWriter() }
        return
      }
      current = seen
    }
  }

  /// Called with the lock free and a waiting bit set: wakes one writer if any, else all
  /// readers. Clearing a bit and waking whom it stood for go together (here and in
  /// `withdrawWritersWaiting`, the only places either bit is cleared). Stops as soon as
  /// someone takes the lock: its release serves the rest.
  @usableFromInline
  func wakeWriterOrReaders(_ observed: UInt32) {
    var current = observed
    while Self.isUnlocked(current) {
      if current & Self.writersWaiting != 0 {
        // Wake a writer first; a readers' bit stays for the writer's release.
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current & ~Self.writersWaiting, at: state, ordering: .relaxed)
        if seen != current {
          current = seen
          continue
        }
        if wakeWriter() || current & Self.readersWaiting == 0 { return }
        // No writer was asleep (it timed out, starves, or is about to re-check): the readers.
        current &= ~Self.writersWaiting
        continue
      }
      if current & Self.readersWaiting == 0 { return }
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: current & ~Self.readersWaiting, at: state, ordering: .relaxed)
      if seen == current {
        Futex.wake(state, count: Int32.max)
        return
      }
      current = seen
    }
  }

  /// Bumps the writers' counter and wakes one; returns whether a writer was asleep.
  @usableFromInline
  @discardableResult
  func wakeWriter() -> Bool {
    _ = UInt32.atomicFetchAdd(1, at: writerNotify, ordering: .releasing)
    return Futex.wake(writerNotify, count: 1) > 0
  }

  /// Spins briefly while the lock is held and nobody sleeps or starves yet; returns the last
  /// state seen. A writer that saw the lock free but lost it to another thread spins once
  /// more before its first sleep (``writeLockSlow(before:)``): on a 2-vCPU AMD EPYC VM, 8-64
  /// writers with private work between acquisitions took 61-75 ns per acquisition with it
  /// and 70-84 ns without (`contention.scaling-with-work-*`, medians of three runs),
  /// back-to-back writers the same within the spread.
  @usableFromInline
  func spin() -> UInt32 {
    Backoff.poll(rounds: 8) {
      UInt32.atomicLoad(at: state, ordering: .relaxed)
    } while: { current in
      current & Self.mask != 0 && current & ~Self.mask == 0
    }
  }

  // MARK: Scoped forms and Locking

  /// Runs `body` holding a read lock; releases it however `body` exits.
  @inlinable
  public func withReadLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    if LockDiagnostics.acquisitionHooksRun {
      _ = readLockHooked()
    } else if !tryReadLockFast() {
      _ = readLockSlow(before: .distantFuture)
    }
    defer { unlock() }
    return try body()
  }

  /// Runs `body` holding the write lock; releases it however `body` exits. Stops the
  /// process if `body` released the write lock itself (the scope's release would otherwise
  /// drop a read lock another thread took meanwhile: read locks are not tagged).
  @inlinable
  public func withWriteLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    if LockDiagnostics.acquisitionHooksRun {
      _ = writeLockHooked()
    } else if UInt32.atomicCompareAndSwap(expected: 0, desired: Self.writeLocked, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
    } else {
      _ = writeLockSlow(before: .distantFuture)
    }
    defer { releaseWriteScope() }
    return try body()
  }

  /// The end of a scope that took the write lock: a body that released it itself is a misuse
  /// (the plain release could drop another thread's read lock, as readers are not tagged).
  @inlinable
  func releaseWriteScope() {
    if writerTag != currentThreadTag() { writeScopeReleasedByBody() }
    unlock()
  }

  @usableFromInline
  func writeScopeReleasedByBody() -> Never {
    reportMisuse("ReadWriteLock", "withWriteLock's body released the write lock (the scope releases it)")
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
