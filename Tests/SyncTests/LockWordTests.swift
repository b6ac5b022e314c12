import CThreadingShims
import Glibc
import ProcessTestSupport
import Testing

@_spi(Benchmarking) @testable import Sync

/// A lock built on `FutexLock`, seen through its word (white box).
struct LockWordSubject: Sendable, CustomTestStringConvertible {
  let testDescription: String
  let lock: @Sendable () -> Void
  let unlock: @Sendable () -> Void
  /// The address of the lock word (64 bits: state and owner).
  let word: UInt

  var wordPointer: UnsafeMutablePointer<UInt64> { UnsafeMutablePointer(bitPattern: word)! }
  var current: UInt64 { UInt64.atomicLoad(at: wordPointer, ordering: .relaxed) }

  static var all: [LockWordSubject] {
    let lock = Lock()
    let value = LockedValue(0)
    let recursive = RecursiveLock()
    let spin = SpinLock()
    return [
      LockWordSubject(
        testDescription: "Lock", lock: { lock.lockForScope() }, unlock: { lock.unlock() },
        word: UInt(bitPattern: lock.core.word)),
      LockWordSubject(
        testDescription: "LockedValue", lock: { value.lockForScope() }, unlock: { value.unlockForScope() },
        word: UInt(bitPattern: value.core.word)),
      LockWordSubject(
        testDescription: "RecursiveLock", lock: { recursive.lockForScope() }, unlock: { recursive.unlock() },
        word: UInt(bitPattern: recursive.core.word)),
      LockWordSubject(
        testDescription: "SpinLock", lock: { spin.lockForScope() }, unlock: { spin.unlock() },
        word: UInt(bitPattern: spin.core.word)),
    ]
  }
}

extension LockedValue {
  /// The bare lock operations, for white-box tests of the word.
  func lockForScope() { core.acquire(spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "LockedValue") }
  func unlockForScope() { core.release(checkOwner: true, typeName: "LockedValue") }
}

/// The lock word keeps the owner's thread tag beside the state bits, so that an uncontended
/// pair is two compare-and-swaps and nothing else; what the tag answers must stay exact.
@Suite("Lock word", .timeLimit(.minutes(3)))
struct LockWordTests {
  @Test(
    "a held lock's word is 1 with the holder's tag above the state bits; a released one is 0",
    arguments: LockWordSubject.all)
  func heldWordNamesTheHolder(subject: LockWordSubject) {
    #expect(subject.current == 0)
    subject.lock()
    let held = subject.current
    #expect(held & FutexLock.stateMask == 1)
    #expect(held >> FutexLock.ownerShift == currentThreadTag())
    // Another thread reads the holder's tag, which is not its own.
    let otherSeesHolder = AtomicBool(false)
    let otherThinksItHolds = AtomicBool(true)
    let holder = currentThreadTag()
    runConcurrently(1) { _ in
      let core = FutexLock(existingWordsAt: UnsafeMutableRawPointer(subject.wordPointer))
      otherSeesHolder.store(core.ownerTag == holder, ordering: .relaxed)
      otherThinksItHolds.store(core.isHeldByCurrentThread, ordering: .relaxed)
    }
    #expect(otherSeesHolder.load(ordering: .relaxed))
    #expect(!otherThinksItHolds.load(ordering: .relaxed))
    subject.unlock()
    #expect(subject.current == 0, "the release leaves no owner behind")
  }

  @Test("with the starving count full, a waiter past the threshold stays an ordinary sleeper and still gets the lock")
  func fullStarvingCountKeepsTheOwnerBits() {
    let lock = Lock()
    nonisolated(unsafe) let word = lock.core.word
    // The count as 16,383 starving waiters would leave it (they do not exist: releases
    // hand over to nobody and take the hand-over back).
    let fake = FutexLock.starvingMask
    // Woken until it has slept again, so its attempt to count itself as starving is behind
    // us; with the count full it must sleep on as an ordinary waiter.
    let acquired = wakeAWaiterPastTheThreshold(
      lock, prepare: { _ = UInt64.atomicFetchAdd(fake, at: word, ordering: .relaxed) }
    ) { sleptAgain in
      #expect(sleptAgain, "the woken waiter never went back to sleep")
      let seen = UInt64.atomicLoad(at: word, ordering: .relaxed)
      #expect(seen & FutexLock.starvingMask == fake, "the waiter pushed the starving count past its bits")
      #expect(seen >> FutexLock.ownerShift == currentThreadTag(), "the owner bits changed under the holder")
    }
    #expect(acquired, "the ordinary waiter never got the lock")
    _ = UInt64.atomicFetchAdd(0 &- fake, at: word, ordering: .relaxed)
    #expect(UInt64.atomicLoad(at: word, ordering: .relaxed) == 0)
  }
}

