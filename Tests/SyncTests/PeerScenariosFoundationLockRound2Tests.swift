import Glibc
import ProcessTestSupport
import Sync
import Testing

// More of swift-corelibs-foundation's TestNSLock, TestNSRecursiveLock, TestNSCondition and
// TestNSConditionLock scenarios, written against this toolkit's API: `lock(before: Date)`
// becomes `lock(before: MonotonicInstant)` and `wait(until: Date)` becomes
// `wait(before:)` (the Sync module's time rule; `Condition/wait(until:)` with a date is the
// deprecated spelling).

/// The locks that stand in for Foundation's `NSLocking` classes.
private let round2LockKinds: [(String, @Sendable () -> any Locking)] = [
  ("Lock", { Lock() }), ("RecursiveLock", { RecursiveLock() }), ("Condition", { Condition() }),
  ("ConditionLock", { ConditionLock() }),
]

private func makeLock(_ name: String) -> any Locking {
  round2LockKinds.first { $0.0 == name }!.1()
}

/// A value shared by the test's threads, read and written under the test's own locks or
/// after a join.
private final class Cell<Value>: @unchecked Sendable {
  private let guardLock = Lock()
  private var stored: Value
  init(_ value: Value) { stored = value }
  var value: Value {
    get { guardLock.withLock { stored } }
    set { guardLock.withLock { stored = newValue } }
  }
  /// Changes the value in one critical section (`value += 1` would be two).
  func update(_ body: (inout Value) -> Void) { guardLock.withLock { body(&stored) } }
}

@Suite("Foundation scenarios, round 2: locks", .timeLimit(.minutes(3)))
struct PeerFoundationLockRound2Tests {
  /// TestNSLock.test_lockWait: `lock(before:)` on a lock another thread holds returns false,
  /// not before the date, and true once the holder lets go.
  @Test(arguments: round2LockKinds.map(\.0))
  func lockBeforeADateFailsAfterTheDateWhileAnotherThreadHolds(kind: String) {
    let lock = makeLock(kind)
    let held = Gate()
    let release = Gate()
    let outcomes = Cell<[Bool]>([])
    runConcurrently(2) { index in
      if index == 0 {
        lock.lock()
        held.open()
        release.wait()
        lock.unlock()
      } else {
        held.wait()
        let deadline = MonotonicInstant.after(.milliseconds(30))
        let first = lock.lock(before: deadline)
        let notEarly = deadline.hasPassed
        let passed = lock.lock(before: .distantPast)
        release.open()
        let second = lock.lock(before: .after(.seconds(30)))
        if second { lock.unlock() }
        outcomes.value = [first, notEarly, passed, second]
      }
    }
    #expect(outcomes.value == [false, true, false, true])
  }

  /// TestNSLock: `tryLock` from another thread fails while the lock is held and succeeds
  /// after the holder unlocks; it never blocks.
  @Test(arguments: round2LockKinds.map(\.0))
  func tryLockFromAnotherThreadFailsOnlyWhileTheLockIsHeld(kind: String) {
    let lock = makeLock(kind)
    let held = Gate()
    let tried = Gate()
    let released = Gate()
    let outcomes = Cell<[Bool]>([])
    runConcurrently(2) { index in
      if index == 0 {
        lock.lock()
        held.open()
        tried.wait()
        lock.unlock()
        released.open()
      } else {
        held.wait()
        let whileHeld = lock.tryLock()
        if whileHeld { lock.unlock() }
        tried.open()
        released.wait()
        let afterRelease = lock.tryLock()
        if afterRelease { lock.unlock() }
        outcomes.value = [whileHeld, afterRelease]
      }
    }
    #expect(outcomes.value == [false, true])
  }

  /// A free lock is taken by `lock(before:)` even with a passed date (one attempt), as
  /// NSLock's `lock(before: Date.distantPast)` does.
  @Test(arguments: round2LockKinds.map(\.0))
  func aFreeLockIsTakenEvenWithAPassedDate(kind: String) {
    let lock = makeLock(kind)
    #expect(lock.lock(before: .distantPast))
    lock.unlock()
    #expect(lock.lock(before: .now - .seconds(3600)))
    lock.unlock()
    #expect(lock.tryLock())
    lock.unlock()
  }

