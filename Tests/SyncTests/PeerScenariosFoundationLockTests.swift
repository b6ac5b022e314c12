import Glibc
import ProcessTestSupport
import Sync
import Testing

// swift-corelibs-foundation's TestNSLock, TestNSCondition and TestNSConditionLock scenarios
// (NSLock, NSRecursiveLock, NSCondition, NSConditionLock), written against this toolkit's
// API. Foundation's `Date` deadlines become `MonotonicInstant` deadlines (`before:`) and
// `TimeInterval` limits become `Duration` limits (`timeout:`).

/// The locks that stand in for Foundation's `NSLocking` classes.
private let lockKinds: [(String, @Sendable () -> any Locking)] = [
  ("Lock", { Lock() }), ("RecursiveLock", { RecursiveLock() }), ("Condition", { Condition() }),
  ("ConditionLock", { ConditionLock() }),
]

/// Stress sizes scale down under the sanitizers, which slow each lock operation many times.
private let stressScale = isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer ? 10 : 1

/// A raw pthread running `body` (SyncTests sits below Threads); `join()` waits for it.
private final class PeerThread: @unchecked Sendable {
  private var thread = pthread_t()
  private final class Body {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
  }

  static func spawn(_ body: @escaping @Sendable () -> Void) -> PeerThread {
    let peer = PeerThread()
    let box = Unmanaged.passRetained(Body(body)).toOpaque()
    let result = pthread_create(
      &peer.thread, nil,
      { raw in
        Unmanaged<Body>.fromOpaque(raw!).takeRetainedValue().run()
        return nil
      }, box)
    precondition(result == 0, "pthread_create failed: \(result)")
    return peer
  }

  /// Runs `body` on a new thread and waits for it.
  static func run(_ body: @escaping @Sendable () -> Void) { spawn(body).join() }

  func join() {
    let result = pthread_join(thread, nil)
    precondition(result == 0, "pthread_join failed: \(result)")
  }
}

/// Values written on one thread and read on another under a lock of the test.
private final class Shared<Value>: @unchecked Sendable {
  var value: Value
  init(_ value: Value) { self.value = value }
}

/// The elements appended under a lock of the test, in order.
private final class Recorder: @unchecked Sendable {
  private let lock = Lock()
  private var elements: [Int] = []
  func append(_ element: Int) { lock.withLock { elements.append(element) } }
  var snapshot: [Int] { lock.withLock { elements } }
}

@Suite("Foundation scenarios: locks", .timeLimit(.minutes(3)))
struct PeerFoundationLockTests {
  /// TestNSLock.test_lockWait: while another thread holds the lock, `lock(before:)` with a
  /// zero, negative or short limit fails (the short one only after waiting it out); once the
  /// holder releases, a long limit succeeds, and so does a passed deadline on a free lock.
  @Test(arguments: lockKinds.map(\.0))
  func timedLockFailsWhileHeldElsewhereAndSucceedsOnceReleased(kind: String) throws {
    let lock = try #require(lockKinds.first { $0.0 == kind }).1()
    let held = Semaphore()
    let release = Semaphore()
    let holder = PeerThread.spawn {
      lock.lock()
      held.signal()
      release.wait()
      lock.unlock()
    }
    held.wait()
    #expect(!lock.lock(before: .now))
    #expect(!lock.lock(before: .now - .seconds(1)))
    #expect(!lock.lock(timeout: .zero))
    #expect(!lock.lock(timeout: .seconds(-1)))
    #expect(!lock.tryLock())
    let start = MonotonicInstant.now
    #expect(!lock.lock(timeout: .milliseconds(40)))
    #expect(MonotonicInstant.now - start >= .milliseconds(40))

    release.signal()
    #expect(lock.lock(timeout: .seconds(30)))
    lock.unlock()
    holder.join()
    #expect(lock.lock(before: .now - .seconds(1)))
    lock.unlock()
    #expect(lock.tryLock())
    lock.unlock()
  }

