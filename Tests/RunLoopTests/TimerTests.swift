import RunLoop
import Sync
import TestSupport
import Testing

#if canImport(Glibc)
  import Glibc
#endif

@Suite(.timeLimit(.minutes(3))) struct TimerTests {
  @Test func oneShotTimerNeverFiresEarly() {
    TestThread.run {
      let firedAt = Box<MonotonicInstant?>(nil)
      let fireDate = MonotonicInstant.after(.milliseconds(15))
      let timer = RunLoopTimer(fireAt: fireDate) { _ in firedAt.value = .now }
      #expect(!timer.isRepeating)
      RunLoop.current.add(timer, forMode: .default)
      #expect(RunLoop.current.nextTimerFireDate(inMode: .default) == fireDate)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      let fired = try! #require(firedAt.value)
      #expect(fired >= fireDate)
    }
  }

  @Test func repeatingTimerStaysOnItsGridAndNeverFiresEarly() {
    TestThread.run {
      let start = MonotonicInstant.after(.milliseconds(2))
      let interval = Duration.milliseconds(3)
      let scheduled = Recorder<(MonotonicInstant, MonotonicInstant)>()
      let timer = RunLoopTimer(fireAt: start, interval: interval) { timer in
        scheduled.append((timer.nextFireDate, .now))
        if scheduled.count == 10 { timer.invalidate() }
      }
      RunLoop.current.add(timer, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      let fires = scheduled.snapshot
      #expect(fires.count == 10)
      var previous = MonotonicInstant.distantPast
      for (date, actual) in fires {
        #expect(actual >= date)  // never early
        #expect(start.duration(to: date) >= .zero)
        #expect(wholeNanoseconds(start.duration(to: date)) % 3_000_000 == 0)  // on the grid
        #expect(date > previous)
        previous = date
      }
    }
  }

  @Test func lateRepeatingTimerFiresOnceForMissedPeriodsAndKeepsItsGrid() {
    TestThread.run {
      let start = MonotonicInstant.after(.milliseconds(1))
      let interval = Duration.milliseconds(10)
      let fires = Recorder<MonotonicInstant>()
      let busyUntil = Box<MonotonicInstant>(.distantPast)
      let timer = RunLoopTimer(fireAt: start, interval: interval) { timer in
        fires.append(timer.nextFireDate)
        if fires.count == 1 {
          // Simulate a busy callback that misses three periods.
          let busyEnd = MonotonicInstant.after(.milliseconds(35))
          while !busyEnd.hasPassed { sched_yield() }
          busyUntil.value = .now
        } else {
          timer.invalidate()
        }
      }
      // The loop reschedules from its own clock reading, taken after the callback returns
      // and before the pass's next step; the first `beforeWaiting` after the busy callback
      // bounds that reading from above (a preemption between the two moves both).
      let loopReadBy = Box<MonotonicInstant>(.distantPast)
      let observer = RunLoopObserver(activities: .beforeWaiting) { _, _ in
        if busyUntil.value != .distantPast && loopReadBy.value == .distantPast {
          loopReadBy.value = .now
        }
      }
      RunLoop.current.add(observer, forMode: .default)
      RunLoop.current.add(timer, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      observer.invalidate()
      let dates = fires.snapshot
      #expect(dates.count == 2)
      #expect(dates[0] == start)
      // The second firing is the first grid point after the loop's reading: later than the
      // busy callback's end, and no more than one period after the reading (no period
      // skipped beyond the missed ones).
      #expect(dates[1] > busyUntil.value)
      #expect(start.duration(to: dates[1]) >= .milliseconds(40))
      #expect(wholeNanoseconds(start.duration(to: dates[1])) % 10_000_000 == 0)
      #expect(loopReadBy.value != .distantPast)
      #expect(dates[1] <= loopReadBy.value.advanced(by: interval))
    }
  }

  @Test func setNextFireDateFromTheCallbackWinsOverTheGrid() {
    TestThread.run {
      let scheduled = Recorder<MonotonicInstant>()
      let moved = Box<MonotonicInstant>(.distantPast)
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .seconds(3600)) { timer in
        scheduled.append(timer.nextFireDate)
        if scheduled.count == 1 {
          let date = MonotonicInstant.after(.milliseconds(3))
          moved.value = date
          timer.setNextFireDate(date)
        } else {
          timer.invalidate()
        }
      }
      RunLoop.current.add(timer, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(scheduled.count == 2)
      #expect(scheduled.snapshot.last == moved.value)
    }
  }

  @Test func zeroOrNegativeIntervalMeansOneShot() {
    TestThread.run {
      let count = Box(0)
      let timer = RunLoopTimer(after: .zero, interval: .milliseconds(-5)) { _ in count.update { $0 += 1 } }
      #expect(!timer.isRepeating)
      RunLoop.current.add(timer, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(count.value == 1)
      #expect(!timer.isValid)
    }
  }

  @Test func setNextFireDateFromAnotherThreadReArmsASleepingLoop() {
    let loopBox = Box<RunLoop?>(nil)
    let firedAt = Box<MonotonicInstant?>(nil)
    let timer = RunLoopTimer(fireAt: .after(.seconds(3600))) { _ in firedAt.value = .now }
    let thread = TestThread.spawn {
      RunLoop.current.add(timer, forMode: .default)
      loopBox.value = RunLoop.current
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(60)) == .finished)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    let newDate = MonotonicInstant.after(.milliseconds(5))
    timer.setNextFireDate(newDate)
    #expect(timer.nextFireDate == newDate)
    thread.join()
    let fired = try! #require(firedAt.value)
    #expect(fired >= newDate)
  }

  @Test func invalidateFromAnotherThreadThenWakeUpFinishesTheRun() {
    let loopBox = Box<RunLoop?>(nil)
    let fired = Box(false)
    let timer = RunLoopTimer(fireAt: .after(.seconds(3600))) { _ in fired.value = true }
    let thread = TestThread.spawn {
      RunLoop.current.add(timer, forMode: .default)
      loopBox.value = RunLoop.current
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(60)) == .finished)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    timer.invalidate()
    timer.invalidate()  // idempotent
    loopBox.value!.wakeUp()
    thread.join()
    #expect(!fired.value)
    #expect(!timer.isValid)
  }

  @Test func toleranceDelaysAtMostByTheToleranceAndNeverAdvances() {
    TestThread.run {
      let times = Recorder<(String, MonotonicInstant, MonotonicInstant)>()
      let a = RunLoopTimer(after: .milliseconds(2), tolerance: .milliseconds(20)) { t in
        times.append(("a", t.nextFireDate, .now))
      }
      let b = RunLoopTimer(after: .milliseconds(10)) { t in times.append(("b", t.nextFireDate, .now)) }
      #expect(a.tolerance == .milliseconds(20))
      RunLoop.current.add(a, forMode: .default)
      RunLoop.current.add(b, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      let fires = times.snapshot
      #expect(fires.count == 2)
      for (_, date, actual) in fires { #expect(actual >= date) }
      // a's window (2..22 ms) includes b's deadline: both fire in one wake-up, a first.
      #expect(fires.map(\.0) == ["a", "b"])
    }
  }

  @Test func secondsInitializerRejectsNaNAndInfiniteValues() {
    #expect(RunLoopTimer(seconds: .nan) { _ in } == nil)
    #expect(RunLoopTimer(seconds: .infinity) { _ in } == nil)
    #expect(RunLoopTimer(seconds: 1, intervalSeconds: -.infinity) { _ in } == nil)
    #expect(RunLoopTimer(seconds: 1, toleranceSeconds: .nan) { _ in } == nil)
    let timer = try! #require(RunLoopTimer(seconds: 0.25, intervalSeconds: 0.5, toleranceSeconds: -1) { _ in })
    #expect(timer.interval == .milliseconds(500))
    #expect(timer.tolerance == .zero)
    #expect(timer.nextFireDate > .now)
    TestThread.run {
      let fired = Box(false)
      let past = try! #require(RunLoopTimer(seconds: -5) { _ in fired.value = true })
      RunLoop.current.add(past, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fired.value)
    }
  }

  @Test func negativeToleranceIsZero() {
    let timer = RunLoopTimer(after: .seconds(1), tolerance: .milliseconds(-1)) { _ in }
    #expect(timer.tolerance == .zero)
    timer.tolerance = .seconds(-3)
    #expect(timer.tolerance == .zero)
  }

  @Test func scheduledTimerGoesToTheCurrentRunLoopDefaultMode() {
    TestThread.run {
      let count = Box(0)
      let timer = RunLoopTimer.scheduled(after: .milliseconds(1)) { _ in count.update { $0 += 1 } }
      #expect(RunLoop.current.contains(timer, inMode: .default))
      RunLoop.current.run()
      #expect(count.value == 1)
    }
  }

  @Test func addingAnInvalidatedTimerIsADetectableNoOp() {
    TestThread.run {
      let timer = RunLoopTimer(after: .zero) { _ in }
      timer.invalidate()
      #expect(RunLoop.current.add(timer, forMode: .default) == false)
      #expect(!RunLoop.current.contains(timer, inMode: .default))
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
    }
  }

  @Test func timerInSeveralModesFiresOnceAndRemovalIsHarmless() {
    TestThread.run {
      let count = Box(0)
      let other: RunLoopMode = "other"
      let timer = RunLoopTimer(after: .zero) { _ in count.update { $0 += 1 } }
      RunLoop.current.add(timer, forMode: .default)
      RunLoop.current.add(timer, forMode: other)
      RunLoop.current.remove(timer, forMode: "never-added")
      #expect(RunLoop.current.run(mode: other, timeout: .seconds(30)) == .finished)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(count.value == 1)
    }
  }

  @Test func removedTimerMayMoveToAnotherRunLoop() {
    let timer = RunLoopTimer(after: .zero) { _ in }
    TestThread.run {
      RunLoop.current.add(timer, forMode: .default)
      RunLoop.current.remove(timer, forMode: .default)
    }
    TestThread.run {
      #expect(RunLoop.current.add(timer, forMode: .default))
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
    }
    #expect(!timer.isValid)
  }

  @Test(.runsExitTests) func addingATimerToASecondRunLoopIsRefused() async {
    await #expect(processExitsWith: .failure) {
      let timer = RunLoopTimer(after: .seconds(60)) { _ in }
      RunLoop.current.add(timer, forMode: .default)
      TestThread.run { RunLoop.current.add(timer, forMode: .default) }
    }
  }
}

func wholeNanoseconds(_ duration: Duration) -> Int64 {
  let (seconds, attoseconds) = duration.components
  return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
}
