import Glibc
import ProcessTestSupport
import Sync
import Testing

// A second round of SwiftNIO (NIOConcurrencyHelpers: NIOLock, NIOLockedValueBox,
// ConditionLock) and WebKit (WTF Lock, Condition, WordLock) scenarios, asked of the
// toolkit's Sync types. NIO's `NIOLockedValueBox.withLockedValue` is ``LockedValue``'s
// `withLock`, `NIOLock` is ``Lock``, NIO's `ConditionLock(value:)` is ``ConditionLock``
// (`lock(whenValue:timeoutSeconds:)` is `lock(whenCondition:timeout:)`); WTF's `Lock` is
// ``Lock`` and its `Condition` (with its own lock) is ``Condition``.

private struct BoxError: Error, Equatable { let code: Int }

@Suite("SwiftNIO locked value box and lock scenarios, round 2", .timeLimit(.minutes(3)))
struct PeerScenariosNIOLockedValueRound2Tests {
  @Test("withLock hands back the body's value, and a thrown error leaves the lock free and the change kept")
  func withLockReturnsAndRethrows() {
    let box = LockedValue(0)
    #expect(
      box.withLock { value -> Int in
        value += 41
        return value + 1
      } == 42)
    do throws(BoxError) {
      try box.withLock { (value: inout Int) throws(BoxError) in
        value = 7
        throw BoxError(code: value)
      }
      Issue.record("no error")
    } catch {
      #expect(error == BoxError(code: 7))
    }
    // The lock was released by the throwing body: a non-blocking attempt gets it.
    #expect(box.withLockIfAvailable { $0 } == 7)
    let lock = Lock()
    do throws(BoxError) {
      try lock.withLock { () throws(BoxError) in throw BoxError(code: 1) }
    } catch {
      #expect(error.code == 1)
    }
    #expect(lock.tryLock())
    lock.unlock()
  }

  @Test("withLockIfAvailable returns nil without running its body while another thread is inside withLock")
  func withLockIfAvailableFailsWhileHeldElsewhere() {
    let box = LockedValue(0)
    let inside = Gate()
    let done = Gate()
    let ran = AtomicBool(false)
    runConcurrently(2) { index in
      if index == 0 {
        box.withLock { value in
          inside.open()
          done.wait()
          value += 1
        }
      } else {
        inside.wait()
        let result: Int? = box.withLockIfAvailable { value in
          ran.store(true, ordering: .relaxed)
          return value
        }
        #expect(result == nil)
        done.open()
      }
    }
    #expect(!ran.load(ordering: .relaxed))
    #expect(box.withLockIfAvailable { $0 } == 1)
  }

  @Test("a predicate waiter wakes for a change made by withLockIfAvailable, not only by withLock")
  func predicateWaiterWakesForANonBlockingChange() {
    struct State { var value = 0, acknowledged = 0 }
    let box = LockedValue(State())
    let rounds = isRunningUnderSanitizer ? 50 : 500
    runConcurrently(2) { index in
      if index == 0 {
        for round in 1...rounds {
          let seen = box.withLock(when: { $0.value == round }) { state in
            state.acknowledged = round
            return state.value
          }
          #expect(seen == round)
        }
      } else {
        var round = 1
        while round <= rounds {
          // Only the non-blocking form changes the value, once the waiter saw the last one;
          // a miss is retried (this thread never waits on a predicate itself).
          let changed: Bool? = box.withLockIfAvailable { state in
            guard state.acknowledged == round - 1, state.value == round - 1 else { return false }
            state.value = round
            return true
          }
          if changed == true { round += 1 } else { sched_yield() }
        }
      }
    }
    #expect(box.withLock { $0.acknowledged } == rounds)
  }

  @Test("a predicate waiter wakes for a change made by a timed withLock")
  func predicateWaiterWakesForATimedChange() {
    let box = LockedValue(false)
    let waiting = Gate()
    runConcurrently(2) { index in
      if index == 0 {
        waiting.open()
        #expect(box.withLock(when: { $0 }) { $0 })
      } else {
        waiting.wait()
        let set: Void? = box.withLock(timeout: .seconds(30)) { $0 = true }
        #expect(set != nil)
      }
    }
  }

  @Test("a LockedValue counter incremented from many threads with withLock loses nothing")
  func lockedValueCounterUnderContention() {
    let box = LockedValue(0)
    let threads = 8
    let perThread = isRunningUnderSanitizer ? 2_000 : 20_000
    runConcurrently(threads) { _ in
      for _ in 0..<perThread { box.withLock { $0 += 1 } }
    }
    #expect(box.withLock { $0 } == threads * perThread)
  }
}

