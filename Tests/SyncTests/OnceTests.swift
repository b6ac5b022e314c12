import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("Once", .timeLimit(.minutes(3)))
struct OnceTests {
  @Test("runs the body exactly once across many threads; all see its effect")
  func exactlyOnce() {
    for _ in 0..<20 {
      let once = Once()
      let runs = AtomicInteger<Int>(0)
      let value = GuardedValue(0)
      let sawValue = AtomicInteger<Int>(0)
      let arrived = AtomicInteger<Int>(0)
      runConcurrently(6) { _ in
        arrived.increment(ordering: .relaxed)
        while arrived.load(ordering: .relaxed) < 6 { sched_yield() }  // start together
        once.run {
          runs.increment(ordering: .relaxed)
          value.value = 42
        }
        if value.value == 42 { sawValue.increment(ordering: .relaxed) }
      }
      #expect(runs.load(ordering: .relaxed) == 1)
      #expect(sawValue.load(ordering: .relaxed) == 6)
      #expect(once.isCompleted)
    }
  }

  @Test("later calls do not run the body")
  func laterCalls() {
    let once = Once()
    var count = 0
    #expect(!once.isCompleted)
    once.run { count += 1 }
    once.run { count += 1 }
    once.run { count += 100 }
    #expect(count == 1)
  }

  @Test("a throwing body leaves it not done; the next call runs again")
  func throwingBody() {
    struct Failure: Error {}
    let once = Once()
    var attempts = 0
    #expect(throws: Failure.self) {
      try once.run { () throws(Failure) in
        attempts += 1
        throw Failure()
      }
    }
    #expect(!once.isCompleted)
    once.run { attempts += 1 }
    #expect(once.isCompleted)
    #expect(attempts == 2)
  }

  @Test("calling run from inside its own body is reported", .runsExitTests)
  func reentrant() async {
    await #expect(processExitsWith: .failure) {
      let once = Once()
      once.run { once.run {} }
    }
  }
}

@Suite("Lazy", .timeLimit(.minutes(3)))
struct LazyTests {
  @Test("computes once, on first use, and every thread sees the same value")
  func computesOnce() {
    let computed = AtomicInteger<Int>(0)
    let lazy = Lazy<[Int]> {
      computed.increment(ordering: .relaxed)
      return Array(0..<100)
    }
    #expect(!lazy.isInitialized)
    #expect(computed.load(ordering: .relaxed) == 0)
    let arrived = AtomicInteger<Int>(0)
    let results = UnsafeMutableBufferPointer<Int>.allocate(capacity: 4)
    results.initialize(repeating: 0)
    defer { results.deallocate() }
    nonisolated(unsafe) let shared = results
    runConcurrently(4) { index in
      arrived.increment(ordering: .relaxed)
      while arrived.load(ordering: .relaxed) < 4 { sched_yield() }
      shared[index] = lazy.value.reduce(0, +)
    }
    #expect(Array(results) == Array(repeating: 4950, count: 4))
    #expect(computed.load(ordering: .relaxed) == 1)
    #expect(lazy.isInitialized)
  }

  @Test("the initializer and what it captures are released once the value is computed")
  func initializerIsReleasedOnceItRan() {
    final class Capture: Sendable {}
    weak var weakCapture: Capture?
    let lazy: Lazy<Int>
    do {
      let capture = Capture()
      weakCapture = capture
      lazy = Lazy { withExtendedLifetime(capture) { 42 } }
    }
    #expect(weakCapture != nil, "held by the initializer until it runs")
    #expect(lazy.value == 42)
    #expect(weakCapture == nil, "the initializer that already ran still holds its captures")
    #expect(lazy.value == 42)
  }

  @Test("reading the value from its own initializer is reported", .runsExitTests)
  func reentrant() async {
    await #expect(processExitsWith: .failure) {
      final class Holder: @unchecked Sendable { var lazy: Lazy<Int>? }
      let holder = Holder()
      holder.lazy = Lazy { holder.lazy!.value + 1 }
      _ = holder.lazy!.value
    }
  }
}