/// `tryLock()` of every lock on the futex word takes a free lock whose word still counts
/// starving waiters (left by a hand-over nobody was woken for, or by a fork: the waiters do
/// not exist in the child), as `lock()` does.
@Suite("Lock word: tryLock with a starving count left", .timeLimit(.minutes(3)))
struct TryLockWithStarvingCountTests {
  struct Subject: Sendable, CustomTestStringConvertible {
    let testDescription: String
    let tryLock: @Sendable () -> Bool
    let unlock: @Sendable () -> Void
    let word: UInt
    var pointer: UnsafeMutablePointer<UInt64> { UnsafeMutablePointer(bitPattern: word)! }

    static var all: [Subject] {
      let lock = Lock()
      let recursive = RecursiveLock()
      let condition = Condition()
      let conditionLock = ConditionLock(condition: 0)
      return [
        Subject(
          testDescription: "Lock", tryLock: { lock.tryLock() }, unlock: { lock.unlock() },
          word: UInt(bitPattern: lock.core.word)),
        Subject(
          testDescription: "RecursiveLock", tryLock: { recursive.tryLock() }, unlock: { recursive.unlock() },
          word: UInt(bitPattern: recursive.core.word)),
        Subject(
          testDescription: "Condition", tryLock: { condition.tryLock() }, unlock: { condition.unlock() },
          word: UInt(bitPattern: condition.lockCore.word)),
        Subject(
          testDescription: "ConditionLock", tryLock: { conditionLock.tryLock() }, unlock: { conditionLock.unlock() },
          word: UInt(bitPattern: conditionLock.lockCore.word)),
      ]
    }
  }

  @Test("a free lock whose word counts absent starving waiters is taken by tryLock", arguments: Subject.all)
  func tryLockTakesAFreeLockWithAStarvingCount(subject: Subject) {
    _ = UInt64.atomicFetchAdd(FutexLock.starvingUnit, at: subject.pointer, ordering: .relaxed)
    #expect(subject.tryLock(), "tryLock refused a free lock")
    // The release hands over to the counted waiter, wakes nobody and takes it back.
    subject.unlock()
    _ = UInt64.atomicFetchAdd(0 &- FutexLock.starvingUnit, at: subject.pointer, ordering: .relaxed)
    #expect(UInt64.atomicLoad(at: subject.pointer, ordering: .relaxed) == 0)
  }
}

/// The benchmark switch that turns the bounded wait off, in a process of its own (it is
/// process-wide, and the fairness tests beside it rely on the bound).
@Suite("Lock word: the hand-over bound's switch", .timeLimit(.minutes(3)))
struct HandOverBoundSwitchTests {
  @Test(
    "a waiter kept asleep past the threshold counts as starving with the bound on, and never with it off",
    .runsExitTests)
  func theSwitchDecidesWhetherAWaiterStarves() async throws {
    let result = try await #require(processExitsWith: .success, observing: [\.standardOutputContent]) {
      let on = starvingBitsAfterALongSleep()
      LockBenchmarkSwitches.handOverBound = false
      let off = starvingBitsAfterALongSleep()
      LockBenchmarkSwitches.handOverBound = true
      print("starving bits: \(on.bits) \(off.bits)")
      print("acquired: \(on.acquired ? 1 : 0) \(off.acquired ? 1 : 0)")
    }
    let output = String(decoding: result.standardOutputContent, as: UTF8.self)
    let bits = try #require(printedFigures(result.standardOutputContent, after: "starving bits: ").last)
    let acquired = try #require(printedFigures(result.standardOutputContent, after: "acquired: ").last)
    try #require(bits.count == 2 && acquired.count == 2, "the child printed \(output)")
    #expect(bits[0] == Int(FutexLock.starvingUnit), "bound on: one starving waiter (\(output))")
    #expect(bits[1] == 0, "bound off: no starving waiter (\(output))")
    #expect(acquired == [1, 1], "the waiter got the lock in both runs (\(output))")
  }
}