@Suite("SwiftNIO condition-lock scenarios, round 2", .timeLimit(.minutes(3)))
struct PeerScenariosNIOConditionLockRound2Tests {
  @Test("a zero timeout for a value not there gives up at once; for the value there it succeeds")
  func zeroTimeoutGivesUpOrSucceedsAtOnce() {
    let lock = ConditionLock(condition: 3)
    let start = MonotonicInstant.now
    #expect(!lock.lock(whenCondition: 4, timeout: .zero))
    #expect(!lock.lock(whenCondition: 4, timeout: .seconds(-1)))
    #expect(MonotonicInstant.now - start < .seconds(10), "no wait (a loaded machine may pause the thread)")
    #expect(!lock.isHeldByCurrentThread)
    #expect(lock.lock(whenCondition: 3, timeout: .zero))
    #expect(lock.isHeldByCurrentThread)
    lock.unlock()
  }

  @Test("the holder's unlock(withCondition:) sets the value that condition reads and tryLock(whenCondition:) tests")
  func unlockWithConditionSetsTheValue() {
    let lock = ConditionLock()
    #expect(lock.condition == 0)
    #expect(!lock.tryLock(whenCondition: 1))
    lock.lock()
    lock.unlock(withCondition: 1)
    #expect(lock.condition == 1)
    #expect(!lock.tryLock(whenCondition: 0))
    #expect(lock.tryLock(whenCondition: 1))
    lock.unlock()
    #expect(lock.condition == 1)
  }

  @Test("a ping-pong between two threads through the condition value never loses a turn")
  func pingPongThroughTheCondition() {
    let lock = ConditionLock(condition: 0)
    let rounds = isRunningUnderSanitizer ? 200 : 2_000
    let counter = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      for _ in 0..<rounds {
        lock.lock(whenCondition: index)
        counter.increment(ordering: .relaxed)
        lock.unlock(withCondition: 1 - index)
      }
    }
    #expect(counter.load(ordering: .relaxed) == 2 * rounds)
    #expect(lock.condition == 0)
  }
}

@Suite("WebKit WTF lock and condition scenarios, round 2", .timeLimit(.minutes(3)))
struct PeerWebKitSyncRound2Tests {
  @Test("tryLock from another thread fails while the lock is held and succeeds once released")
  func tryLockFromAnotherThread() {
    let lock = Lock()
    lock.lock()
    let whileHeld = AtomicBool(true)
    runConcurrently(1) { _ in whileHeld.store(lock.tryLock(), ordering: .relaxed) }
    #expect(!whileHeld.load(ordering: .relaxed))
    lock.unlock()
    let afterRelease = AtomicBool(false)
    runConcurrently(1) { _ in
      let got = lock.tryLock()
      afterRelease.store(got, ordering: .relaxed)
      if got { lock.unlock() }
    }
    #expect(afterRelease.load(ordering: .relaxed))
  }

  @Test("a timed lock attempt on a lock held elsewhere gives up, never early, and the lock is not taken")
  func timedLockGivesUp() {
    let lock = Lock()
    lock.lock()
    let gaveUpInTime = AtomicBool(false)
    runConcurrently(1) { _ in
      let start = MonotonicInstant.now
      let got = lock.lock(before: start + .milliseconds(20))
      gaveUpInTime.store(!got && MonotonicInstant.now - start >= .milliseconds(20), ordering: .relaxed)
    }
    #expect(gaveUpInTime.load(ordering: .relaxed))
    #expect(lock.isHeldByCurrentThread)
    lock.unlock()
  }

  @Test("a wait with a deadline already passed returns false at once, the lock still held")
  func waitWithAPassedDeadline() {
    let condition = Condition()
    condition.lock()
    let start = MonotonicInstant.now
    #expect(!condition.wait(before: start - .seconds(1)))
    #expect(!condition.wait(timeout: .zero))
    #expect(!condition.wait(until: { false }, timeout: .zero))
    #expect(condition.isHeldByCurrentThread)
    #expect(MonotonicInstant.now - start < .seconds(10), "no wait (a loaded machine may pause the thread)")
    condition.unlock()
  }

  @Test("signal wakes a waiter whose predicate then holds; every round trip completes")
  func signalHandsOverEveryRound() {
    let condition = Condition()
    let rounds = isRunningUnderSanitizer ? 200 : 2_000
    nonisolated(unsafe) var turn = 0
    runConcurrently(2) { index in
      for _ in 0..<rounds {
        condition.lock()
        condition.wait(until: { turn % 2 == index })
        turn += 1
        condition.signal()
        condition.unlock()
      }
    }
    condition.lock()
    #expect(turn == 2 * rounds)
    condition.unlock()
  }

  @Test("many threads on one lock mixing lock, tryLock and timed lock count exactly")
  func mixedAcquisitionForms() {
    let lock = Lock()
    nonisolated(unsafe) var count = 0
    let threads = 6
    let perThread = isRunningUnderSanitizer ? 1_000 : 10_000
    runConcurrently(threads) { index in
      var done = 0
      while done < perThread {
        let got: Bool
        switch (index + done) % 3 {
        case 0:
          lock.lock()
          got = true
        case 1: got = lock.tryLock()
        default: got = lock.lock(before: .after(.seconds(30)))
        }
        guard got else {
          sched_yield()
          continue
        }
        count += 1
        lock.unlock()
        done += 1
      }
    }
    lock.lock()
    #expect(count == threads * perThread)
    lock.unlock()
  }
}
