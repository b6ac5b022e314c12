import RunLoop
import Sync
import TestSupport
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// The run loop keeps its timers in a schedule (heaps keyed by fire date and by fire date
/// plus tolerance) instead of scanning them every pass; these tests pin down what the
/// schedule must preserve.
@Suite("RunLoop timer schedule", .timeLimit(.minutes(3)))
struct TimerScheduleTests {
  @Test("a thousand one-shot timers with scattered dates each fire once, in date order, never early")
  func manyTimersFireInDateOrder() {
    TestThread.run {
      let runLoop = RunLoop.current
      let start = MonotonicInstant.now
      var generator = SplitMix(seed: 42)
      let fired = Recorder<(scheduled: MonotonicInstant, at: MonotonicInstant, index: Int)>()
      for index in 0..<1_000 {
        let date = start.advanced(by: .microseconds(Int64(generator.next() % 40_000)))
        let timer = RunLoopTimer(fireAt: date) { timer in
          fired.append((date, .now, index))
        }
        runLoop.add(timer, forMode: .default)
      }
      #expect(runLoop.run(mode: .default, timeout: .seconds(60)) == .finished)
      let fires = fired.snapshot
      #expect(fires.count == 1_000)
      #expect(Set(fires.map(\.index)).count == 1_000, "each timer fired exactly once")
      #expect(fires.allSatisfy { $0.at >= $0.scheduled }, "never early")
      #expect(zip(fires, fires.dropFirst()).allSatisfy { $0.scheduled <= $1.scheduled }, "in date order")
    }
  }

  @Test("timers with the same fire date fire in the order they were added")
  func equalDatesKeepTheOrderAdded() {
    TestThread.run {
      let runLoop = RunLoop.current
      let date = MonotonicInstant.after(.milliseconds(5))
      let order = Recorder<Int>()
      // Added in an order unrelated to their identities or addresses.
      for index in [3, 1, 4, 0, 2] {
        runLoop.add(RunLoopTimer(fireAt: date) { _ in order.append(index) }, forMode: .default)
      }
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(order.snapshot == [3, 1, 4, 0, 2])
    }
  }

