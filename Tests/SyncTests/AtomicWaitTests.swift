import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("AtomicInteger wait and wake", .timeLimit(.minutes(3)))
struct AtomicWaitTests {
  @Test("wait returns at once, without timing out, when the value already differs")
  func valueAlreadyDiffers() {
    let value = AtomicInteger<UInt32>(1)
    // A sleep would last until the deadline and return false.
    #expect(value.wait(whileEqualTo: 0, before: .after(.seconds(60))))
    let signed = AtomicInteger<Int32>(-5)
    #expect(signed.wait(whileEqualTo: 7, before: .after(.seconds(60))))
  }

  @Test("wait times out at its monotonic deadline, never before, and says so")
  func timesOut() {
    let value = AtomicInteger<UInt32>(0)
    let deadline = MonotonicInstant.after(.milliseconds(20))
    var result = true
    // A spurious return (a signal) may come first: loop as callers do.
    while result && !deadline.hasPassed { result = value.wait(whileEqualTo: 0, before: deadline) }
    #expect(result == false)
    #expect(deadline.hasPassed)
    #expect(value.load(ordering: .relaxed) == 0)
  }

  @Test("wait with a timeout returns false once the time is up, never before, and at once when the value differs")
  func timeoutTwin() {
    let value = AtomicInteger<UInt32>(0)
    let start = MonotonicInstant.now
    var result = true
    // A spurious return (a signal) may come first: loop as callers do.
    while result && MonotonicInstant.now - start < .milliseconds(20) {
      result = value.wait(whileEqualTo: 0, timeout: .milliseconds(20) - (MonotonicInstant.now - start))
    }
    #expect(result == false)
    #expect(MonotonicInstant.now - start >= .milliseconds(20))
    #expect(value.wait(whileEqualTo: 0, timeout: .zero) == false)
    #expect(value.wait(whileEqualTo: 1, timeout: .seconds(60)))
  }

  @Test("a sleeping waiter survives a wake-up with the value unchanged and returns once it changes")
  func sleeperWakesOnChange() {
    let value = AtomicInteger<UInt32>(0)
    let seen = AtomicInteger<UInt32>(0)
    let wakeUps = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      if index == 0 {
        while value.load(ordering: .acquiring) == 0 {
          value.wait(whileEqualTo: 0)
          _ = wakeUps.increment(ordering: .relaxed)
        }
        seen.store(value.load(ordering: .acquiring), ordering: .relaxed)
      } else {
        // wake returns 1 only while the other thread sleeps in the kernel: this proves the
        // sleep happened, and wakes it with the value still 0 (it must sleep again).
        while value.wake(count: 1) == 0 { sched_yield() }
        value.store(42, ordering: .releasing)
        value.wakeAll()
      }
    }
    #expect(seen.load(ordering: .relaxed) == 42)
    #expect(wakeUps.load(ordering: .relaxed) >= 1)
  }

  @Test("wakeAll releases every waiter once the value changed")
  func wakeAllReleasesEveryone() {
    let value = AtomicInteger<Int32>(0)
    let released = AtomicInteger<Int>(0)
    runConcurrently(4) { index in
      if index == 3 {
        value.store(1, ordering: .releasing)
        value.wakeAll()
        return
      }
      while value.load(ordering: .acquiring) == 0 { value.wait(whileEqualTo: 0) }
      _ = released.increment(ordering: .relaxed)
    }
    #expect(released.load(ordering: .relaxed) == 3)
  }

  @Test("waking with a count below 1 is reported as misuse", .runsExitTests)
  func wakeCountMisuse() async {
    await #expect(processExitsWith: .failure) {
      _ = AtomicInteger<UInt32>(0).wake(count: 0)
    }
  }
}