  /// TestNSRecursiveLock: every form of taking the lock on the holding thread adds a level,
  /// each unlock removes one, and another thread gets the lock only after the last one.
  @Test func recursiveLockLevelsCountEveryFormAndAnotherThreadWaitsForTheLast() {
    let lock = RecursiveLock()
    let levels = Cell<[Int]>([])
    let outerHeld = Gate()
    let checked = Gate()
    let otherResults = Cell<[Bool]>([])
    let releasedAll = Gate()
    runConcurrently(2) { index in
      if index == 0 {
        var seen: [Int] = []
        lock.lock()
        seen.append(lock.levelsHeldByCurrentThread)
        #expect(lock.tryLock())
        seen.append(lock.levelsHeldByCurrentThread)
        #expect(lock.lock(before: .distantPast))
        seen.append(lock.levelsHeldByCurrentThread)
        lock.withLock { seen.append(lock.levelsHeldByCurrentThread) }
        seen.append(lock.levelsHeldByCurrentThread)
        outerHeld.open()
        checked.wait()
        lock.unlock()
        lock.unlock()
        seen.append(lock.levelsHeldByCurrentThread)
        #expect(lock.isHeldByCurrentThread)
        lock.unlock()
        seen.append(lock.levelsHeldByCurrentThread)
        #expect(!lock.isHeldByCurrentThread)
        releasedAll.open()
        levels.value = seen
      } else {
        outerHeld.wait()
        let tried = lock.tryLock()
        let timed = lock.lock(before: .after(.milliseconds(10)))
        #expect(lock.levelsHeldByCurrentThread == 0)
        checked.open()
        releasedAll.wait()
        let after = lock.lock(before: .after(.seconds(30)))
        let level = lock.levelsHeldByCurrentThread
        if after { lock.unlock() }
        otherResults.value = [tried, timed, after, level == 1]
      }
    }
    #expect(levels.value == [1, 2, 3, 4, 3, 1, 0])
    #expect(otherResults.value == [false, false, true, true])
  }
}

@Suite("Foundation scenarios, round 2: conditions", .timeLimit(.minutes(3)))
struct PeerFoundationConditionRound2Tests {
  /// TestNSCondition's waiting pattern: `while !predicate { wait(before:) }` with the state
  /// set and signalled by another thread ends with the predicate true and the lock held.
  @Test func aPredicateLoopWithADeadlineEndsWhenAnotherThreadSetsTheState() {
    let condition = Condition()
    let ready = Cell(false)
    let waiting = Gate()
    let outcome = Cell<[Bool]>([])
    runConcurrently(2) { index in
      if index == 0 {
        condition.lock()
        waiting.open()
        let deadline = MonotonicInstant.after(.seconds(30))
        var inTime = true
        while !ready.value {
          if !condition.wait(before: deadline) {
            inTime = ready.value
            break
          }
        }
        let held = condition.isHeldByCurrentThread
        condition.unlock()
        outcome.value = [inTime, held]
      } else {
        waiting.wait()
        condition.withLock {
          ready.value = true
          condition.signal()
        }
      }
    }
    #expect(outcome.value == [true, true])
  }

  /// A signal with no waiter is not remembered (`pthread_cond_signal`, NSCondition): a later
  /// wait still waits for its deadline, returns false no earlier than it, and holds the lock.
  @Test func aSignalWithNoWaiterIsNotRemembered() {
    let condition = Condition()
    condition.withLock {
      condition.signal()
      condition.broadcast()
    }
    condition.lock()
    let deadline = MonotonicInstant.after(.milliseconds(20))
    #expect(!condition.wait(before: deadline))
    #expect(deadline.hasPassed)
    #expect(condition.isHeldByCurrentThread)
    #expect(!condition.wait(timeout: .zero))
    #expect(!condition.wait(timeout: .seconds(-1)))
    condition.unlock()
  }

  /// The predicate form with a deadline returns the predicate's last value: false when
  /// nobody makes it true, not before the deadline, with the lock held.
  @Test func thePredicateWaitWithADeadlineReportsTheLastValue() {
    let condition = Condition()
    condition.lock()
    var tests = 0
    let deadline = MonotonicInstant.after(.milliseconds(20))
    let result = condition.wait(
      until: {
        tests += 1
        return false
      }, before: deadline)
    #expect(!result)
    #expect(deadline.hasPassed)
    #expect(tests >= 2)
    #expect(condition.isHeldByCurrentThread)
    #expect(condition.wait(until: { true }, before: .distantPast))
    condition.unlock()
  }
}

@Suite("Foundation scenarios, round 2: condition locks", .timeLimit(.minutes(3)))
struct PeerFoundationConditionLockRound2Tests {
  /// TestNSConditionLock.test_lockWhenCondition: `unlock(withCondition:)` hands the lock to
  /// the thread waiting for that value; a waiter for another value keeps waiting.
  @Test func unlockWithConditionReleasesOnlyTheWaiterForThatValue() {
    let lock = ConditionLock(condition: 0)
    let order = Cell<[Int]>([])
    let waitersStarted = Cell(0)
    runConcurrently(3) { index in
      switch index {
      case 0, 1:
        let wanted = index + 1
        waitersStarted.update { $0 += 1 }
        #expect(lock.lock(whenCondition: wanted, before: .after(.seconds(30))))
        #expect(lock.condition == wanted)
        order.update { $0.append(wanted) }
        // The waiter for 2 passes the lock on to the waiter for 1.
        lock.unlock(withCondition: wanted == 2 ? 1 : 3)
      default:
        while waitersStarted.value < 2 { sched_yield() }
        lock.lock()
        // A value nobody waits for: both waiters re-test and go on waiting.
        lock.unlock(withCondition: 7)
        lock.lock()
        lock.unlock(withCondition: 2)
      }
    }
    #expect(order.value == [2, 1])
    #expect(lock.condition == 3)
    #expect(lock.tryLock(whenCondition: 3))
    lock.unlock()
  }

