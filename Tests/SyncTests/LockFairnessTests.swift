import CThreadingShims
import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

/// The locks with a bounded wait, driven through one shape.
enum BoundedWaitSubject: String, CaseIterable, Sendable, CustomTestStringConvertible {
  case lock, lockedValue, recursiveLock, spinLock, readWriteLockWriters, readWriteLockMixed

  var testDescription: String { rawValue }

  func make() -> BoundedWaitLock {
    switch self {
    case .lock:
      let lock = Lock()
      return BoundedWaitLock(
        run: { body in lock.withLock(body) },
        tryRun: { timeout, body in
          guard lock.lock(timeout: timeout) else { return false }
          body()
          lock.unlock()
          return true
        })
    case .lockedValue:
      let value = LockedValue(0)
      return BoundedWaitLock(
        run: { body in value.withLock { _ in body() } },
        tryRun: { timeout, body in value.withLock(timeout: timeout) { _ in body() } != nil })
    case .recursiveLock:
      let lock = RecursiveLock()
      return BoundedWaitLock(
        run: { body in lock.withLock(body) },
        tryRun: { timeout, body in lock.withLock(timeout: timeout, body) != nil })
    case .spinLock:
      let lock = SpinLock()
      return BoundedWaitLock(
        run: { body in lock.withLock(body) },
        tryRun: { timeout, body in lock.withLock(timeout: timeout, body) != nil })
    case .readWriteLockWriters:
      let lock = ReadWriteLock()
      return BoundedWaitLock(
        run: { body in lock.withWriteLock(body) },
        tryRun: { timeout, body in
          guard lock.writeLock(timeout: timeout) else { return false }
          body()
          lock.unlock()
          return true
        })
    case .readWriteLockMixed:
      // Every critical section is preceded by a read lock, so readers queue, sleep and are
      // woken among writers that starve, hand over and give up.
      let lock = ReadWriteLock()
      return BoundedWaitLock(
        run: { body in
          lock.withReadLock {}
          lock.withWriteLock(body)
        },
        tryRun: { timeout, body in
          if lock.readLock(timeout: timeout) { lock.unlock() }
          guard lock.writeLock(timeout: timeout) else { return false }
          body()
          lock.unlock()
          return true
        })
    }
  }
}

/// One lock of a ``BoundedWaitSubject``: `run` runs a body holding it; `tryRun` does if the
/// lock comes within the timeout and returns whether it did.
struct BoundedWaitLock: Sendable {
  let run: @Sendable (() -> Void) -> Void
  let tryRun: @Sendable (Duration, () -> Void) -> Bool
}

/// Takes a lock with `acquire` (given a 5 s limit) and releases it with `release`; returns
/// whether it got the lock well within the limit (2.5 s), the race tests' verdict: a waiter
/// whose wake-up was lost gets it only when its own deadline ends the sleep.
func acquiresPromptly(_ acquire: (Duration) -> Bool, release: () -> Void) -> Bool {
  let start = monotonicSeconds()
  let acquired = acquire(.seconds(5))
  let elapsed = monotonicSeconds() - start
  if acquired { release() }
  return acquired && elapsed < 2.5
}

/// Keeps the processor busy for `seconds` (a critical section's work; not synchronization).
private func busy(seconds: Double) {
  let end = monotonicSeconds() + seconds
  while monotonicSeconds() < end {}
}

/// Per-thread results, each slot written by its own thread only and read after the join
/// (separate elements of allocated storage, so writers never touch the same variable).
private final class PerThread: @unchecked Sendable {
  let count: Int
  let acquisitionSlots: UnsafeMutablePointer<Int>
  let waitSlots: UnsafeMutablePointer<Double>
  init(_ count: Int) {
    self.count = count
    acquisitionSlots = .allocate(capacity: count)
    acquisitionSlots.initialize(repeating: 0, count: count)
    waitSlots = .allocate(capacity: count)
    waitSlots.initialize(repeating: 0, count: count)
  }
  deinit {
    acquisitionSlots.deallocate()
    waitSlots.deallocate()
  }
  var acquisitions: [Int] { Array(UnsafeBufferPointer(start: acquisitionSlots, count: count)) }
  var longestWait: [Double] { Array(UnsafeBufferPointer(start: waitSlots, count: count)) }
}

/// A lock whose waiter's state the hand-over test reads (white box).
struct HandOverSubject: Sendable, CustomTestStringConvertible {
  let testDescription: String
  /// How the releasing thread holds the lock (the waiter always uses `lock`).
  let hold: @Sendable () -> Void
  /// Tries `hold`'s kind of lock without blocking.
  let tryHold: @Sendable () -> Bool
  let lock: @Sendable () -> Void
  let unlock: @Sendable () -> Void
  let tryLock: @Sendable () -> Bool
  /// Whether a waiter has announced that it sleeps.
  let waiterSleeps: @Sendable () -> Bool
  /// Whether a waiter counts itself as starving.
  let waiterStarves: @Sendable () -> Bool
  /// Wakes a sleeping waiter without releasing (as a spurious wake-up would): it finds the
  /// lock still held.
  let wakeWaiter: @Sendable () -> Void
  /// The address of the word a starving waiter sleeps on (the hand-over counter).
  let handOffWord: UInt
  /// The address of the word other waiters sleep on (the lock word of `Lock` and
  /// `RecursiveLock`, the writers' notification counter of `ReadWriteLock`); nil for
  /// `SpinLock`, whose waiters nap on a timer.
  var sleepWord: UInt? = nil
  /// The address a starving waiter's `beforeStarvingSleep` hook is called with (the lock's
  /// words for `FutexLock.beforeStarvingSleep`, `state` for
  /// `ReadWriteLock.beforeStarvingSleep`).
  var starvingHookWord: UInt = 0

