import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("Latch", .timeLimit(.minutes(3)))
struct LatchTests {
  @Test("opens after count count-downs; writes before countDown are visible after wait")
  func opens() {
    let workers = 4
    let latch = Latch(count: workers)
    let results = UnsafeMutableBufferPointer<Int>.allocate(capacity: workers)
    results.initialize(repeating: 0)
    defer { results.deallocate() }
    nonisolated(unsafe) let shared = results
    let seen = GuardedValue<[Int]>([])
    runConcurrently(workers + 1) { index in
      if index < workers {
        shared[index] = index + 1
        latch.countDown()
      } else {
        latch.wait()
        seen.value = Array(shared)
      }
    }
    #expect(seen.value == [1, 2, 3, 4])
    #expect(latch.isOpen)
    #expect(latch.count == 0)
  }

  @Test("count 0 is open; countDown(by:) counts several")
  func zeroAndBy() {
    #expect(Latch(count: 0).isOpen)
    #expect(Latch(count: 0).wait(timeout: .zero))
    let latch = Latch(count: 5)
    latch.countDown(by: 3)
    #expect(latch.count == 2)
    #expect(!latch.isOpen)
    latch.countDown(by: 2)
    #expect(latch.wait(timeout: .seconds(-1)), "open: returns true even with no time")
  }

  @Test("timed waits time out on the monotonic clock, never early; bad timeouts at once")
  func timedWaits() {
    let latch = Latch(count: 1)
    let start = MonotonicInstant.now
    #expect(!latch.wait(timeout: .milliseconds(30)))
    expectTimedOut(from: start, timeout: .milliseconds(30))
    #expect(!latch.wait(timeout: .seconds(-1)))
    #expect(!latch.wait(before: .distantPast))
  }

  @Test("releases many waiting threads at once")
  func releasesMany() {
    let start = Latch(count: 1)
    let released = AtomicInteger<Int>(0)
    runConcurrently(5) { index in
      if index == 0 {
        start.countDown()
      } else {
        start.wait()
        released.increment(ordering: .relaxed)
      }
    }
    #expect(released.load(ordering: .relaxed) == 4)
  }

  @Test("counting below zero and negative counts are reported", .runsExitTests)
  func misuse() async {
    await #expect(processExitsWith: .failure) {
      let latch = Latch(count: 1)
      latch.countDown()
      latch.countDown()
    }
    await #expect(processExitsWith: .failure) {
      _ = Latch(count: -1)
    }
  }
}