  /// TestNSConditionLock: `lock(whenCondition:before:)` for a value nobody sets returns
  /// false, not before the date, with the lock free; a passed date makes one attempt, which
  /// succeeds when the lock is free and the condition matches.
  @Test func aTimedLockForAConditionGivesUpAtTheDateAndLeavesTheLockFree() {
    let lock = ConditionLock(condition: 5)
    let deadline = MonotonicInstant.after(.milliseconds(20))
    #expect(!lock.lock(whenCondition: 6, before: deadline))
    #expect(deadline.hasPassed)
    #expect(!lock.isHeldByCurrentThread)
    #expect(!lock.lock(whenCondition: 6, before: .distantPast))
    #expect(!lock.lock(whenCondition: 6, timeout: .zero))
    #expect(lock.lock(whenCondition: 5, before: .distantPast))
    #expect(lock.isHeldByCurrentThread)
    lock.unlock()
    #expect(lock.condition == 5)
  }

  /// `lock(whenCondition:before:)` gives up at its date when the condition is set but another
  /// thread keeps holding the lock past it.
  @Test func aTimedLockForAMatchingConditionGivesUpWhileAnotherThreadHoldsPastTheDate() {
    let lock = ConditionLock(condition: 1)
    let held = Gate()
    let done = Gate()
    let outcome = Cell<[Bool]>([])
    runConcurrently(2) { index in
      if index == 0 {
        lock.lock()
        held.open()
        done.wait()
        lock.unlock(withCondition: 2)
      } else {
        held.wait()
        let deadline = MonotonicInstant.after(.milliseconds(20))
        let first = lock.lock(whenCondition: 1, before: deadline)
        let notEarly = deadline.hasPassed
        done.open()
        let second = lock.lock(whenCondition: 2, before: .after(.seconds(30)))
        if second { lock.unlock() }
        outcome.value = [first, notEarly, second]
      }
    }
    #expect(outcome.value == [false, true, true])
  }

  /// `tryLock(whenCondition:)` on a mismatch fails and leaves the lock free for another
  /// thread; on a match it takes the lock.
  @Test func tryLockWhenConditionFailsOnAMismatchAndLeavesTheLockFree() {
    let lock = ConditionLock(condition: 10)
    #expect(!lock.tryLock(whenCondition: 11))
    #expect(!lock.isHeldByCurrentThread)
    let other = Cell(false)
    runConcurrently(1) { _ in
      other.value = lock.tryLock()
      if other.value { lock.unlock(withCondition: 11) }
    }
    #expect(other.value)
    #expect(lock.condition == 11)
    #expect(lock.tryLock(whenCondition: 11))
    #expect(!lock.tryLock(whenCondition: 11))
    lock.unlock(withCondition: 12)
    #expect(lock.condition == 12)
  }
}

/// Stress sizes scale down under the sanitizers, which slow each lock operation many times.
private let round2StressScale = isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer ? 10 : 1

@Suite("Foundation scenarios, round 2: timed locking under contention", .timeLimit(.minutes(3)))
struct PeerFoundationTimedLockStressRound2Tests {
  /// TestNSLock.test_threadsAndLocks with deadlines that keep expiring while the lock is
  /// handed around: every success is exclusive, no update is lost, nobody hangs, and the
  /// lock is free at the end.
  @Test(arguments: round2LockKinds.map(\.0))
  func shortDeadlinesExpiringUnderContentionLeaveTheLockConsistent(kind: String) {
    let lock = makeLock(kind)
    final class Plain: @unchecked Sendable {
      var value = 0
      var busy = false
      var overlaps = 0
      var spin = 0
    }
    let plain = Plain()
    let successes = Cell(0)
    let rounds = 2_000 / round2StressScale
    runConcurrently(6) { index in
      var mine = 0
      for round in 0..<rounds {
        let wait = Duration.microseconds((round * 7 + index * 13) % 150)
        if lock.lock(before: .after(wait)) {
          if plain.busy { plain.overlaps += 1 }
          plain.busy = true
          plain.value += 1
          for _ in 0..<((round + index) % 50) { plain.spin &+= 1 }
          plain.busy = false
          mine += 1
          lock.unlock()
        }
      }
      successes.update { $0 += mine }
    }
    #expect(plain.value == successes.value)
    #expect(plain.overlaps == 0)
    #expect(lock.tryLock())
    lock.unlock()
  }

