import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("Semaphore", .timeLimit(.minutes(3)))
struct SemaphoreTests {
  @Test("wait takes, signal returns, tryWait never blocks")
  func counting() {
    let semaphore = Semaphore(value: 2)
    #expect(semaphore.value == 2)
    #expect(semaphore.tryWait())
    semaphore.wait()
    #expect(semaphore.value == 0)
    #expect(!semaphore.tryWait())
    semaphore.signal()
    #expect(semaphore.value == 1)
    #expect(semaphore.wait(timeout: .zero), "an available permit is taken even with no time")
    #expect(Semaphore().value == 0)
  }

  @Test("timed waits time out on the monotonic clock, never early; bad timeouts at once")
  func timedWaits() {
    let semaphore = Semaphore()
    let start = MonotonicInstant.now
    #expect(!semaphore.wait(timeout: .milliseconds(30)))
    expectTimedOut(from: start, timeout: .milliseconds(30))
    #expect(!semaphore.wait(timeout: .seconds(-3)))
    #expect(!semaphore.wait(before: .distantPast))
    #expect(semaphore.value == 0)
  }

  @Test("a signal from another thread wakes a blocked waiter")
  func signalWakes() {
    let semaphore = Semaphore()
    let got = GuardedValue(false)
    runConcurrently(2) { index in
      if index == 0 {
        got.value = semaphore.wait(timeout: .seconds(30))
      } else {
        semaphore.signal()
      }
    }
    #expect(got.value)
    #expect(semaphore.value == 0)
  }

  @Test("stress: never more than N threads inside the bounded section")
  func boundsConcurrency() {
    let limit = 3
    let semaphore = Semaphore(value: limit)
    let inside = AtomicInteger<Int>(0)
    let maximum = AtomicInteger<Int>(0)
    let entries = AtomicInteger<Int>(0)
    runConcurrently(8) { _ in
      for _ in 0..<2_000 {
        semaphore.wait()
        let now = inside.increment(ordering: .full)
        var seen = maximum.load(ordering: .relaxed)
        while now > seen, !maximum.compareAndSwap(expected: seen, desired: now, ordering: .relaxed) {
          seen = maximum.load(ordering: .relaxed)
        }
        entries.increment(ordering: .relaxed)
        inside.decrement(ordering: .full)
        semaphore.signal()
      }
    }
    #expect(maximum.load(ordering: .relaxed) <= limit)
    #expect(maximum.load(ordering: .relaxed) >= 1)
    #expect(entries.load(ordering: .relaxed) == 16_000)
    #expect(semaphore.value == limit)
  }

  @Test("ping-pong between two threads hands over exactly")
  func pingPong() {
    let ping = Semaphore()
    let pong = Semaphore()
    let rounds = 2_000
    let log = GuardedValue(0)
    runConcurrently(2) { index in
      for _ in 0..<rounds {
        if index == 0 {
          log.value += 1
          ping.signal()
          pong.wait()
        } else {
          ping.wait()
          log.value += 1
          pong.signal()
        }
      }
    }
    #expect(log.value == 2 * rounds)
  }

  @Test("stress: timed waiters that give up while permits arrive lose no permit and strand no sleeper")
  func timedWaitersLoseNothing() {
    let semaphore = Semaphore()
    let permits = 20_000
    let taken = AtomicInteger<Int>(0)
    let producing = AtomicInteger<Int>(1)
    runConcurrently(5) { index in
      if index == 0 {
        for _ in 0..<permits { semaphore.signal() }
        producing.store(0, ordering: .releasing)
        return
      }
      // Short timeouts make waiters leave all the time, racing the signals; every permit
      // must still be taken by someone, and the last waiters must not sleep past the end.
      while true {
        if semaphore.wait(timeout: .microseconds(50)) {
          _ = taken.increment(ordering: .relaxed)
        } else if producing.load(ordering: .acquiring) == 0 && semaphore.value == 0 {
          return
        }
      }
    }
    #expect(taken.load(ordering: .relaxed) + semaphore.value == permits)
    #expect(semaphore.value == 0)
  }

  @Test("a signal beyond UInt32.max permits is reported, and the count stays intact until then", .runsExitTests)
  func overflowIsReported() async {
    let full = Semaphore(value: Int(UInt32.max) - 1)
    full.signal()
    #expect(full.value == Int(UInt32.max))
    #expect(full.tryWait())
    #expect(full.value == Int(UInt32.max) - 1)
    await #expect(processExitsWith: .failure) {
      let semaphore = Semaphore(value: Int(UInt32.max))
      semaphore.signal()
    }
  }

  @Test("a negative initial value is reported", .runsExitTests)
  func negativeValue() async {
    await #expect(processExitsWith: .failure) {
      _ = Semaphore(value: -1)
    }
  }
}