  /// TestNSLock.test_threadsAndLocks: ten threads released together by a condition
  /// broadcast take the lock with a shared deadline many times; afterwards the lock is free.
  @Test func threadsReleasedByABroadcastShareALockWithACommonDeadline() {
    let gate = Condition()
    let open = Shared(false)  // guarded by `gate`
    let acquisitions = Shared(0)  // guarded by `lock`
    let lock = Lock()
    let started = Latch(count: 10)
    let deadline = MonotonicInstant.after(.seconds(30))
    let threads = (0..<10).map { _ in
      PeerThread.spawn {
        gate.withLock {
          started.countDown()
          gate.wait(until: { open.value })
        }
        for _ in 0..<(500 / stressScale) {
          if lock.lock(before: deadline) {
            acquisitions.value += 1
            lock.unlock()
          }
        }
      }
    }
    started.wait()
    gate.withLock {
      open.value = true
      gate.broadcast()
    }
    for thread in threads { thread.join() }
    #expect(lock.withLock { acquisitions.value } == 10 * (500 / stressScale))
    #expect(lock.tryLock())
    lock.unlock()
  }

  /// TestNSLock.test_threadsAndLocks' other half: the shared deadline passes while the
  /// threads still contend (each holding the lock long enough for the others to starve
  /// into hand-over), and they go on trying with the passed deadline. Every `true` means
  /// the lock is held alone; every `false` leaves it untouched; afterwards it is free.
  @Test(arguments: lockKinds.map(\.0))
  func contendersWhoseSharedDeadlinePassesLeaveTheLockFree(kind: String) throws {
    let lock = try #require(lockKinds.first { $0.0 == kind }).1()
    let inside = Shared(0)
    let acquired = Shared(0)
    let overlaps = Shared(0)  // guarded by `lock`
    let threadCount = isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer ? 4 : 8
    let start = Latch(count: threadCount)
    let deadline = Shared(MonotonicInstant.distantPast)
    let ready = Semaphore()
    runConcurrently(threadCount + 1) { index in
      if index == threadCount {
        deadline.value = .after(.milliseconds(150))
        for _ in 0..<threadCount { ready.signal() }
        return
      }
      ready.wait()
      let shared = deadline.value
      start.countDown()
      start.wait()
      var attempt = 0
      var pastDeadlineAttempts = 0
      while pastDeadlineAttempts < 200 {
        attempt += 1
        let got: Bool
        switch attempt % 3 {
        case 0: got = lock.lock(before: shared)
        case 1: got = lock.lock(timeout: .microseconds(Int64(attempt % 7) * 300))
        default: got = lock.tryLock()
        }
        if shared.hasPassed { pastDeadlineAttempts += 1 }
        guard got else { continue }
        inside.value += 1
        if inside.value != 1 { overlaps.value += 1 }
        acquired.value += 1
        // Held about 200 µs: long enough for the waiters to start starving.
        let until = MonotonicInstant.after(.microseconds(200))
        while !until.hasPassed {}
        inside.value -= 1
        lock.unlock()
      }
    }
    #expect(lock.tryLock())
    #expect(overlaps.value == 0)
    #expect(inside.value == 0)
    #expect(acquired.value > 0)
    lock.unlock()
    #expect(lock.lock(before: .now - .seconds(1)))
    lock.unlock()
  }

  /// TestNSLock.test_recursiveLock: ten threads count a value down with nested, balanced
  /// acquisitions of one recursive lock; the main thread waits for them with a deadline
  /// wait on a condition. The count ends at exactly zero and every thread finishes.
  @Test func nestedRecursiveLockingFromManyThreadsLosesNoUpdate() {
    let perThread = 1000 / stressScale
    let recursive = RecursiveLock()
    let value = Shared(10 * perThread)  // guarded by `recursive`
    let done = Condition()
    let finished = Shared(0)  // guarded by `done`
    let threads = (0..<10).map { _ in
      PeerThread.spawn {
        for _ in 0..<perThread {
          recursive.lock()
          value.value -= 3
          recursive.lock()
          #expect(recursive.levelsHeldByCurrentThread == 2)
          value.value += 4
          recursive.unlock()
          recursive.unlock()
          recursive.withLock {
            value.value += 2
            recursive.withLock { value.value -= 1 }
            value.value -= 3
          }
          recursive.withLock { value.value += 1 }
          recursive.withLock { value.value -= 1 }
        }
        #expect(!recursive.isHeldByCurrentThread)
        done.withLock {
          finished.value += 1
          done.broadcast()
        }
      }
    }
    let deadline = MonotonicInstant.after(.seconds(30))
    var timedOut = false
    done.withLock {
      while !timedOut && finished.value < 10 { timedOut = !done.wait(before: deadline) }
    }
    #expect(!timedOut)
    for thread in threads { thread.join() }
    #expect(recursive.withLock { value.value } == 0)
  }

