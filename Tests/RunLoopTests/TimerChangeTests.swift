import RunLoop
import Sync
import TestSupport
import Testing

/// Changing a timer after creation: the due instant a callback serves, interval and
/// tolerance changes, and re-arming after invalidation.
@Suite(.timeLimit(.minutes(3))) struct TimerChangeTests {
  @Test func theCallbackReadsTheInstantItsFiringWasScheduledFor() {
    TestThread.run {
      let start = MonotonicInstant.after(.milliseconds(2))
      let interval = Duration.milliseconds(3)
      let seen = Recorder<MonotonicInstant?>()
      let timer = RunLoopTimer(fireAt: start, interval: interval) { timer in
        seen.append(timer.scheduledFireDate)
        if seen.count == 3 { timer.invalidate() }
      }
      #expect(timer.scheduledFireDate == nil)
      RunLoop.current.add(timer, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      let dates = seen.snapshot.compactMap { $0 }
      #expect(dates.count == 3)
      #expect(dates.first == start)
      // Every one on the grid, each a whole number of periods after the first.
      for date in dates {
        let periods = Int(((date - start) / interval).rounded())
        #expect(date == start + interval * periods)
      }
      #expect(zip(dates, dates.dropFirst()).allSatisfy { $0 < $1 })
      #expect(timer.scheduledFireDate == dates.last)
    }
  }

  @Test func settingTheIntervalRePlansTheNextFiring() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Recorder<MonotonicInstant>()
      let timer = RunLoopTimer(after: .zero, interval: .seconds(3600)) { timer in
        fired.append(timer.scheduledFireDate!)
        RunLoop.current.stop()
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(fired.count == 1)
      // Without the re-plan the next firing would be an hour away.
      let first = fired.snapshot[0]
      timer.interval = .milliseconds(5)
      #expect(timer.interval == .milliseconds(5))
      #expect(timer.nextFireDate == first + .milliseconds(5))
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(fired.snapshot.last == first + .milliseconds(5))
      timer.interval = .zero  // one-shot from now on: invalidated after its next firing
      timer.setNextFireDate(.now)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(!timer.isValid)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
    }
  }

  @Test func settingTheIntervalFromAnotherThreadWakesTheSleepingLoop() {
    let loopBox = Box<RunLoop?>(nil)
    let timerBox = Box<RunLoopTimer?>(nil)
    let fires = Box(0)
    let thread = TestThread.spawn {
      let timer = RunLoopTimer(after: .zero, interval: .seconds(3600)) { timer in
        fires.update { $0 += 1 }
        if fires.value == 2 { timer.invalidate() }
      }
      RunLoop.current.add(timer, forMode: .default)
      timerBox.value = timer
      loopBox.value = RunLoop.current
      // Finished once the second firing invalidated it; an hour-long wait otherwise.
      _ = RunLoop.current.run(mode: .default, timeout: .seconds(50))
    }
    waitUntil { fires.value == 1 && loopBox.value?.isWaiting == true }
    timerBox.value!.interval = .milliseconds(1)
    thread.join()
    #expect(fires.value == 2)
  }

  @Test func settingTheToleranceKeepsTheTimerScheduled() {
    TestThread.run {
      let fired = Box(false)
      let timer = RunLoopTimer(after: .milliseconds(2)) { _ in fired.value = true }
      RunLoop.current.add(timer, forMode: .default)
      timer.tolerance = .milliseconds(1)
      #expect(timer.tolerance == .milliseconds(1))
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fired.value)
    }
  }

  @Test func anInvalidatedTimerCanBeReArmedAndAddedAgain() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in log.append("never") }
      runLoop.add(timer, forMode: .default)
      timer.invalidate()
      #expect(!timer.isValid)
      #expect(runLoop.nextTimerFireDate(inMode: .default) == nil)
      let date = MonotonicInstant.after(.milliseconds(2))
      timer.rearm(fireAt: date) { timer in log.append("rearmed \(timer.scheduledFireDate == date)") }
      #expect(timer.isValid)
      #expect(!runLoop.contains(timer, inMode: .default), "re-armed, but in no mode until added")
      #expect(runLoop.add(timer, forMode: .default))
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["rearmed true"])
      // A one-shot timer that fired is invalid: it can be re-armed, in another run loop too.
      #expect(!timer.isValid)
      timer.rearm(after: .zero) { _ in log.append("elsewhere") }
      TestThread.run {
        #expect(RunLoop.current.add(timer, forMode: .default))
        #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      }
      #expect(log.snapshot == ["rearmed true", "elsewhere"])
    }
  }

  @Test func aOneShotTimerReArmedFromItsCallbackFiresAgain() {
    TestThread.run {
      let count = Box(0)
      let timer = RunLoopTimer(after: .zero) { timer in
        count.update { $0 += 1 }
        timer.rearm(after: .milliseconds(1)) { _ in count.update { $0 += 10 } }
      }
      RunLoop.current.add(timer, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(count.value == 11)
      #expect(!timer.isValid)
    }
  }

  @Test(.runsExitTests) func reArmingAValidTimerOutsideItsCallbackIsRefused() async {
    await #expect(processExitsWith: .failure) {
      let timer = RunLoopTimer(after: .seconds(1)) { _ in }
      timer.rearm(after: .zero) { _ in }
    }
  }

  @Test func nextTimerFireDateSkipsATimerWhoseCallbackIsRunning() {
    TestThread.run {
      let runLoop = RunLoop.current
      let later = MonotonicInstant.after(.seconds(3600))
      let other = RunLoopTimer(fireAt: later) { _ in }
      runLoop.add(other, forMode: .default)
      let seen = Box<MonotonicInstant?>(nil)
      // Repeating, so it stays valid (and keeps its due date) while its callback runs.
      let timer = RunLoopTimer(after: .zero, interval: .seconds(7200)) { _ in
        seen.value = RunLoop.current.nextTimerFireDate(inMode: .default)
        RunLoop.current.stop()
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      // Core Foundation's `CFRunLoopGetNextTimerFireDate` discounts a timer that is firing:
      // its due date is already past and says nothing about the next wake-up.
      #expect(seen.value == later)
      // After the callback the timer counts again, at its next period.
      #expect(runLoop.nextTimerFireDate(inMode: .default) == later)
      timer.invalidate()
      other.invalidate()
    }
  }
}