  static func futexLock(_ name: String, _ lock: some Locking, _ core: FutexLock) -> HandOverSubject {
    nonisolated(unsafe) let word = core.word
    nonisolated(unsafe) let futexWord = core.futexWord
    return HandOverSubject(
      testDescription: name, hold: { lock.lockForScope() }, tryHold: { lock.tryLock() }, lock: { lock.lockForScope() },
      unlock: { lock.unlock() }, tryLock: { lock.tryLock() },
      waiterSleeps: { UInt64.atomicLoad(at: word, ordering: .relaxed) & FutexLock.lockBits == 2 },
      waiterStarves: { UInt64.atomicLoad(at: word, ordering: .relaxed) & FutexLock.starvingMask != 0 },
      wakeWaiter: { Futex.wake(futexWord, count: 1) }, handOffWord: UInt(bitPattern: core.handOff),
      sleepWord: UInt(bitPattern: core.futexWord), starvingHookWord: UInt(bitPattern: core.base))
  }

  /// A spin lock counts its waiters in a word of their own (see `SpinLock.words`).
  static func spinLock(_ lock: SpinLock) -> HandOverSubject {
    nonisolated(unsafe) let futexWord = lock.core.futexWord
    nonisolated(unsafe) let waiters = lock.waiters
    return HandOverSubject(
      testDescription: "SpinLock", hold: { lock.lockForScope() }, tryHold: { lock.tryLock() },
      lock: { lock.lockForScope() }, unlock: { lock.unlock() }, tryLock: { lock.tryLock() },
      waiterSleeps: { UInt64.atomicLoad(at: waiters, ordering: .relaxed) != 0 },
      waiterStarves: { UInt64.atomicLoad(at: waiters, ordering: .relaxed) >= SpinLock.starvingUnit },
      wakeWaiter: { Futex.wake(futexWord, count: 1) }, handOffWord: UInt(bitPattern: lock.core.handOff),
      starvingHookWord: UInt(bitPattern: lock.core.base))
  }

  static var all: [HandOverSubject] {
    let lock = Lock()
    let recursive = RecursiveLock()
    let spin = SpinLock()
    return [
      futexLock("Lock", lock, lock.core),
      futexLock("RecursiveLock", recursive, recursive.core),
      spinLock(spin),
      readWriteLock("ReadWriteLock, released by the writer", ReadWriteLock(), holdingRead: false),
      readWriteLock("ReadWriteLock, released by the last reader", ReadWriteLock(), holdingRead: true),
    ]
  }

  /// The indices in ``all`` of the subjects whose waiters sleep on a word (``sleepWord``):
  /// every one but `SpinLock`, whose waiters nap on a timer.
  static var indicesWithSleepWord: [Int] {
    let subjects = all
    return subjects.indices.filter { subjects[$0].sleepWord != nil }
  }

  /// A writer waits; the releasing thread holds the write lock or a read lock.
  static func readWriteLock(_ name: String, _ lock: ReadWriteLock, holdingRead: Bool) -> HandOverSubject {
    nonisolated(unsafe) let state = lock.state
    nonisolated(unsafe) let notify = lock.writerNotify
    return HandOverSubject(
      testDescription: name,
      hold: { if holdingRead { lock.readLockForScope() } else { lock.lockForScope() } },
      tryHold: { holdingRead ? lock.tryReadLock() : lock.tryWriteLock() },
      lock: { lock.lockForScope() }, unlock: { lock.unlock() }, tryLock: { lock.tryWriteLock() },
      waiterSleeps: { UInt32.atomicLoad(at: state, ordering: .relaxed) & ReadWriteLock.writersWaiting != 0 },
      waiterStarves: { UInt32.atomicLoad(at: state, ordering: .relaxed) & ReadWriteLock.starvingWriters != 0 },
      wakeWaiter: { Futex.wake(notify, count: 1) }, handOffWord: UInt(bitPattern: lock.handOff),
      sleepWord: UInt(bitPattern: notify), starvingHookWord: UInt(bitPattern: state))
  }
}

extension ReadWriteLock {
  /// `readLock()` for synchronous test helpers called from closures the compiler treats as
  /// possibly asynchronous.
  func readLockForScope() { readLock() }
}