/// The starving bits of a `Lock`'s word once a waiter kept asleep past the starvation
/// threshold has either counted itself as starving or gone back to sleep as an ordinary
/// waiter, and whether it got the lock afterwards.
private func starvingBitsAfterALongSleep() -> (bits: UInt64, acquired: Bool) {
  let lock = Lock()
  nonisolated(unsafe) let word = lock.core.word
  let bits = AtomicInteger<UInt64>(0)
  // A starving waiter adds itself to the count and sleeps on the hand-over counter (which
  // the wake-ups do not touch); an ordinary one sleeps on the word again.
  let acquired = wakeAWaiterPastTheThreshold(
    lock, settled: { UInt64.atomicLoad(at: word, ordering: .relaxed) & FutexLock.starvingMask != 0 }
  ) { _ in
    bits.store(UInt64.atomicLoad(at: word, ordering: .relaxed) & FutexLock.starvingMask, ordering: .relaxed)
  }
  return (bits.load(ordering: .relaxed), acquired)
}

/// Keeps a waiter of `lock` asleep past the starvation threshold, then wakes it with the
/// lock still held, as a release whose lock is re-taken at once would: it finds the lock
/// held after over a millisecond asleep and may count itself as starving.
///
/// The calling side takes the lock and runs `prepare` before the waiter starts; it wakes
/// the waiter until `settled()` holds or the waiter has slept again (its voluntary context
/// switches grew by two), calls `inspect` with whether it slept again, the lock still held,
/// and releases. Returns whether the waiter then got the lock (within 10 s).
private func wakeAWaiterPastTheThreshold(
  _ lock: Lock, prepare: @escaping @Sendable () -> Void = {}, settled: @escaping @Sendable () -> Bool = { false },
  inspect: @escaping @Sendable (_ sleptAgain: Bool) -> Void
) -> Bool {
  nonisolated(unsafe) let futexWord = lock.core.futexWord
  let acquired = AtomicBool(false)
  let holding = Gate()
  let waiterThread = AtomicInteger<Int32>(0)
  runConcurrently(2) { index in
    if index == 1 {
      waiterThread.store(tk_gettid(), ordering: .relaxed)
      holding.wait()
      acquired.store(lock.lock(timeout: .seconds(10)), ordering: .relaxed)
      if acquired.load(ordering: .relaxed) { lock.unlock() }
      return
    }
    lock.lockForScope()
    prepare()
    holding.open()
    let giveUp = monotonicSeconds() + 10
    while !isBlockedInFutex(thread: waiterThread.load(ordering: .relaxed), on: UInt(bitPattern: futexWord))
      && monotonicSeconds() < giveUp
    {
      sched_yield()
    }
    let waiter = waiterThread.load(ordering: .relaxed)
    let end = monotonicSeconds() + 0.002
    while monotonicSeconds() < end {}
    let sleepsBefore = voluntarySwitches(of: waiter)
    while !settled() && voluntarySwitches(of: waiter) < sleepsBefore + 2 && monotonicSeconds() < giveUp {
      Futex.wake(futexWord, count: 1)
      sched_yield()
    }
    inspect(voluntarySwitches(of: waiter) >= sleepsBefore + 2)
    lock.unlock()
  }
  return acquired.load(ordering: .relaxed)
}

/// How many times `thread` (a kernel thread id of this process) has blocked voluntarily:
/// each sleep in the kernel counts one. -1 when its status cannot be read.
private func voluntarySwitches(of thread: Int32) -> Int {
  let descriptor = open("/proc/self/task/\(thread)/status", O_RDONLY)
  guard descriptor >= 0 else { return -1 }
  defer { close(descriptor) }
  var bytes = [UInt8](repeating: 0, count: 4096)
  let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 4095) }
  guard count > 0 else { return -1 }
  for line in String(decoding: bytes[0..<count], as: UTF8.self).split(separator: "\n")
  where line.hasPrefix("voluntary_ctxt_switches:") {
    return Int(String(line.dropFirst("voluntary_ctxt_switches:".count).drop { $0 == " " || $0 == "\t" })) ?? -1
  }
  return -1
}
