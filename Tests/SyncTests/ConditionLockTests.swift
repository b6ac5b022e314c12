import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("ConditionLock", .timeLimit(.minutes(3)))
struct ConditionLockTests {
  @Test("condition starts as given and changes only through unlock(withCondition:)")
  func conditionValue() {
    let lock = ConditionLock(condition: 3)
    #expect(lock.condition == 3)
    lock.lock()
    lock.unlock()
    #expect(lock.condition == 3)
    lock.lock()
    lock.unlock(withCondition: -7)
    #expect(lock.condition == -7)
    #expect(ConditionLock().condition == 0)
  }

  @Test("tryLock(whenCondition:) succeeds only on a free lock with a matching condition")
  func tryLockWhenCondition() {
    let lock = ConditionLock(condition: 1)
    #expect(!lock.tryLock(whenCondition: 2))
    #expect(!lock.isHeldByCurrentThread, "a failed try leaves it free")
    #expect(lock.tryLock(whenCondition: 1))
    #expect(lock.isHeldByCurrentThread)
    #expect(!lock.tryLock(whenCondition: 1), "held")
    #expect(!lock.tryLock())
    lock.unlock(withCondition: 2)
    #expect(lock.tryLock())
    lock.unlock()
  }

  @Test("forms mix: lock() then unlock(withCondition:), lock(whenCondition:) then unlock()")
  func mixedForms() {
    let lock = ConditionLock(condition: 0)
    lock.lock()
    lock.unlock(withCondition: 5)
    lock.lock(whenCondition: 5)
    #expect(lock.condition == 5)
    lock.unlock()
    #expect(lock.condition == 5)
    #expect(lock.withLock { lock.condition } == 5)
  }

  @Test("timed condition waits time out, never early, and leave the lock free")
  func timedWaits() {
    let lock = ConditionLock(condition: 0)
    let start = MonotonicInstant.now
    #expect(!lock.lock(whenCondition: 1, timeout: .milliseconds(30)))
    expectTimedOut(from: start, timeout: .milliseconds(30))
    #expect(!lock.isHeldByCurrentThread)
    #expect(!lock.lock(whenCondition: 1, timeout: .seconds(-1)))
    #expect(!lock.lock(whenCondition: 1, before: .distantPast))
    #expect(lock.lock(whenCondition: 0, timeout: .seconds(-1)), "an immediate match succeeds")
    lock.unlock()
    #expect(lock.lock(before: .distantPast), "free: one attempt succeeds")
    lock.unlock()
  }

  @Test("a timed wait for a condition another thread sets succeeds")
  func timedWaitSucceeds() {
    let lock = ConditionLock(condition: 0)
    let got = GuardedValue(false)
    runConcurrently(2) { index in
      if index == 0 {
        if lock.lock(whenCondition: 1, timeout: .seconds(30)) {
          got.value = lock.condition == 1
          lock.unlock()
        }
      } else {
        lock.lock()
        lock.unlock(withCondition: 1)
      }
    }
    #expect(got.value)
  }

  @Test("a held lock times out another thread's lock(before:)")
  func lockBeforeTimesOut() {
    let lock = ConditionLock()
    lock.lock()
    let result = GuardedValue(true)
    runConcurrently(1) { _ in
      let start = MonotonicInstant.now
      result.value = lock.lock(timeout: .milliseconds(20))
      expectTimedOut(from: start, timeout: .milliseconds(20))
    }
    lock.unlock()
    #expect(!result.value)
  }

  @Test("stress: NO_DATA/HAS_DATA producer and consumers move exact item counts")
  func producerConsumerStress() {
    let noData = 0
    let hasData = 1
    let lock = ConditionLock(condition: noData)
    let queue = GuardedValue<[Int]>([])
    let taken = GuardedValue<[Int]>([])
    let items = 5_000
    let consumers = 3
    runConcurrently(1 + consumers) { index in
      if index == 0 {
        for item in 0..<items {
          lock.lock()
          queue.value.append(item)
          lock.unlock(withCondition: hasData)
        }
        for _ in 0..<consumers {  // one stop marker per consumer
          lock.lock()
          queue.value.append(-1)
          lock.unlock(withCondition: hasData)
        }
      } else {
        while true {
          lock.lock(whenCondition: hasData)
          let item = queue.value.removeFirst()
          if item >= 0 { taken.value.append(item) }
          lock.unlock(withCondition: queue.value.isEmpty ? noData : hasData)
          if item < 0 { break }
        }
      }
    }
    #expect(taken.value.sorted() == Array(0..<items))
    #expect(lock.condition == noData)
  }

  @Test("a ring of threads each waiting for its own value passes the turn exactly")
  func ring() {
    let parties = 4
    let laps = 300
    let lock = ConditionLock(condition: 0)
    let order = GuardedValue<[Int]>([])
    runConcurrently(parties) { index in
      for _ in 0..<laps {
        lock.lock(whenCondition: index)
        order.value.append(index)
        lock.unlock(withCondition: (index + 1) % parties)
      }
    }
    let expected = (0..<laps).flatMap { _ in Array(0..<parties) }
    #expect(order.value == expected)
    #expect(lock.condition == 0)
  }

  @Test("deinitializing a locked condition lock is reported", .runsExitTests)
  func deinitWhileLocked() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        ConditionLock().lock()
      }
    }
  }

  @Test("unlocking a condition lock that is not held is reported", .runsExitTests)
  func unlockMisuse() async {
    await #expect(processExitsWith: .failure) {
      ConditionLock().unlock()
    }
    await #expect(processExitsWith: .failure) {
      ConditionLock().unlock(withCondition: 1)
    }
  }
}