/// The bounded wait: once a waiter has slept about a millisecond, unlocks hand the lock to
/// the starving waiters instead of letting any thread barge in. The time bounds asserted
/// here are generous (load on the machine, ThreadSanitizer); the benchmark `fairness.` rows
/// measure the real figures.
@Suite("Lock fairness", .timeLimit(.minutes(3)))
struct LockFairnessTests {
  @Test(
    "once a waiter has slept over 1 ms, unlock hands it the lock and the releasing thread cannot take it back",
    arguments: HandOverSubject.all)
  func starvingWaiterGetsTheLockHandedOver(subject: HandOverSubject) {
    let holding = Gate()
    let waiterHolds = Gate()
    let release = Gate()
    let waiterThread = AtomicInteger<Int32>(0)
    runConcurrently(2) { index in
      if index == 1 {
        waiterThread.store(tk_gettid(), ordering: .relaxed)
        holding.wait()
        subject.lock()
        waiterHolds.open()
        release.wait()
        subject.unlock()
        return
      }
      subject.hold()
      holding.open()
      let giveUp = monotonicSeconds() + 10
      while !subject.waiterSleeps() && monotonicSeconds() < giveUp { sched_yield() }
      // Keep it waiting past the threshold (the duration under test, not a hand-shake).
      busy(seconds: 0.002)
      // Wake it while still holding the lock (a release whose lock is re-taken at once by
      // another thread looks the same to the waiter): it finds the lock held after over a
      // millisecond asleep, so it counts itself as starving.
      while !subject.waiterStarves() && monotonicSeconds() < giveUp {
        subject.wakeWaiter()
        sched_yield()
      }
      #expect(subject.waiterStarves(), "the woken waiter did not count itself as starving")
      // Unlock once it sleeps on the hand-over counter: a hand-over made while it is still
      // on its way there wakes nobody and is taken back (the lock is freed for it to take,
      // and anyone may barge in then); that race is the hand-over race tests' subject.
      let waiter = waiterThread.load(ordering: .relaxed)
      while !isBlockedInFutex(thread: waiter, on: subject.handOffWord) && monotonicSeconds() < giveUp {
        sched_yield()
      }
      subject.unlock()
      // Handed over: in transit or already held by the waiter, never free.
      let barged = subject.tryLock()
      if barged { subject.unlock() }
      #expect(!barged, "\(subject.testDescription): the releasing thread took the lock back")
      waiterHolds.wait()
      release.open()
    }
  }

  // Not the mixed ReadWriteLock subject: its waiter takes a read lock first, and readers
  // have no bounded wait (documented on ReadWriteLock): a writer that re-takes the lock at
  // once can hold a reader back until it stops.
  @Test(
    "a waiter gets the lock within a bounded time while another thread re-takes it at once",
    arguments: BoundedWaitSubject.allCases.filter { $0 != .readWriteLockMixed })
  func waiterIsNotStarvedByABargingHolder(subject: BoundedWaitSubject) {
    let lock = subject.make()
    let holderIsInside = Gate()
    let waiterIsDone = Gate()
    let waited = PerThread(1)
    runConcurrently(2) { index in
      if index == 0 {
        // Re-takes the lock immediately after each release, for up to 3 s: without the
        // bound, the waiter's wake-up always arrives too late and it starves until then.
        let giveUp = monotonicSeconds() + 3
        var first = true
        while !waiterIsDone.isOpen && monotonicSeconds() < giveUp {
          lock.run {
            if first {
              holderIsInside.open()
              first = false
            }
            busy(seconds: 50e-6)
          }
        }
      } else {
        holderIsInside.wait()
        let start = monotonicSeconds()
        lock.run {}
        waited.waitSlots[0] = monotonicSeconds() - start
        waiterIsDone.open()
      }
    }
    #expect(waited.longestWait[0] < 1)
  }

  @Test(
    "with 8 threads hammering for 0.3 s, no increment is lost and every thread gets the lock",
    arguments: BoundedWaitSubject.allCases)
  func hammeringKeepsCountsAndBoundsWaits(subject: BoundedWaitSubject) {
    let threads = 8
    let lock = subject.make()
    let counter = UnprotectedCounter()
    let results = PerThread(threads)
    runConcurrently(threads) { index in
      let end = monotonicSeconds() + 0.3
      var longest = 0.0
      var count = 0
      while monotonicSeconds() < end {
        let before = monotonicSeconds()
        lock.run {
          counter.value += 1
          busy(seconds: 5e-6)
        }
        longest = max(longest, monotonicSeconds() - before)
        count += 1
      }
      results.acquisitionSlots[index] = count
      results.waitSlots[index] = longest
    }
    #expect(counter.value == results.acquisitions.reduce(0, +))
    #expect(results.acquisitions.allSatisfy { $0 > 0 })
    // Generous: the wait includes time the scheduler keeps a ready thread off the
    // processors, which on a loaded 2-core machine reaches hundreds of milliseconds.
    #expect(results.longestWait.max()! < 2)
  }