  /// TestNSLock.test_withLock: ten threads each add one 10,000 times inside `withLock`.
  @Test func withLockFromManyThreadsCountsEveryIncrement() {
    let perThread = 10_000 / stressScale
    let lock = Lock()
    let counter = Shared(0)  // guarded by `lock`
    runConcurrently(10) { _ in
      for _ in 0..<perThread { lock.withLock { counter.value += 1 } }
    }
    #expect(lock.withLock { counter.value } == 10 * perThread)
  }

  /// NSRecursiveLock's `lock(before:)`: the owner re-enters at once even with a passed
  /// deadline; another thread times out until the owner has released every level.
  @Test func recursiveTimedLockWaitsForTheLastLevelToBeReleased() {
    let recursive = RecursiveLock()
    recursive.lock()
    #expect(recursive.lock(before: .now - .seconds(1)))
    #expect(recursive.lock(timeout: .zero))
    #expect(recursive.tryLock())
    #expect(recursive.levelsHeldByCurrentThread == 4)
    let otherSees = { () -> Bool in
      let result = Shared(false)
      PeerThread.run {
        let got = recursive.lock(timeout: .milliseconds(5))
        if got { recursive.unlock() }
        result.value = got
      }
      return result.value
    }
    for level in (1...3).reversed() {
      #expect(!otherSees())
      recursive.unlock()
      #expect(recursive.levelsHeldByCurrentThread == level)
    }
    #expect(!otherSees())
    recursive.unlock()
    #expect(!recursive.isHeldByCurrentThread)
    #expect(otherSees())
  }
  /// NSRecursiveLock's recursion depth: deep nesting through every acquiring form is
  /// counted exactly and released level by level; another thread gets the lock only after
  /// the last level.
  @Test func deepRecursionThroughEveryFormIsCountedAndUnwound() {
    let recursive = RecursiveLock()
    let depth = 3000
    for level in 1...depth {
      switch level % 4 {
      case 0: recursive.lock()
      case 1: #expect(recursive.tryLock())
      case 2: #expect(recursive.lock(before: .now - .seconds(1)))
      default: #expect(recursive.lock(timeout: .zero))
      }
    }
    #expect(recursive.levelsHeldByCurrentThread == depth)
    for _ in 1..<depth { recursive.unlock() }
    #expect(recursive.levelsHeldByCurrentThread == 1)
    let otherGot = Shared(true)
    PeerThread.run { otherGot.value = recursive.tryLock() }
    #expect(!otherGot.value)
    recursive.unlock()
    PeerThread.run {
      otherGot.value = recursive.tryLock()
      if otherGot.value { recursive.unlock() }
    }
    #expect(otherGot.value)
  }
}

@Suite("Foundation scenarios: conditions", .timeLimit(.minutes(3)))
struct PeerFoundationConditionTests {
  /// NSCondition `wait(until:)` with nobody signalling returns false once the deadline has
  /// passed (not before), with the lock held again; a passed or zero limit returns false at
  /// once.
  @Test func aDeadlineWaitWithoutASignalTimesOutHoldingTheLock() {
    let condition = Condition()
    condition.lock()
    let start = MonotonicInstant.now
    #expect(!condition.wait(before: .now + .milliseconds(30)))
    #expect(MonotonicInstant.now - start >= .milliseconds(30))
    #expect(condition.isHeldByCurrentThread)
    #expect(!condition.wait(before: .now - .seconds(1)))
    #expect(!condition.wait(timeout: .zero))
    #expect(!condition.wait(timeout: .seconds(-1)))
    #expect(condition.isHeldByCurrentThread)
    condition.unlock()
    #expect(!condition.isHeldByCurrentThread)
  }

