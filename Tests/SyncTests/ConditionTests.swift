import Glibc
import ProcessTestSupport
import Sync
import Testing

/// State shared between test threads; the test's lock or condition protects `value`.
final class GuardedValue<Value>: @unchecked Sendable {
  var value: Value
  init(_ value: Value) { self.value = value }
}

/// Checks a timed wait that ran from `start` with `timeout`: never early, not absurdly late.
func expectTimedOut(from start: MonotonicInstant, timeout: Duration, sourceLocation: SourceLocation = #_sourceLocation)
{
  let waited = start.duration(to: .now)
  #expect(waited >= timeout, "returned early after \(waited)", sourceLocation: sourceLocation)
  #expect(waited < timeout + .seconds(5), "returned late after \(waited)", sourceLocation: sourceLocation)
}

@Suite("Condition", .timeLimit(.minutes(3)))
struct ConditionTests {
  @Test("is a lock: lock, tryLock, unlock, withLock")
  func lockSurface() {
    let condition = Condition()
    #expect(!condition.isHeldByCurrentThread)
    condition.lock()
    #expect(condition.isHeldByCurrentThread)
    #expect(!condition.tryLock())
    condition.unlock()
    #expect(condition.withLock { 7 } == 7)
    #expect(condition.lock(timeout: .milliseconds(1)))
    condition.unlock()
  }

  @Test("signal wakes a waiter that waits in a predicate loop")
  func signalWakesWaiter() {
    let condition = Condition()
    let ready = GuardedValue(false)
    let observed = GuardedValue(false)
    runConcurrently(2) { index in
      if index == 0 {
        condition.withLock {
          condition.wait(until: { ready.value })
          observed.value = ready.value
        }
      } else {
        condition.withLock {
          ready.value = true
          condition.signal()
        }
      }
    }
    #expect(observed.value)
  }

  @Test("broadcast wakes every waiter")
  func broadcastWakesAll() {
    let condition = Condition()
    let go = GuardedValue(false)
    let waiting = GuardedValue(0)
    let woke = AtomicInteger<Int>(0)
    runConcurrently(5) { index in
      if index < 4 {
        condition.withLock {
          waiting.value += 1
          condition.broadcast()  // tells the broadcaster one more is waiting
          condition.wait(until: { go.value })
        }
        woke.increment(ordering: .relaxed)
      } else {
        condition.withLock {
          condition.wait(until: { waiting.value == 4 })
          go.value = true
          condition.broadcast()
        }
      }
    }
    #expect(woke.load(ordering: .relaxed) == 4)
  }

  @Test("a timed wait with nobody signalling times out, never early, lock held again")
  func timedWaitTimesOut() {
    let condition = Condition()
    condition.lock()
    let start = MonotonicInstant.now
    let signalled = condition.wait(timeout: .milliseconds(30))
    expectTimedOut(from: start, timeout: .milliseconds(30))
    #expect(!signalled)
    #expect(condition.isHeldByCurrentThread)
    let deadline = MonotonicInstant.after(.milliseconds(20))
    #expect(!condition.wait(until: { false }, before: deadline))
    #expect(deadline.hasPassed)
    #expect(condition.isHeldByCurrentThread)
    condition.unlock()
  }

  @Test("negative and zero timeouts and passed deadlines return false at once, lock held")
  func badTimeouts() {
    let condition = Condition()
    condition.withLock {
      #expect(!condition.wait(timeout: .seconds(-5)))
      #expect(!condition.wait(timeout: .zero))
      #expect(!condition.wait(before: .distantPast))
      #expect(!condition.wait(before: .now))
      #expect(!condition.wait(until: { false }, timeout: .seconds(-1)))
      #expect(condition.wait(until: { true }, timeout: .seconds(-1)), "a true predicate wins")
      #expect(condition.isHeldByCurrentThread)
    }
  }

  @Test("a timed predicate wait returns true when the predicate becomes true in time")
  func timedPredicateSucceeds() {
    let condition = Condition()
    let flag = GuardedValue(false)
    let result = GuardedValue(false)
    runConcurrently(2) { index in
      if index == 0 {
        condition.withLock {
          result.value = condition.wait(until: { flag.value }, timeout: .seconds(30))
        }
      } else {
        condition.withLock {
          flag.value = true
          condition.signal()
        }
      }
    }
    #expect(result.value)
  }

  @Test("a throwing predicate propagates its error with the lock still held")
  func throwingPredicate() {
    struct Stop: Error {}
    let condition = Condition()
    condition.lock()
    #expect(throws: Stop.self) {
      try condition.wait(until: { () throws(Stop) -> Bool in throw Stop() })
    }
    #expect(condition.isHeldByCurrentThread)
    condition.unlock()
  }

  @Test("stress: producers and consumers through a Condition move exact item counts")
  func producerConsumerStress() {
    let condition = Condition()
    let queue = GuardedValue<[Int]>([])
    let consumed = GuardedValue(0)
    let sum = GuardedValue(0)
    let producers = 2
    let consumers = 2
    let perProducer = 5_000
    let total = producers * perProducer
    runConcurrently(producers + consumers) { index in
      if index < producers {
        for item in 1...perProducer {
          condition.withLock {
            queue.value.append(item)
            condition.signal()
          }
        }
      } else {
        while true {
          let done: Bool = condition.withLock {
            condition.wait(until: { !queue.value.isEmpty || consumed.value == total })
            if consumed.value == total { return true }
            sum.value += queue.value.removeFirst()
            consumed.value += 1
            if consumed.value == total { condition.broadcast() }
            return false
          }
          if done { break }
        }
      }
    }
    #expect(consumed.value == total)
    #expect(sum.value == producers * perProducer * (perProducer + 1) / 2)
    #expect(queue.value.isEmpty)
  }

  @Test("waiting without holding the lock is reported", .runsExitTests)
  func waitWithoutLock() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        Condition().wait()
      }
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        _ = Condition().wait(timeout: .milliseconds(1))
      }
    }
  }

  @Test("deinitializing a locked condition is reported", .runsExitTests)
  func deinitWhileLocked() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        Condition().lock()
      }
    }
  }

  @Test("unlocking a condition that is not locked is reported", .runsExitTests)
  func unlockUnlocked() async {
    await #expect(processExitsWith: .failure) {
      Condition().unlock()
    }
  }
}