  @Test(
    "timed waiters that give up beside starving waiters never break exclusion or strand the lock",
    arguments: BoundedWaitSubject.allCases)
  func timedWaitersAmongStarvingOnes(subject: BoundedWaitSubject) {
    let threads = 6
    let lock = subject.make()
    let counter = UnprotectedCounter()
    let results = PerThread(threads)
    runConcurrently(threads) { index in
      let end = monotonicSeconds() + 0.3
      var count = 0
      while monotonicSeconds() < end {
        let work = {
          counter.value += 1
          busy(seconds: 20e-6)
        }
        if index < 2 {
          lock.run(work)
          count += 1
        } else if lock.tryRun(.microseconds(300 * index), work) {
          count += 1
        }
      }
      results.acquisitionSlots[index] = count
    }
    #expect(counter.value == results.acquisitions.reduce(0, +))
    // The lock is free again for anyone.
    #expect(lock.tryRun(.zero) {})
  }
}

@Suite("Lock hand-over races", .timeLimit(.minutes(3)))
struct LockHandOverRaceTests {
  @Test(
    "a starving waiter that finds its hand-over already taken back takes the free lock instead of sleeping",
    .runsExitTests)
  func handOverTakenBackBeforeTheWaiterSleeps() async {
    await #expect(processExitsWith: .success) {
      blocking { starvingWaiterMissesItsHandOver() }
    }
  }

  @Test(
    "a starving waiter that gives up after its hand-over was taken back wakes a thread asleep on the lock",
    .runsExitTests)
  func starvingWaiterGivesUpAfterItsHandOverWasTakenBack() async {
    await #expect(processExitsWith: .success) {
      blocking { starvingWaiterLeavesAfterItsHandOverWasTakenBack() }
    }
  }

  @Test(
    "a hand-over taken back wakes a thread asleep on the lock, at most once a millisecond",
    .runsExitTests,
    arguments: HandOverSubject.indicesWithSleepWord)
  func takenBackHandOverWakesASleeper(subjectIndex: Int) async {
    await #expect(processExitsWith: .success) { [subjectIndex] in
      blocking { takenBackHandOverWakesASleeperDuringTheStarvingPhase(HandOverSubject.all[subjectIndex]) }
    }
  }
}

/// Exit-test body. A waiter starves on a held lock (for a `ReadWriteLock`, a writer) and is
/// stopped just before it sleeps on the hand-over counter; meanwhile a second thread goes to
/// sleep on the lock as an ordinary waiter, and the holder unlocks. The hand-over wakes
/// nobody (the starving waiter is running) and is taken back. The take-back must wake the
/// sleeper (no take-back has woken one within the last millisecond), so that a thread asleep
/// when a starving phase begins can count itself as starving while the phase lasts instead
/// of sleeping until it ends. Exits 0 if the sleeper got the lock while the starving waiter
/// was still stopped (within 5 s); the starving waiter is let go either way, and every
/// thread ends.
func takenBackHandOverWakesASleeperDuringTheStarvingPhase(_ subject: HandOverSubject) {
  guard let sleepWord = subject.sleepWord else { preconditionFailure("no word the waiters sleep on") }
  let holding = Gate()
  let starving = Gate()
  let letGo = Gate()
  let sleeperThread = AtomicInteger<Int32>(0)
  let sleeperAcquired = AtomicBool(false)
  let wokenInTime = AtomicInteger<Int>(-1)
  let target = subject.starvingHookWord
  let stopTheStarvingWaiter: @Sendable (UInt) -> Void = { word in
    guard word == target, !starving.isOpen else { return }
    starving.open()
    letGo.wait()
  }
  // Set before any thread starts (thread creation orders it before every read); only the
  // subject's lock matches `target`.
  FutexLock.beforeStarvingSleep = { stopTheStarvingWaiter(UInt(bitPattern: $0)) }
  ReadWriteLock.beforeStarvingSleep = { stopTheStarvingWaiter(UInt(bitPattern: $0)) }
  runConcurrently(3) { index in
    switch index {
    case 1:
      // The starving waiter.
      holding.wait()
      subject.lock()
      subject.unlock()
    case 2:
      // The sleeper: an ordinary waiter from the start of the starving phase.
      starving.wait()
      sleeperThread.store(tk_gettid(), ordering: .relaxed)
      subject.lock()
      sleeperAcquired.store(true, ordering: .relaxed)
      subject.unlock()
    default:
      subject.hold()
      holding.open()
      let giveUp = monotonicSeconds() + 10
      while !subject.waiterSleeps() && monotonicSeconds() < giveUp { sched_yield() }
      // Keep it asleep past the starvation threshold (the duration under test).
      busy(seconds: 0.002)
      // Wake it with the lock still held: it counts itself as starving and stops in the hook.
      while !starving.isOpen && monotonicSeconds() < giveUp {
        subject.wakeWaiter()
        sched_yield()
      }
      precondition(starving.isOpen, "the waiter never started to starve")
      while sleeperThread.load(ordering: .relaxed) == 0 && monotonicSeconds() < giveUp { sched_yield() }
      let sleeper = sleeperThread.load(ordering: .relaxed)
      while !isBlockedInFutex(thread: sleeper, on: sleepWord) && monotonicSeconds() < giveUp { sched_yield() }
      precondition(isBlockedInFutex(thread: sleeper, on: sleepWord), "the sleeper never slept on the lock")
      // The hand-over wakes nobody and is taken back.
      subject.unlock()
      let deadline = monotonicSeconds() + 5
      while !sleeperAcquired.load(ordering: .relaxed) && monotonicSeconds() < deadline { sched_yield() }
      wokenInTime.store(sleeperAcquired.load(ordering: .relaxed) ? 1 : 0, ordering: .relaxed)
      letGo.open()
    }
  }
  FutexLock.beforeStarvingSleep = nil
  ReadWriteLock.beforeStarvingSleep = nil
  _exit(wokenInTime.load(ordering: .relaxed) == 1 ? 0 : 1)
}