  /// TestThread.test_threadStart's pattern: the waiter holds the lock from before the thread
  /// starts until it waits, so a signal given under the lock cannot be lost.
  @Test func aSignalGivenUnderTheLockAfterTheWaiterLockedIsNotLost() throws {
    let condition = Condition()
    let signalled = Shared(false)  // guarded by `condition`
    condition.lock()
    let signaller = PeerThread.spawn {
      condition.withLock {
        signalled.value = true
        condition.signal()
      }
    }
    let deadline = MonotonicInstant.after(.seconds(30))
    var inTime = true
    while !signalled.value && inTime { inTime = condition.wait(before: deadline) }
    condition.unlock()
    #expect(inTime && signalled.value)
    signaller.join()
  }

  /// Each `signal()` lets one waiter through and `broadcast()` releases all of them; with
  /// tickets counted under the lock, spurious wake-ups cannot make a waiter pass early.
  @Test func eachSignalReleasesOneWaiterAndBroadcastReleasesTheRest() {
    struct State { var tickets = 0, everyone = false, waiting = 0, passed = 0 }
    let condition = Condition()
    let state = Shared(State())  // guarded by `condition`
    let threads = (0..<6).map { _ in
      PeerThread.spawn {
        condition.withLock {
          state.value.waiting += 1
          condition.broadcast()
          condition.wait(until: { state.value.tickets > 0 || state.value.everyone })
          if !state.value.everyone { state.value.tickets -= 1 }
          state.value.passed += 1
          condition.broadcast()
        }
      }
    }
    condition.withLock { condition.wait(until: { state.value.waiting == 6 }) }
    for released in 1...2 {
      condition.withLock {
        state.value.tickets += 1
        condition.signal()
        condition.wait(until: { state.value.passed == released })
      }
    }
    #expect(condition.withLock { state.value.passed } == 2)
    condition.withLock {
      state.value.everyone = true
      condition.broadcast()
      condition.wait(until: { state.value.passed == 6 })
    }
    for thread in threads { thread.join() }
    #expect(condition.withLock { state.value.passed } == 6)
    #expect(condition.withLock { state.value.tickets } == 0)
  }
}

@Suite("Foundation scenarios: condition locks", .timeLimit(.minutes(3)))
struct PeerFoundationConditionLockTests {
  /// `init(condition:)`, `condition`, and the try and deadline forms: a matching condition on
  /// a free lock is taken even with a passed deadline; a different one times out.
  @Test func conditionFormsTakeTheLockOnlyForTheCurrentCondition() {
    let lock = ConditionLock(condition: 7)
    #expect(lock.condition == 7)
    #expect(!lock.tryLock(whenCondition: 6))
    #expect(!lock.lock(whenCondition: 6, before: .now - .seconds(1)))
    #expect(!lock.lock(whenCondition: 6, timeout: .milliseconds(10)))
    #expect(lock.tryLock(whenCondition: 7))
    lock.unlock(withCondition: 8)
    #expect(lock.condition == 8)
    #expect(lock.lock(whenCondition: 8, before: .now - .seconds(1)))
    lock.unlock()
    #expect(lock.condition == 8)
    lock.lock()
    lock.unlock(withCondition: 1)
    #expect(lock.lock(whenCondition: 1, timeout: .zero))
    lock.unlock()
  }

  /// The condition is a whole `Int`: the extreme values survive the round trip.
  @Test func extremeConditionValuesAreKeptExactly() {
    let lock = ConditionLock(condition: Int.min)
    #expect(lock.condition == Int.min)
    #expect(lock.tryLock(whenCondition: Int.min))
    lock.unlock(withCondition: Int.max)
    #expect(lock.condition == Int.max)
    #expect(!lock.tryLock(whenCondition: -1))
    #expect(lock.lock(whenCondition: Int.max, timeout: .zero))
    lock.unlock(withCondition: -1)
    #expect(lock.condition == -1)
  }