  @Test("timers re-dated many times (thousands of stale schedule entries) fire once, at their last date")
  func redatedTimersFireOnceAtTheirLastDate() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Recorder<(Int, MonotonicInstant, MonotonicInstant)>()
      var timers: [(RunLoopTimer, Box<MonotonicInstant>)] = []
      for index in 0..<10 {
        let last = Box<MonotonicInstant>(.distantFuture)
        let timer = RunLoopTimer(fireAt: .distantFuture) { _ in fired.append((index, last.value, .now)) }
        runLoop.add(timer, forMode: .default)
        timers.append((timer, last))
      }
      // 500 re-datings each, far future first, then a near date: every one but the last
      // leaves stale entries behind.
      for round in 0..<500 {
        for (index, (timer, last)) in timers.enumerated() {
          let date: MonotonicInstant =
            round == 499 ? .after(.milliseconds(Int64(2 + index))) : .after(.seconds(Int64(1_000 + round)))
          last.value = date
          timer.setNextFireDate(date)
        }
      }
      #expect(runLoop.run(mode: .default, timeout: .seconds(60)) == .finished)
      let fires = fired.snapshot
      #expect(fires.map(\.0).sorted() == Array(0..<10), "each fired once")
      #expect(fires.allSatisfy { $0.2 >= $0.1 }, "at or after the last date set")
    }
  }

  @Test("a nested run inside a timer's callback fires another due timer and sleeps instead of spinning")
  func nestedRunFiresOtherDueTimers() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let date = MonotonicInstant.after(.milliseconds(2))
      let passes = AtomicInteger<Int>(0)
      let observer = RunLoopObserver(activities: .beforeTimers) { _, _ in _ = passes.increment(ordering: .relaxed) }
      runLoop.add(observer, forMode: .default)
      let outer = RunLoopTimer(fireAt: date) { _ in
        log.append("outer begins")
        let before = passes.load(ordering: .relaxed)
        // `inner` is due too; the nested run must fire it, then sleep until its deadline
        // (the mode still holds `keepAlive`), not spin on the firing `outer`.
        _ = runLoop.run(mode: .default, timeout: .milliseconds(50))
        log.append("nested passes \(passes.load(ordering: .relaxed) - before < 10 ? "few" : "many")")
        log.append("outer ends")
      }
      let inner = RunLoopTimer(fireAt: date) { _ in log.append("inner") }
      let keepAlive = RunLoopTimer(fireAt: .distantFuture) { _ in }
      runLoop.add(outer, forMode: .default)
      runLoop.add(inner, forMode: .default)
      runLoop.add(keepAlive, forMode: .default)
      _ = runLoop.run(mode: .default, timeout: .milliseconds(200))
      #expect(log.snapshot == ["outer begins", "inner", "nested passes few", "outer ends"])
      keepAlive.invalidate()
    }
  }

  @Test("a timer that moves itself to another thread's run loop from its callback fires there")
  func timerMovesToAnotherLoop() {
    let loopB = Box<RunLoop?>(nil)
    let firedOn = Recorder<String>()
    let keepAlive = RunLoopSource(perform: {})
    let resultB = Box<RunLoopRunResult?>(nil)
    let threadB = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(keepAlive, forMode: .default)
      loopB.value = runLoop
      // Ends when the moved timer fires here and stops it; a timer B failed to schedule
      // would fire only when the deadline woke the loop, and the run would time out.
      resultB.value = runLoop.run(mode: .default, before: .after(.seconds(60)))
    }
    waitUntil { loopB.value != nil }
    let target = loopB.value!
    TestThread.run {
      let runLoopA = RunLoop.current
      let timer = RunLoopTimer(after: .milliseconds(2), interval: .milliseconds(2)) { timer in
        if RunLoop.current === runLoopA {
          firedOn.append("A")
          runLoopA.remove(timer, forMode: .default)
          #expect(target.add(timer, forMode: .default), "free to join another loop once in no mode")
        } else {
          firedOn.append("B")
          timer.invalidate()
          RunLoop.current.stop()
        }
      }
      runLoopA.add(timer, forMode: .default)
      #expect(runLoopA.run(mode: .default, timeout: .seconds(60)) == .finished)
    }
    threadB.join()
    #expect(firedOn.snapshot == ["A", "B"])
    #expect(resultB.value == .stopped, "fired on its schedule in B, not at B's run deadline")
    keepAlive.invalidate()
  }

  @Test("a timer removed from one mode stays scheduled in the other and fires there")
  func removalFromOneModeKeepsTheOther() {
    TestThread.run {
      let runLoop = RunLoop.current
      let other: RunLoopMode = "schedule.other"
      let fired = AtomicInteger<Int>(0)
      let timer = RunLoopTimer(after: .milliseconds(3)) { _ in _ = fired.increment(ordering: .relaxed) }
      runLoop.add(timer, forMode: .default)
      runLoop.add(timer, forMode: other)
      runLoop.remove(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(20)) == .finished, "nothing left in default")
      #expect(fired.load(ordering: .relaxed) == 0)
      #expect(runLoop.run(mode: other, timeout: .seconds(30)) == .finished)
      #expect(fired.load(ordering: .relaxed) == 1)
      // Re-added after removal: scheduled again, fires at its (new) date.
      let again = RunLoopTimer(after: .milliseconds(3)) { _ in _ = fired.increment(ordering: .relaxed) }
      runLoop.add(again, forMode: .default)
      runLoop.remove(again, forMode: .default)
      runLoop.add(again, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fired.load(ordering: .relaxed) == 2)
    }
  }

  @Test("a timer removed from a sleeping loop's mode by another thread does not wake it at its old date")
  func removedTimerDoesNotWakeTheSleepingLoop() {
    let published = Box<(RunLoop, RunLoopTimer)?>(nil)
    let ready = Latch(count: 1)
    let wakes = AtomicInteger<Int>(0)
    let worker = TestThread.spawn {
      let runLoop = RunLoop.current
      let keepAlive = RunLoopTimer(after: .seconds(3_600)) { _ in }
      runLoop.add(keepAlive, forMode: .default)
      let removed = RunLoopTimer(after: .milliseconds(400)) { _ in }
      runLoop.add(removed, forMode: .default)
      let observer = RunLoopObserver(activities: .afterWaiting) { _, _ in _ = wakes.increment(ordering: .relaxed) }
      runLoop.add(observer, forMode: .default)
      published.value = (runLoop, removed)
      ready.countDown()
      // Sleeps until the run's deadline (one wake-up) unless the removed timer still arms it.
      _ = runLoop.run(mode: .default, timeout: .milliseconds(800))
      observer.invalidate()
      keepAlive.invalidate()
    }
    ready.wait()
    let (runLoop, removed) = published.value!
    waitUntil { runLoop.isWaiting }
    runLoop.remove(removed, forMode: .default)
    worker.join()
    #expect(wakes.load(ordering: .relaxed) == 1, "the loop woke \(wakes.load(ordering: .relaxed)) times")
  }
}

/// A small deterministic generator for test data.
struct SplitMix {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9e37_79b9_7f4a_7c15
    var z = state
    z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
    z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
    return z ^ (z >> 31)
  }
}
