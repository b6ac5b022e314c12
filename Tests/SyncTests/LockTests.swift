import Glibc
import ProcessTestSupport
import Sync
import Testing

/// A counter that is deliberately not atomic: only a lock makes concurrent increments exact.
final class UnprotectedCounter: @unchecked Sendable {
  var value = 0
}

/// Hammers `lock` from `threads` threads and checks no increment was lost.
func expectExactCount(_ lock: some Locking, threads: Int = 4, increments: Int = 20_000) {
  let counter = UnprotectedCounter()
  runConcurrently(threads) { _ in
    for _ in 0..<increments {
      lock.withLock { counter.value += 1 }
    }
  }
  #expect(counter.value == threads * increments)
}

@Suite("Lock", .timeLimit(.minutes(3)))
struct MutexTests {
  @Test("lock, tryLock and unlock", arguments: [true, false])
  func basics(checked: Bool) {
    let mutex = Lock(checked: checked)
    #expect(mutex.isChecked == checked)
    #expect(!mutex.isHeldByCurrentThread)
    mutex.lock()
    #expect(mutex.isHeldByCurrentThread)
    #expect(!mutex.tryLock(), "tryLock on a held mutex fails, even for its holder")
    mutex.unlock()
    #expect(mutex.tryLock())
    mutex.unlock()
  }

  @Test("withLock returns the body's value and releases on return and on throw")
  func scoped() {
    struct Failure: Error, Equatable {}
    let mutex = Lock()
    #expect(mutex.withLock { 41 + 1 } == 42)
    #expect(throws: Failure.self) {
      try mutex.withLock { () throws(Failure) -> Void in throw Failure() }
    }
    #expect(mutex.tryLock(), "released after the throw")
    #expect(mutex.withLockIfAvailable { 1 } == nil, "busy while held")
    mutex.unlock()
    #expect(mutex.withLockIfAvailable { 2 } == 2)
    #expect(mutex.withLock(before: .after(.milliseconds(10))) { 3 } == 3)
    #expect(mutex.withLock(timeout: .milliseconds(10)) { 4 } == 4)
  }

  @Test("a held mutex blocks another thread's tryLock and times out its timed lock")
  func heldElsewhere() {
    let mutex = Lock()
    mutex.lock()
    let results = AtomicInteger<Int>(0)
    runConcurrently(1) { _ in
      if !mutex.tryLock() { results.add(1, ordering: .relaxed) }
      let start = MonotonicInstant.now
      if !mutex.lock(timeout: .milliseconds(20)) { results.add(10, ordering: .relaxed) }
      let waited = start.duration(to: .now)
      // Never early; generous bound on lateness.
      if waited >= .milliseconds(20) && waited < .seconds(5) { results.add(100, ordering: .relaxed) }
      if !mutex.lock(before: .distantPast) { results.add(1000, ordering: .relaxed) }
    }
    mutex.unlock()
    #expect(results.load(ordering: .relaxed) == 1111)
  }

  @Test("a timed lock succeeds when the holder releases before the deadline")
  func timedLockSucceeds() {
    // Unchecked: the releasing thread is not the one that locked it (a documented handover).
    let mutex = Lock(checked: false)
    let gate = Gate()
    let acquired = AtomicInteger<Int>(0)
    mutex.lock()
    runConcurrently(2) { index in
      if index == 0 {
        gate.open()
        if mutex.lock(timeout: .seconds(30)) {
          acquired.store(1, ordering: .relaxed)
          mutex.unlock()
        }
      } else {
        gate.wait()
        mutex.unlock()
      }
    }
    #expect(acquired.load(ordering: .relaxed) == 1)
  }

  @Test("no increment is lost under contention", arguments: [2, 4, 8])
  func stress(threads: Int) {
    expectExactCount(Lock(checked: false), threads: threads)
    expectExactCount(Lock(checked: true), threads: threads)
  }

  @Test("Listing 4-2: a POSIX-style mutex protects work done by several threads")
  func listing4_2() {
    let mutex = Lock()
    let shared = UnprotectedCounter()
    runConcurrently(3) { _ in
      for _ in 0..<1_000 {
        mutex.lock()
        // Do work.
        shared.value += 1
        mutex.unlock()
      }
    }
    #expect(shared.value == 3_000)
  }
}

@Suite("Lock misuse", .timeLimit(.minutes(3)))
struct MutexMisuseTests {
  @Test("unlocking an unlocked mutex is reported, checked or not", .runsExitTests)
  func unlockUnlocked() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        Lock(checked: false).unlock()
      }
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        Lock(checked: true).unlock()
      }
    }
  }

  @Test("re-locking on the holding thread is reported instead of hanging", .runsExitTests)
  func selfDeadlock() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let mutex = Lock(checked: false)
        mutex.lock()
        mutex.lock()
      }
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let mutex = Lock(checked: true)
        mutex.lock()
        _ = mutex.lock(timeout: .seconds(60))
      }
    }
  }

  @Test("checked mode reports unlocking from a thread that does not hold the mutex", .runsExitTests)
  func unlockFromOtherThread() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let mutex = Lock(checked: true)
        mutex.lock()
        runConcurrently(1) { _ in mutex.unlock() }
      }
    }
  }

  @Test("destroying a locked mutex is reported", .runsExitTests)
  func deinitWhileLocked() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        var mutex: Lock? = Lock()
        mutex!.lock()
        mutex = nil
        _ = mutex
      }
    }
  }
}