  /// A matching condition does not let a thread past another thread's hold.
  @Test func aMatchingConditionStillWaitsForTheHolder() {
    let lock = ConditionLock(condition: 3)
    let held = Semaphore()
    let release = Semaphore()
    let holder = PeerThread.spawn {
      lock.lock(whenCondition: 3)
      held.signal()
      release.wait()
      lock.unlock(withCondition: 4)
    }
    held.wait()
    #expect(lock.condition == 3)
    #expect(!lock.tryLock(whenCondition: 3))
    #expect(!lock.lock(whenCondition: 3, timeout: .milliseconds(10)))
    release.signal()
    #expect(lock.lock(whenCondition: 4, timeout: .seconds(30)))
    lock.unlock()
    holder.join()
  }

  /// TestNSConditionLock's chain: threads started in reverse order each wait for their own
  /// condition, record their turn and hand the lock on with the next condition; they run in
  /// condition order whatever order they started in.
  @Test func aChainOfThreadsHandsTheConditionAlongInOrder() {
    let count = 8
    let lock = ConditionLock(condition: -1)
    let order = Recorder()
    let threads = (0..<count).reversed().map { step in
      PeerThread.spawn {
        lock.lock(whenCondition: step)
        order.append(step)
        lock.unlock(withCondition: step + 1)
      }
    }
    lock.lock()
    lock.unlock(withCondition: 0)
    #expect(lock.lock(whenCondition: count, timeout: .seconds(30)))
    lock.unlock()
    for thread in threads { thread.join() }
    #expect(order.snapshot == Array(0..<count))
    #expect(lock.condition == count)
  }

  /// A deadline wait for a condition nobody sets gives up after the deadline, not before,
  /// and leaves the lock free and its condition unchanged.
  @Test func aDeadlineWaitForAConditionNobodySetsTimesOut() {
    let lock = ConditionLock(condition: 0)
    let start = MonotonicInstant.now
    #expect(!lock.lock(whenCondition: 1, before: .now + .milliseconds(30)))
    #expect(MonotonicInstant.now - start >= .milliseconds(30))
    #expect(!lock.isHeldByCurrentThread)
    #expect(lock.condition == 0)
    #expect(lock.tryLock())
    lock.unlock()
  }
}

/// Foundation's non-recursive locks deadlock (or time out) when the holding thread takes
/// them again; the toolkit's stop the process with a message instead, for every blocking
/// form, including a deadline form whose deadline has passed.
@Suite("Foundation scenarios: re-locking on the holding thread", .timeLimit(.minutes(3)))
struct PeerFoundationSelfDeadlockTests {
  @Test(.runsExitTests) func aConditionLockTakenAgainByItsHolderStopsTheProcess() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = ConditionLock(condition: 1)
        lock.lock()
        _ = lock.lock(whenCondition: 1, before: .now - .seconds(1))
      }
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = ConditionLock(condition: 1)
        lock.lock(whenCondition: 1)
        _ = lock.lock(timeout: .seconds(60))
      }
    }
  }

  @Test(.runsExitTests) func aConditionTakenAgainByItsHolderStopsTheProcess() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let condition = Condition()
        condition.lock()
        _ = condition.lock(before: .now - .seconds(1))
      }
    }
  }

  @Test(.runsExitTests) func aLockTakenAgainByItsHolderWithAPassedDeadlineStopsTheProcess() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = Lock(checked: false)
        lock.lock()
        _ = lock.lock(before: .now - .seconds(1))
      }
    }
  }

  /// `try` on a lock the calling thread holds reports it busy, as NSLock's `try()` does.
  @Test func tryLockByTheHolderReportsBusy() {
    let lock = Lock(checked: false)
    lock.lock()
    #expect(!lock.tryLock())
    lock.unlock()
    let conditionLock = ConditionLock(condition: 2)
    conditionLock.lock()
    #expect(!conditionLock.tryLock())
    #expect(!conditionLock.tryLock(whenCondition: 2))
    conditionLock.unlock()
    let condition = Condition()
    condition.lock()
    #expect(!condition.tryLock())
    condition.unlock()
  }
}