  /// NSConditionLock with waiters whose deadlines expire while the condition is handed
  /// around: a waiter that gave up does not keep a hand-off from the next one; the chain of
  /// conditions completes.
  @Test func conditionHandOffsCompleteWhileOtherWaitersTimeOut() {
    let lock = ConditionLock(condition: 0)
    let threads = 4
    let rounds = 300 / round2StressScale
    let timeouts = Cell(0)
    runConcurrently(threads + 2) { index in
      if index < threads {
        // Thread i takes the lock at conditions i, i + threads, ... in turn.
        for round in 0..<rounds {
          let wanted = round * threads + index
          #expect(lock.lock(whenCondition: wanted, before: .after(.seconds(60))))
          lock.unlock(withCondition: wanted + 1)
        }
      } else {
        // Distractors wait for values that never come, with short deadlines.
        var mine = 0
        for round in 0..<rounds {
          if !lock.lock(whenCondition: -1 - round, before: .after(.microseconds(50))) { mine += 1 }
        }
        timeouts.update { $0 += mine }
      }
    }
    #expect(lock.condition == threads * rounds)
    #expect(timeouts.value == 2 * rounds)
    #expect(lock.tryLock())
    lock.unlock()
  }
}

@Suite("Foundation scenarios, round 2: distant dates", .timeLimit(.minutes(3)))
struct PeerFoundationDistantDatesRound2Tests {
  /// `Date.distantFuture` and huge `TimeInterval`s, as Foundation's callers pass them: every
  /// timed form accepts a huge timeout (saturating, never trapping) and returns as soon as
  /// its wait is satisfied.
  @Test func hugeTimeoutsSaturateInEveryTimedForm() {
    let huge = Duration.seconds(Int64.max)
    for kind in round2LockKinds.map(\.0) {
      let lock = makeLock(kind)
      #expect(lock.lock(timeout: huge))
      lock.unlock()
      #expect(lock.lock(before: .distantFuture))
      lock.unlock()
    }
    let conditionLock = ConditionLock(condition: 3)
    #expect(conditionLock.lock(whenCondition: 3, timeout: huge))
    conditionLock.unlock(withCondition: 4)
    #expect(conditionLock.lock(whenCondition: 4, before: .distantFuture))
    conditionLock.unlock()

    let condition = Condition()
    let ready = Cell(false)
    let waiting = Gate()
    let woke = Cell<[Bool]>([])
    runConcurrently(2) { index in
      if index == 0 {
        condition.lock()
        waiting.open()
        let signalled = condition.wait(until: { ready.value }, timeout: huge)
        let timed = condition.wait(timeout: .zero)
        condition.unlock()
        woke.value = [signalled, timed]
      } else {
        waiting.wait()
        condition.withLock {
          ready.value = true
          condition.broadcast()
        }
      }
    }
    #expect(woke.value == [true, false])
  }
}

@Suite("Foundation scenarios, round 2: a condition shared by timed and untimed waiters", .timeLimit(.minutes(3)))
struct PeerFoundationConditionSharedRound2Tests {
  /// NSCondition's producer/consumer pattern with `broadcast()`: untimed consumers in
  /// predicate loops and threads making short timed waits on the same condition share it;
  /// every item is consumed exactly once and nobody is left waiting.
  @Test func broadcastsReachUntimedConsumersAmongTimedWaiters() {
    let condition = Condition()
    final class State: @unchecked Sendable {
      var available = 0
      var consumed = 0
      var done = false
    }
    let state = State()
    let items = 3_000 / round2StressScale
    let consumers = 3
    let perConsumer = Cell<[Int]>([])
    runConcurrently(consumers + 3) { index in
      if index < consumers {
        var mine = 0
        condition.lock()
        while true {
          condition.wait(until: { state.available > 0 || state.done })
          if state.available > 0 {
            state.available -= 1
            state.consumed += 1
            mine += 1
            if state.consumed == items {
              state.done = true
              condition.broadcast()
            }
          } else {
            break
          }
        }
        condition.unlock()
        perConsumer.update { $0.append(mine) }
      } else if index == consumers {
        for item in 0..<items {
          condition.withLock {
            state.available += 1
            condition.broadcast()
          }
          if item % 16 == 0 { sched_yield() }
        }
      } else {
        // Timed waiters on the same condition, until the work is done.
        condition.lock()
        while !state.done {
          _ = condition.wait(timeout: .microseconds(20 + index))
        }
        condition.unlock()
      }
    }
    #expect(state.consumed == items)
    #expect(state.available == 0)
    #expect(perConsumer.value.reduce(0, +) == items)
    #expect(perConsumer.value.count == consumers)
  }
}
