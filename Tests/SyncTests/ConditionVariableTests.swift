import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("ConditionVariable", .timeLimit(.minutes(3)))
struct ConditionVariableTests {
  @Test("signal under the mutex wakes a predicate waiter")
  func signalWakesWaiter() {
    let mutex = Lock()
    let ready = ConditionVariable()
    let flag = GuardedValue(false)
    let seen = GuardedValue(false)
    runConcurrently(2) { index in
      if index == 0 {
        mutex.withLock {
          ready.wait(mutex, until: { flag.value })
          seen.value = flag.value
        }
      } else {
        mutex.withLock {
          flag.value = true
          ready.signal()
        }
      }
    }
    #expect(seen.value)
  }

  @Test("two conditions on one mutex: a bounded buffer moves exact counts")
  func boundedBuffer() {
    let mutex = Lock()
    let notEmpty = ConditionVariable()
    let notFull = ConditionVariable()
    let buffer = GuardedValue<[Int]>([])
    let received = GuardedValue<[Int]>([])
    let count = 10_000
    let capacity = 4
    runConcurrently(2) { index in
      if index == 0 {
        for item in 0..<count {
          mutex.withLock {
            notFull.wait(mutex, until: { buffer.value.count < capacity })
            buffer.value.append(item)
            notEmpty.signal()
          }
        }
      } else {
        for _ in 0..<count {
          mutex.withLock {
            notEmpty.wait(mutex, until: { !buffer.value.isEmpty })
            received.value.append(buffer.value.removeFirst())
            notFull.signal()
          }
        }
      }
    }
    #expect(received.value == Array(0..<count))
  }

  @Test("timed waits time out on the monotonic clock, never early; bad timeouts return at once")
  func timedWaits() {
    let mutex = Lock()
    let condition = ConditionVariable()
    mutex.withLock {
      let start = MonotonicInstant.now
      #expect(!condition.wait(mutex, timeout: .milliseconds(30)))
      expectTimedOut(from: start, timeout: .milliseconds(30))
      #expect(mutex.isHeldByCurrentThread)
      #expect(!condition.wait(mutex, until: { false }, timeout: .milliseconds(10)))
      #expect(!condition.wait(mutex, timeout: .seconds(-1)))
      #expect(!condition.wait(mutex, before: .distantPast))
      #expect(!condition.wait(mutex, until: { false }, before: .now))
      #expect(condition.wait(mutex, until: { true }, timeout: .zero))
      #expect(mutex.isHeldByCurrentThread)
    }
  }

  @Test("broadcast wakes every waiter")
  func broadcast() {
    let mutex = Lock()
    let condition = ConditionVariable()
    let arrived = GuardedValue(0)
    let go = GuardedValue(false)
    let woke = AtomicInteger<Int>(0)
    runConcurrently(4) { index in
      mutex.withLock {
        if index == 0 {
          condition.wait(mutex, until: { arrived.value == 3 })
          go.value = true
          condition.broadcast()
        } else {
          arrived.value += 1
          condition.broadcast()
          condition.wait(mutex, until: { go.value })
          woke.increment(ordering: .relaxed)
        }
      }
    }
    #expect(woke.load(ordering: .relaxed) == 3)
  }

  @Test("waiting with a mutex the caller does not hold is reported", .runsExitTests)
  func waitWithoutMutex() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        ConditionVariable().wait(Lock())
      }
    }
  }

  @Test("waiting with a second mutex is reported", .runsExitTests)
  func twoMutexes() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let condition = ConditionVariable()
        let first = Lock()
        let second = Lock()
        first.withLock { _ = condition.wait(first, timeout: .zero) }
        second.withLock { _ = condition.wait(second, timeout: .zero) }
      }
    }
  }
}