/// Exit-test body. A timed waiter starves on a held lock while another thread sleeps on the
/// lock word; its deadline passes, and just before it leaves the starving count the holder
/// unlocks: the hand-over wakes nobody (the starving waiter is running) and is taken back,
/// freeing the lock without waking the sleeper (the starving waiter would take the lock
/// marked "sleepers" and wake it on release). Leaving instead, the starving waiter must wake
/// the sleeper, or it sleeps beside a free lock. Exits 0 if the sleeper got the lock well
/// before its own 5 s deadline.
func starvingWaiterLeavesAfterItsHandOverWasTakenBack() {
  let lock = Lock()
  let core = lock.core
  let target = UInt(bitPattern: core.base)
  nonisolated(unsafe) let word = core.word
  nonisolated(unsafe) let futexWord = core.futexWord
  nonisolated(unsafe) let takeBackWake = core.takeBackWake
  let sleepWord = UInt(bitPattern: core.futexWord)
  let holding = Gate()
  let starving = Gate()
  let leaving = Gate()
  let released = Gate()
  let sleeperThread = AtomicInteger<Int32>(0)
  let sleeperWaited = AtomicInteger<Int>(-1)
  // Set before any thread starts (thread creation orders it before every read).
  FutexLock.beforeLeavingStarving = { base in
    guard UInt(bitPattern: base) == target, !leaving.isOpen else { return }
    leaving.open()
    released.wait()
  }
  runConcurrently(3) { index in
    switch index {
    case 1:
      // The timed waiter: starves, then gives up at its deadline.
      holding.wait()
      let acquired = lock.lock(timeout: .milliseconds(300))
      if acquired { lock.unlock() }
    case 2:
      // The sleeper, once the other waiter starves (so the word's wake-up is not its).
      starving.wait()
      sleeperThread.store(tk_gettid(), ordering: .relaxed)
      sleeperWaited.store(
        acquiresPromptly({ lock.lock(timeout: $0) }, release: { lock.unlock() }) ? 1 : 0, ordering: .relaxed)
    default:
      lock.lock()
      holding.open()
      let giveUp = monotonicSeconds() + 10
      while UInt64.atomicLoad(at: word, ordering: .relaxed) & FutexLock.lockBits != 2 && monotonicSeconds() < giveUp {
        sched_yield()
      }
      // Keep it asleep past the starvation threshold (the duration under test).
      busy(seconds: 0.002)
      // Wake it with the lock still held: it counts itself as starving.
      while UInt64.atomicLoad(at: word, ordering: .relaxed) & FutexLock.starvingMask == 0
        && monotonicSeconds() < giveUp
      {
        Futex.wake(futexWord, count: 1)
        sched_yield()
      }
      starving.open()
      while (sleeperThread.load(ordering: .relaxed) == 0
        || !isBlockedInFutex(thread: sleeperThread.load(ordering: .relaxed), on: sleepWord))
        && monotonicSeconds() < giveUp
      {
        sched_yield()
      }
      // The timed waiter's deadline passes; it stops just before leaving.
      leaving.wait()
      // As if a take-back had just woken a sleeper: the next one within the millisecond
      // wakes nobody, leaving the wake-up to the starving waiter.
      UInt32.atomicStore(FutexLock.takeBackWakeNow, at: takeBackWake, ordering: .relaxed)
      lock.unlock()
      released.open()
    }
  }
  FutexLock.beforeLeavingStarving = nil
  _exit(sleeperWaited.load(ordering: .relaxed) == 1 ? 0 : 1)
}

/// Exit-test body. A waiter starves on a held lock; just before it reads the hand-over
/// counter to sleep on it, the holder unlocks: the hand-over wakes nobody (the waiter is
/// running), so the holder takes it back and frees the lock. The waiter then reads the
/// bumped counter and a free lock: it must take the lock, not sleep on a counter no release
/// will bump again. Exits 0 if it got the lock well before its 5 s deadline.
func starvingWaiterMissesItsHandOver() {
  let lock = Lock()
  let core = lock.core
  let target = UInt(bitPattern: core.base)
  nonisolated(unsafe) let word = core.word
  nonisolated(unsafe) let futexWord = core.futexWord
  let holding = Gate()
  let releaseNow = Gate()
  let released = Gate()
  let waited = AtomicInteger<Int>(-1)
  // Set before any thread starts (thread creation orders it before every read).
  FutexLock.beforeStarvingSleep = { base in
    guard UInt(bitPattern: base) == target, !releaseNow.isOpen else { return }
    releaseNow.open()
    released.wait()
  }
  runConcurrently(2) { index in
    if index == 1 {
      holding.wait()
      waited.store(acquiresPromptly({ lock.lock(timeout: $0) }, release: { lock.unlock() }) ? 1 : 0, ordering: .relaxed)
      return
    }
    lock.lock()
    holding.open()
    let giveUp = monotonicSeconds() + 10
    while UInt64.atomicLoad(at: word, ordering: .relaxed) & FutexLock.lockBits != 2 && monotonicSeconds() < giveUp {
      sched_yield()
    }
    // Keep it asleep past the starvation threshold (the duration under test).
    busy(seconds: 0.002)
    // Wake it with the lock still held: it counts itself as starving and reaches the hook.
    while !releaseNow.isOpen && monotonicSeconds() < giveUp {
      Futex.wake(futexWord, count: 1)
      sched_yield()
    }
    precondition(releaseNow.isOpen, "the waiter never started to starve")
    lock.unlock()
    released.open()
  }
  FutexLock.beforeStarvingSleep = nil
  _exit(waited.load(ordering: .relaxed) == 1 ? 0 : 1)
}

@Suite("Lock fairness across fork", .timeLimit(.minutes(3)))
struct LockFairnessForkTests {
  // Not under ThreadSanitizer: its runtime supports only async-signal-safe calls in the
  // child of a multithreaded fork.
  @Test(
    "a lock held at a fork while a waiter starves on it still works in the child, where that waiter does not exist",
    .disabled(if: isRunningUnderThreadSanitizer, "ThreadSanitizer does not support a multithreaded fork's child"),
    .runsExitTests,
    arguments: [0, 2, 3, 4])
  func starvingWaiterLeftInTheParent(subjectIndex: Int) async {
    await #expect(processExitsWith: .success) { [subjectIndex] in
      blocking { lockAcrossForkWithStarvingWaiter(HandOverSubject.all[subjectIndex]) }
    }
  }
}

@Suite("Lock fairness across fork, with threads in the child", .timeLimit(.minutes(3)))
struct LockFairnessForkSleeperTests {
  // Not under any sanitizer: the child of the exit test's multithreaded process starts a
  // thread, and a sanitizer's runtime state can be copied locked into such a child.
  @Test(
    "in the child of a fork, a thread asleep on a lock whose starving waiter stayed in the parent is woken by the unlock",
    .disabled(
      if: isRunningUnderSanitizer, "a sanitizer's runtime may be copied locked into a multithreaded fork's child"),
    .runsExitTests,
    arguments: HandOverSubject.indicesWithSleepWord)
  func sleeperInTheChildIsWoken(subjectIndex: Int) async {
    await #expect(processExitsWith: .success) { [subjectIndex] in
      blocking { sleeperInForkedChildIsWoken(HandOverSubject.all[subjectIndex]) }
    }
  }
}

/// Makes a waiter starve on a held lock (`Lock`, `RecursiveLock`, or a `ReadWriteLock` held
/// for writing or reading with a writer starving), forks, and in the child starts a thread
/// that sleeps on the lock (for a `ReadWriteLock`, a writer), then unlocks. The unlock hands
/// the lock to the starving waiter, which does not exist in the child, so the hand-over
/// wakes nobody and is taken back: that must wake the new sleeper, which in the parent the
/// starving waiter's own release would. Exits 0 if the child's thread got the lock.
func sleeperInForkedChildIsWoken(_ subject: HandOverSubject) {
  guard let sleepWord = subject.sleepWord else { preconditionFailure("no word the waiters sleep on") }
  forkWithStarvingWaiter(subject) {
    let sleeper = AtomicInteger<Int32>(0)
    let acquired = AtomicBool(false)
    let thread = startThread {
      sleeper.store(tk_gettid(), ordering: .relaxed)
      subject.lock()
      acquired.store(true, ordering: .relaxed)
      subject.unlock()
    }
    while sleeper.load(ordering: .relaxed) == 0 { sched_yield() }
    let tid = sleeper.load(ordering: .relaxed)
    while !isBlockedInFutex(thread: tid, on: sleepWord) { sched_yield() }
    subject.unlock()
    joinThread(thread)
    return acquired.load(ordering: .relaxed)
  }
}

/// Makes a waiter starve on a held lock, forks, and in the child releases and re-uses the
/// lock (the child has no waiter to hand it to). Exits with the child's status.
func lockAcrossForkWithStarvingWaiter(_ subject: HandOverSubject) {
  forkWithStarvingWaiter(subject) {
    subject.unlock()
    for _ in 0..<3 {
      subject.lock()
      subject.unlock()
    }
    // Free for anyone: the waiter's kind of lock, then the holder's (for a read-write lock
    // held by a reader, a read lock beside the absent writer's count).
    guard subject.tryLock() else { return false }
    subject.unlock()
    return subject.tryHold()
  }
}

/// Exit-test body. Holds `subject`'s lock while another thread waits for it until it
/// starves, then forks; the child (whose only thread holds the lock, with a starving count
/// of a waiter that is not there) runs `child` under a 10 s alarm and exits 0 if it returns
/// true. Then the lock is handed to the waiter in this process, and this process exits
/// with the child's verdict.
func forkWithStarvingWaiter(_ subject: HandOverSubject, child: @escaping @Sendable () -> Bool) {
  let holding = Gate()
  let childFailed = AtomicInteger<Int>(1)
  runConcurrently(2) { index in
    if index == 0 {
      holding.wait()
      subject.lock()
      subject.unlock()
      return
    }
    subject.hold()
    holding.open()
    let giveUp = monotonicSeconds() + 10
    while !subject.waiterSleeps() && monotonicSeconds() < giveUp { sched_yield() }
    // Keep it asleep past the starvation threshold (the duration under test).
    busy(seconds: 0.002)
    // Woken while the lock is still held, after over a millisecond asleep: it starves.
    while !subject.waiterStarves() && monotonicSeconds() < giveUp {
      subject.wakeWaiter()
      sched_yield()
    }
    precondition(subject.waiterStarves(), "no starving waiter")
    let process = fork()
    if process == 0 {
      var alarmOnly = sigset_t()
      sigemptyset(&alarmOnly)
      sigaddset(&alarmOnly, SIGALRM)
      pthread_sigmask(SIG_UNBLOCK, &alarmOnly, nil)
      alarm(10)
      _exit(child() ? 0 : 1)
    }
    precondition(process > 0, "fork failed: \(errno)")
    var status: Int32 = 0
    while waitpid(process, &status, 0) == -1 {
      precondition(errno == EINTR, "waitpid failed: \(errno)")
    }
    childFailed.store(status == 0 ? 0 : 1, ordering: .relaxed)
    subject.unlock()  // hands the lock to the waiter, which exists here
  }
  _exit(childFailed.load(ordering: .relaxed) == 0 ? 0 : 1)
}

/// The interleavings that can lose a starving writer's wake-up, forced through
/// `ReadWriteLock.beforeStarvingSleep` (a global hook: set inside an exit test, before any
/// thread starts, so no other test's threads read it).
@Suite("ReadWriteLock hand-over races", .timeLimit(.minutes(3)))
struct ReadWriteLockHandOverRaceTests {
  @Test(
    "a starving writer whose hand-over from a writer was taken back before it slept takes the free lock", .runsExitTests
  )
  func writersHandOverTakenBack() async {
    await #expect(processExitsWith: .success) {
      blocking { starvingWriterRace(.writerReleases) }
    }
  }

  @Test(
    "a starving writer whose hand-over from the last reader was taken back before it slept takes the free lock",
    .runsExitTests)
  func lastReadersHandOverTakenBack() async {
    await #expect(processExitsWith: .success) {
      blocking { starvingWriterRace(.lastReaderReleases) }
    }
  }

  @Test(
    "a reader that barges in after a hand-over was taken back hands the lock to the starving writer when it leaves",
    .runsExitTests)
  func readerBargingAfterATakeBackHandsOver() async {
    await #expect(processExitsWith: .success) {
      blocking { starvingWriterRace(.readerBargesAfterTakeBack) }
    }
  }
}

/// What the holder does while the starving writer stands just before loading the hand-over
/// counter.
enum StarvingWriterRace: Sendable {
  /// The write holder releases: the hand-over wakes nobody and is taken back.
  case writerReleases
  /// The only reader releases: likewise, from the reader's side.
  case lastReaderReleases
  /// The write holder releases (taken back), then takes a read lock before the writer looks,
  /// and releases it only once the writer sleeps.
  case readerBargesAfterTakeBack
}

/// Exit-test body: a writer starves on a held `ReadWriteLock`; in the hook's window the holder
/// does what `race` says. Exits 0 if the writer got the lock well before its 5 s deadline.
func starvingWriterRace(_ race: StarvingWriterRace) {
  let lock = ReadWriteLock()
  nonisolated(unsafe) let state = lock.state
  nonisolated(unsafe) let notify = lock.writerNotify
  let starvingWord = UInt(bitPattern: lock.handOff)
  let target = UInt(bitPattern: state)
  let holding = Gate()
  let releaseNow = Gate()
  let released = Gate()
  let waiterThread = AtomicInteger<Int32>(0)
  let waited = AtomicInteger<Int>(-1)
  // Set before any thread starts (thread creation orders it before every read).
  ReadWriteLock.beforeStarvingSleep = { word in
    guard UInt(bitPattern: word) == target, !releaseNow.isOpen else { return }
    releaseNow.open()
    released.wait()
  }
  runConcurrently(2) { index in
    if index == 1 {
      waiterThread.store(tk_gettid(), ordering: .relaxed)
      holding.wait()
      waited.store(
        acquiresPromptly({ lock.writeLock(timeout: $0) }, release: { lock.unlock() }) ? 1 : 0, ordering: .relaxed)
      return
    }
    if race == .lastReaderReleases { lock.readLockForScope() } else { lock.lockForScope() }
    holding.open()
    let giveUp = monotonicSeconds() + 10
    while UInt32.atomicLoad(at: state, ordering: .relaxed) & ReadWriteLock.writersWaiting == 0
      && monotonicSeconds() < giveUp
    {
      sched_yield()
    }
    // Keep it asleep past the starvation threshold (the duration under test).
    busy(seconds: 0.002)
    // Wake it with the lock still held: it counts itself as starving and reaches the hook.
    while !releaseNow.isOpen && monotonicSeconds() < giveUp {
      Futex.wake(notify, count: 1)
      sched_yield()
    }
    precondition(releaseNow.isOpen, "the writer never started to starve")
    lock.unlock()
    guard race == .readerBargesAfterTakeBack else {
      released.open()
      return
    }
    let barged = lock.tryReadLock()
    released.open()
    guard barged else { return }
    // Leave only once the writer sleeps on its word after seeing the read lock: this
    // release is then the only thing that can wake it.
    let waiter = waiterThread.load(ordering: .relaxed)
    while !isBlockedInFutex(thread: waiter, on: starvingWord) && monotonicSeconds() < giveUp { sched_yield() }
    lock.unlock()
  }
  ReadWriteLock.beforeStarvingSleep = nil
  _exit(waited.load(ordering: .relaxed) == 1 ? 0 : 1)
}

/// Whether thread `thread` (a kernel thread id of this process) is inside a system call whose
/// first argument is `address`, as `/proc/self/task/TID/syscall` shows (the call's number,
/// then its arguments in hex): for a lock's futex word, a `futex` call on it.
func isBlockedInFutex(thread: Int32, on address: UInt) -> Bool {
  let descriptor = open("/proc/self/task/\(thread)/syscall", O_RDONLY)
  guard descriptor >= 0 else { return false }
  defer { close(descriptor) }
  var bytes = [UInt8](repeating: 0, count: 256)
  let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 255) }
  guard count > 0 else { return false }
  let fields = String(decoding: bytes[0..<count], as: UTF8.self).split(separator: " ")
  guard fields.count >= 2, fields[1].hasPrefix("0x") else { return false }
  return UInt(fields[1].dropFirst(2), radix: 16) == address
}

/// The spin lock's single-store `unlock()` can miss a waiter that registers at that very
/// moment; the waiter's time-limited sleep is what recovers it. White box: the lock is freed
/// with the store alone, as in that race, and the sleeping waiter must still take it.
@Suite("SpinLock sleeping waiters", .timeLimit(.minutes(3)))
struct SpinLockSleepingWaiterTests {
  @Test("a sleeping waiter whose release woke nobody takes the lock within its time limit")
  func releaseThatWakesNobody() {
    let lock = SpinLock()
    nonisolated(unsafe) let word = lock.core.word
    nonisolated(unsafe) let waiters = lock.waiters
    let holding = Gate()
    let released = TimedGate()
    let waited = AtomicInteger<Int>(-1)
    runConcurrently(2) { index in
      if index == 1 {
        holding.wait()
        let acquired = lock.lock(timeout: .seconds(10))
        if acquired { lock.unlock() }
        released.wait()
        // Acquired well before the deadline: within its sleep's time limit (1 ms at most)
        // of the release, with a wide margin for a loaded machine.
        waited.store(acquired && monotonicSeconds() - released.openedAt < 1 ? 1 : 0, ordering: .relaxed)
        return
      }
      lock.lockForScope()
      holding.open()
      let giveUp = monotonicSeconds() + 10
      while UInt64.atomicLoad(at: waiters, ordering: .relaxed) == 0 && monotonicSeconds() < giveUp { sched_yield() }
      #expect(UInt64.atomicLoad(at: waiters, ordering: .relaxed) != 0, "the waiter never slept")
      // Free it as the racing release does: the store alone, no wake-up.
      released.open()
      UInt64.atomicStore(0, at: word, ordering: .releasing)
    }
    #expect(waited.load(ordering: .relaxed) == 1)
    #expect(UInt64.atomicLoad(at: waiters, ordering: .relaxed) == 0, "a waiter stayed counted")
  }

  @Test("eight threads counting under a spin lock lose no increment, with waiters sleeping and starving")
  func contendedCountIsExact() {
    let lock = SpinLock()
    let counter = PerThread(1)
    let perThread = isRunningUnderThreadSanitizer ? 2_000 : 20_000
    runConcurrently(8) { index in
      for round in 0..<perThread {
        lock.lockForScope()
        counter.acquisitionSlots[0] += 1
        // Now and then a long hold, so the others sleep and some starve.
        if round % 1_000 == index { busy(seconds: 0.002) }
        lock.unlock()
      }
    }
    #expect(counter.acquisitions[0] == 8 * perThread)
    #expect(UInt64.atomicLoad(at: lock.waiters, ordering: .relaxed) == 0)
  }
}

/// A gate that remembers when it was opened (monotonic seconds).
private final class TimedGate: @unchecked Sendable {
  // @unchecked: `opened` is written once before `gate` opens, read after it is open.
  private let gate = Gate()
  private var opened = 0.0
  func open() {
    opened = monotonicSeconds()
    gate.open()
  }
  func wait() { gate.wait() }
  var openedAt: Double { opened }
}
