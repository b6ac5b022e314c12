import RunLoop
import Sync
import TestSupport
import Testing
import Threads

// Scenarios of Core Foundation's run loop (`CFRunLoopRunInMode`, version-0 sources,
// observers, timers, blocks, common modes) and of swift-corelibs-foundation's TestRunLoop and
// TestTimer, written against this toolkit's API. Each test runs on a fresh thread (so its run
// loop starts empty) unless it needs two.

@Suite("CF scenarios: run results", .timeLimit(.minutes(3)))
struct PeerCFRunResultTests {
  @Test func runInAModeWithNothingReturnsFinishedAtOnceEvenWithALongTimeout() {
    TestThread.run {
      let runLoop = RunLoop.current
      #expect(runLoop.run(mode: .default, timeout: .seconds(600)) == .finished)
      #expect(runLoop.run(mode: "never-used", before: .distantFuture) == .finished)
      #expect(runLoop.run(before: .distantFuture) == .finished)
      runLoop.run()  // CFRunLoopRun returns at once too
    }
  }

  @Test func zeroNegativeAndPassedDeadlinesMakeOnePassAndTimeOut() {
    TestThread.run {
      let runLoop = RunLoop.current
      let passes = Box(0)
      let observer = RunLoopObserver(activities: .beforeSources) { _, _ in passes.update { $0 += 1 } }
      runLoop.add(observer, forMode: .default)
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(runLoop.run(mode: .default, timeout: .seconds(-1)) == .timedOut)
      #expect(runLoop.run(mode: .default, before: .distantPast) == .timedOut)
      #expect(runLoop.run(mode: .default, before: .now - .seconds(1)) == .timedOut)
      #expect(runLoop.run(before: .now) == .timedOut)
      #expect(passes.value == 5)
    }
  }

  @Test func signalledSourceWithReturnAfterSourceHandledReportsHandledSourceEvenWithZeroTimeout() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Box(0)
      let source = RunLoopSource(perform: { fired.update { $0 += 1 } })
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      #expect(fired.value == 1)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: false) == .timedOut)
      #expect(fired.value == 2)
      // Nothing signalled: no handler ran, so the zero-timeout run times out.
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .timedOut)
    }
  }

  @Test func returnAfterSourceHandledFiresOnlyTheLowestOrderSource() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let late = recordingSource("order 2", into: log, order: 2)
      let early = recordingSource("order 1", into: log, order: 1)
      runLoop.add(late, forMode: .default)
      runLoop.add(early, forMode: .default)
      late.signal()
      early.signal()
      #expect(runLoop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(log.snapshot == ["order 1"])
      #expect(late.isSignalled)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(log.snapshot == ["order 1", "order 2"])
    }
  }

  @Test func timerFiringIsNotAHandledSource() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Box(0)
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(1)) { timer in
        if fired.update({
          $0 += 1
          return $0
        }) == 3 {
          RunLoop.current.stop()
        }
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .stopped)
      #expect(fired.value == 3)
      timer.invalidate()
    }
  }

  @Test func stopFromAnotherThreadEndsASleepingRunWithStopped() {
    let loopBox = Box<RunLoop?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, before: .distantFuture)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    loopBox.value!.stop()
    loopThread.join()
    #expect(result.value == .stopped)
  }

  @Test func stopAndWakeUpWhileNotRunningAreForgotten() {
    TestThread.run {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      runLoop.stop()
      runLoop.wakeUp()
      // A stop sent before the run does not end it, as CFRunLoopStop on an idle loop.
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(20)) == .timedOut)
    }
  }

  @Test func wakeUpMakesAnotherPassWithoutEndingTheRun() {
    let loopBox = Box<RunLoop?>(nil)
    let wakes = Box(0)
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      let observer = RunLoopObserver(activities: .afterWaiting) { _, _ in wakes.update { $0 += 1 } }
      runLoop.add(observer, forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, before: .distantFuture)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    let runLoop = loopBox.value!
    runLoop.wakeUp()
    // It woke, made a pass, and sleeps again: the run goes on.
    waitUntil { wakes.value == 1 && runLoop.isWaiting }
    #expect(result.value == nil)
    runLoop.stop()
    loopThread.join()
    #expect(result.value == .stopped)
    #expect(wakes.value == 2)
  }

  /// A deliberate difference (the type's documentation): Core Foundation would sleep until
  /// the deadline once the mode's last source is gone; here the run returns finished.
  @Test func invalidatingASleepingRunsLastSourceFromAnotherThreadFinishesTheRun() {
    let loopBox = Box<RunLoop?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let cancelled = Box(false)
    let source = RunLoopSource(cancel: { _, _ in cancelled.value = true }, perform: {})
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(source, forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, before: .distantFuture)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    source.invalidate()
    loopThread.join()
    #expect(result.value == .finished)
    #expect(cancelled.value)
  }

  @Test func isWaitingIsFalseWhenAskedFromTheLoopsOwnThread() {
    TestThread.run {
      let runLoop = RunLoop.current
      let seen = Box<Bool?>(nil)
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in seen.value = runLoop.isWaiting }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(seen.value == false)
      #expect(!runLoop.isWaiting)
    }
  }

  @Test func stopEndsOnlyTheInnermostNestedRun() {
    TestThread.run {
      let runLoop = RunLoop.current
      let inner: RunLoopMode = "inner"
      let log = Recorder<String>()
      runLoop.add(RunLoopSource(perform: {}), forMode: inner)
      let innerTimer = RunLoopTimer(after: .milliseconds(1)) { _ in
        log.append("inner timer in \(RunLoop.current.currentMode?.rawValue ?? "nil")")
        RunLoop.current.stop()
      }
      runLoop.add(innerTimer, forMode: inner)
      let outerTimer = RunLoopTimer(after: .milliseconds(1)) { _ in
        let nested = RunLoop.current.run(mode: inner, timeout: .seconds(30))
        log.append("nested \(nested)")
        log.append("back in \(RunLoop.current.currentMode?.rawValue ?? "nil")")
      }
      runLoop.add(outerTimer, forMode: .default)
      #expect(runLoop.currentMode == nil)
      // The outer run is not stopped: it ends finished once its only timer fired.
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(
        log.snapshot == [
          "inner timer in inner", "nested stopped", "back in \(RunLoopMode.default.rawValue)",
        ])
      #expect(runLoop.currentMode == nil)
    }
  }

  @Test func aStopForTheOuterRunSurvivesANestedRunStartedAfterIt() {
    TestThread.run {
      let runLoop = RunLoop.current
      let inner: RunLoopMode = "inner"
      let log = Recorder<String>()
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      runLoop.add(RunLoopTimer(after: .milliseconds(1)) { _ in log.append("inner timer") }, forMode: inner)
      let source = RunLoopSource(perform: {
        RunLoop.current.stop()  // meant for the outer run, the innermost now
        log.append("nested \(RunLoop.current.run(mode: inner, timeout: .seconds(30)))")
      })
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(log.snapshot == ["inner timer", "nested finished"])
    }
  }

  @Test func aNestedRunInAnotherModeLeavesTheOuterModesSourcesAlone() {
    TestThread.run {
      let runLoop = RunLoop.current
      let inner: RunLoopMode = "inner"
      let log = Recorder<String>()
      let outerSource = recordingSource("outer source", into: log)
      runLoop.add(outerSource, forMode: .default)
      let innerSource = recordingSource("inner source", into: log)
      runLoop.add(innerSource, forMode: inner)
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in
        outerSource.signal()
        innerSource.signal()
        let nested = RunLoop.current.run(mode: inner, timeout: .zero)
        log.append("nested \(nested)")
        RunLoop.current.stop()
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(log.snapshot == ["inner source", "nested timedOut"])
      #expect(outerSource.isSignalled)
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      #expect(log.snapshot.last == "outer source")
    }
  }
}

@Suite("CF scenarios: observers", .timeLimit(.minutes(3)))
struct PeerCFObserverTests {
  @Test func observersAtOnePointRunInIncreasingOrderThenInTheOrderAdded() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      for (order, name) in [(5, "5"), (1, "1a"), (3, "3"), (1, "1b"), (-2, "-2")] {
        let observer = RunLoopObserver(activities: .entry, order: order) { _, _ in log.append(name) }
        runLoop.add(observer, forMode: .default)
      }
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      _ = runLoop.run(mode: .default, timeout: .zero)
      #expect(log.snapshot == ["-2", "1a", "1b", "3", "5"])
    }
  }

  @Test func oneShotObserverFiresOnceAndIsInvalidated() {
    TestThread.run {
      let runLoop = RunLoop.current
      let calls = Box(0)
      let observer = RunLoopObserver(activities: [.beforeTimers, .beforeSources], repeats: false) { _, _ in
        calls.update { $0 += 1 }
      }
      runLoop.add(observer, forMode: .default)
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      _ = runLoop.run(mode: .default, timeout: .zero)
      _ = runLoop.run(mode: .default, timeout: .zero)
      #expect(calls.value == 1)
      #expect(!observer.isValid)
      #expect(!runLoop.contains(observer, inMode: .default))
    }
  }

  @Test func anObserverInvalidatedByAnEarlierOneAtTheSamePointIsNotCalled() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let second = RunLoopObserver(activities: .entry, order: 2) { _, _ in log.append("second") }
      let first = RunLoopObserver(activities: .entry, order: 1) { _, _ in
        log.append("first")
        second.invalidate()
      }
      runLoop.add(second, forMode: .default)
      runLoop.add(first, forMode: .default)
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      _ = runLoop.run(mode: .default, timeout: .zero)
      #expect(log.snapshot == ["first"])
    }
  }

  @Test func aNestedRunNotifiesEntryAndExitOfItsOwnModesObservers() {
    TestThread.run {
      let runLoop = RunLoop.current
      let inner: RunLoopMode = "inner"
      let log = Recorder<String>()
      runLoop.add(
        RunLoopObserver(activities: [.entry, .exit]) { _, a in log.append("default \(a)") }, forMode: .default)
      runLoop.add(RunLoopObserver(activities: [.entry, .exit]) { _, a in log.append("inner \(a)") }, forMode: inner)
      runLoop.add(RunLoopSource(perform: {}), forMode: inner)
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in
        _ = RunLoop.current.run(mode: inner, timeout: .zero)
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["default entry", "inner entry", "inner exit", "default exit"])
    }
  }

  @Test func anObserverAddedToCommonModesIsCalledInAModeMadeCommonLater() {
    TestThread.run {
      let runLoop = RunLoop.current
      let tracking: RunLoopMode = "tracking"
      let log = Recorder<String>()
      let observer = RunLoopObserver(activities: .entry) { _, _ in
        log.append(RunLoop.current.currentMode?.rawValue ?? "nil")
      }
      runLoop.add(observer, forMode: .common)
      runLoop.add(RunLoopSource(perform: {}), forMode: tracking)
      _ = runLoop.run(mode: tracking, timeout: .zero)
      #expect(log.snapshot.isEmpty)
      runLoop.addCommonMode(tracking)
      #expect(runLoop.contains(observer, inMode: tracking))
      _ = runLoop.run(mode: tracking, timeout: .zero)
      #expect(log.snapshot == ["tracking"])
    }
  }
}

@Suite("CF scenarios: version-0 sources", .timeLimit(.minutes(3)))
struct PeerCFSourceTests {
  @Test func scheduleAndCancelCallbacksFollowEveryModeTheSourceEntersAndLeaves() {
    TestThread.run {
      let runLoop = RunLoop.current
      let custom: RunLoopMode = "Custom"
      let modes = Box<[RunLoopMode]>([])
      let log = Recorder<String>()
      let source = RunLoopSource(
        schedule: { loop, mode in
          #expect(loop === runLoop)
          modes.update { $0.append(mode) }
          log.append("schedule \(mode)")
        },
        cancel: { loop, mode in
          #expect(loop === runLoop)
          modes.update { $0.removeAll { $0 == mode } }
          log.append("cancel \(mode)")
        },
        perform: { log.append("perform") })
      #expect(modes.value == [])
      runLoop.add(source, forMode: .default)
      #expect(modes.value == [.default])
      runLoop.add(source, forMode: .default)  // twice: no second schedule
      #expect(modes.value == [.default])
      runLoop.add(source, forMode: custom)
      #expect(modes.value == [.default, custom])
      runLoop.remove(source, forMode: custom)
      #expect(modes.value == [.default])
      runLoop.remove(source, forMode: custom)  // not there: no second cancel
      runLoop.add(source, forMode: custom)
      #expect(modes.value == [.default, custom])
      source.signal()
      #expect(runLoop.run(mode: custom, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      source.invalidate()
      #expect(modes.value == [])
      #expect(!source.isValid)
      #expect(!runLoop.add(source, forMode: .default))
      #expect(log.count == 7)  // 4 schedules, perform, then a cancel per mode left
      #expect(
        Array(log.snapshot.prefix(4)) == [
          "schedule \(RunLoopMode.default)", "schedule Custom", "cancel Custom", "schedule Custom",
        ])
      #expect(log.snapshot[4] == "perform")
    }
  }

  @Test func aSignalGivenBeforeTheSourceIsAddedFiresInTheFirstRun() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Box(0)
      let source = RunLoopSource(perform: { fired.update { $0 += 1 } })
      source.signal()
      #expect(source.isSignalled)
      runLoop.add(source, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      #expect(fired.value == 1)
      #expect(!source.isSignalled)
    }
  }

  @Test func aRemovedSignalledSourceKeepsItsSignalUntilItIsAddedBack() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Box(0)
      let source = RunLoopSource(perform: { fired.update { $0 += 1 } })
      runLoop.add(source, forMode: .default)
      source.signal()
      runLoop.remove(source, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fired.value == 0)
      #expect(source.isSignalled)
      runLoop.add(source, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      #expect(fired.value == 1)
    }
  }

  @Test func aSourceInvalidatedByAnEarlierSourceInTheSamePassDoesNotFire() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let second = recordingSource("second", into: log, order: 2)
      let first = RunLoopSource(
        order: 1,
        perform: {
          log.append("first")
          second.invalidate()
        })
      runLoop.add(first, forMode: .default)
      runLoop.add(second, forMode: .default)
      first.signal()
      second.signal()
      _ = runLoop.run(mode: .default, timeout: .zero)
      #expect(log.snapshot == ["first"])
      #expect(!second.isSignalled)
    }
  }

  @Test func aSourceInTwoRunLoopsFiresOnceForOneSignal() {
    let firedOn = Recorder<String>()
    let counted = RunLoopSource(perform: { firedOn.append(Thread.current.name ?? "?") })
    let first = Latch(count: 1)
    let second = Latch(count: 1)
    let a = TestThread.spawn(name: "loop-a") {
      let runLoop = RunLoop.current
      runLoop.add(counted, forMode: .default)
      first.wait()
      _ = runLoop.run(mode: .default, timeout: .zero)
      second.countDown()
    }
    let b = TestThread.spawn(name: "loop-b") {
      let runLoop = RunLoop.current
      runLoop.add(counted, forMode: .default)
      second.wait()
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .timedOut)
    }
    counted.signal()
    first.countDown()
    a.join()
    b.join()
    #expect(firedOn.snapshot == ["loop-a"])
  }

  @Test func aSourceAddedToCommonModesIsScheduledInAModeMadeCommonLater() {
    TestThread.run {
      let runLoop = RunLoop.current
      let tracking: RunLoopMode = "tracking"
      let log = Recorder<String>()
      let source = RunLoopSource(
        schedule: { _, mode in log.append("schedule \(mode)") },
        perform: { log.append("perform in \(RunLoop.current.currentMode?.rawValue ?? "nil")") })
      runLoop.add(source, forMode: .common)
      #expect(log.snapshot == ["schedule \(RunLoopMode.default)"])
      runLoop.addCommonMode(tracking)
      runLoop.addCommonMode(tracking)  // already common: nothing more
      #expect(log.snapshot == ["schedule \(RunLoopMode.default)", "schedule tracking"])
      #expect(runLoop.contains(source, inMode: tracking))
      #expect(runLoop.contains(source, inMode: .common))
      source.signal()
      #expect(runLoop.run(mode: tracking, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      #expect(log.snapshot.last == "perform in tracking")
      runLoop.remove(source, forMode: .common)
      #expect(!runLoop.contains(source, inMode: tracking))
      #expect(!runLoop.contains(source, inMode: .default))
    }
  }
}

@Suite("CF scenarios: timers", .timeLimit(.minutes(3)))
struct PeerCFTimerTests {
  @Test func aNewTimerKeepsItsFireDateAndRepeatsOnlyWithAPositiveInterval() {
    let fireDate = MonotonicInstant.now
    let oneShot = RunLoopTimer(fireAt: fireDate) { _ in }
    #expect(oneShot.nextFireDate == fireDate)
    #expect(!oneShot.isRepeating)
    #expect(oneShot.isValid)
    let repeating = RunLoopTimer(fireAt: fireDate, interval: .milliseconds(300)) { _ in }
    #expect(repeating.nextFireDate == fireDate)
    #expect(repeating.interval == .milliseconds(300))
    #expect(repeating.isRepeating)
    let negative = RunLoopTimer(fireAt: fireDate, interval: .seconds(-1)) { _ in }
    #expect(!negative.isRepeating)
    #expect(RunLoopTimer(seconds: .nan, { _ in }) == nil)
  }

  @Test func aOneShotTimerTicksOnceInItsRunsModeAndLeavesTheModeEmpty() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let mode = Box<RunLoopMode?>(nil)
      let timer = RunLoopTimer.scheduled(after: .milliseconds(10)) { _ in
        ticks.update { $0 += 1 }
        mode.value = RunLoop.current.currentMode
      }
      #expect(runLoop.contains(timer, inMode: .default))
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 1)
      #expect(mode.value == .default)
      #expect(!timer.isValid)
    }
  }

  @Test func aRepeatingTimerInvalidatedInsideItsCalloutFiresOnce() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(1)) { timer in
        #expect(timer.isValid)
        ticks.update { $0 += 1 }
        timer.invalidate()
        #expect(!timer.isValid)
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 1)
      #expect(!runLoop.contains(timer, inMode: .default))
    }
  }

  @Test func aRepeatingTimerStaysOnItsGridWithoutDrift() {
    TestThread.run {
      let runLoop = RunLoop.current
      let interval = Duration.milliseconds(5)
      let scheduled = Recorder<MonotonicInstant>()
      let first = MonotonicInstant.after(.milliseconds(2))
      let timer = RunLoopTimer(fireAt: first, interval: interval) { timer in
        #expect(MonotonicInstant.now >= timer.scheduledFireDate!)
        scheduled.append(timer.scheduledFireDate!)
        // Busy for part of the period: the next firing is still due on the grid.
        Thread.sleep(for: .milliseconds(1))
        if scheduled.count == 4 { timer.invalidate() }
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      let dates = scheduled.snapshot
      #expect(dates.count == 4)
      #expect(dates.first == first)
      for (earlier, later) in zip(dates, dates.dropFirst()) {
        let gap = later - earlier
        // On the grid: whole periods (more than one only if the loop was late by a period).
        #expect(gap >= interval && (gap / interval).rounded() == gap / interval)
      }
    }
  }

  @Test func aLateRepeatingTimerFiresOnceForTheMissedPeriodsAndKeepsItsGrid() {
    TestThread.run {
      let runLoop = RunLoop.current
      let interval = Duration.milliseconds(10)
      let first = MonotonicInstant.after(.milliseconds(1))
      let scheduled = Recorder<MonotonicInstant>()
      let timer = RunLoopTimer(fireAt: first, interval: interval) { timer in
        scheduled.append(timer.scheduledFireDate!)
        // Miss three and a half periods on the first firing.
        if scheduled.count == 1 { Thread.sleep(for: .milliseconds(35)) }
        if scheduled.count == 2 { timer.invalidate() }
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      let dates = scheduled.snapshot
      #expect(dates.count == 2)
      let gap = dates[1] - dates[0]
      #expect(gap >= .milliseconds(40))
      #expect((gap / interval).rounded() == gap / interval)
    }
  }

  @Test func timersFireInFireDateOrderNotInTheOrderAdded() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let start = MonotonicInstant.after(.milliseconds(5))
      for (offset, name) in [(20, "third"), (0, "first"), (10, "second")] {
        let timer = RunLoopTimer(fireAt: start + .milliseconds(offset)) { _ in log.append(name) }
        runLoop.add(timer, forMode: .default)
      }
      #expect(runLoop.nextTimerFireDate(inMode: .default) == start)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["first", "second", "third"])
      #expect(runLoop.nextTimerFireDate(inMode: .default) == nil)
    }
  }

  @Test func aTimerWithToleranceNeverFiresBeforeItsFireDate() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fireDate = MonotonicInstant.after(.milliseconds(20))
      let firedAt = Box<MonotonicInstant?>(nil)
      let timer = RunLoopTimer(fireAt: fireDate, tolerance: .milliseconds(10)) { _ in firedAt.value = .now }
      #expect(timer.tolerance == .milliseconds(10))
      timer.tolerance = .seconds(-1)
      #expect(timer.tolerance == .zero)
      timer.tolerance = .milliseconds(10)
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(firedAt.value! >= fireDate)
    }
  }

  @Test func setNextFireDateFromAnotherThreadMovesASleepingLoopsTimer() {
    let loopBox = Box<RunLoop?>(nil)
    let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(timer, forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, timeout: .seconds(30))
    }
    waitUntil { loopBox.value?.isWaiting == true }
    let soon = MonotonicInstant.now
    timer.setNextFireDate(soon)
    loopThread.join()
    #expect(result.value == .finished)
    #expect(!timer.isValid)
    #expect(timer.scheduledFireDate == soon)
  }

  @Test func setNextFireDateInsideTheCalloutReplacesTheRepeatingGrid() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .seconds(3600)) { timer in
        if ticks.update({
          $0 += 1
          return $0
        }) == 1 {
          timer.setNextFireDate(.after(.milliseconds(2)))
        } else {
          timer.invalidate()
        }
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 2)
    }
  }

  @Test func aOneShotTimerIsInvalidatedAfterItsCalloutEvenIfTheCalloutMovedItsFireDate() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let timer = RunLoopTimer(after: .milliseconds(1)) { timer in
        ticks.update { $0 += 1 }
        timer.setNextFireDate(.after(.milliseconds(1)))
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 1)
      #expect(!timer.isValid)
    }
  }

  @Test func aTimerInCommonModesFiresInAModeMadeCommonLaterAndInANestedRun() {
    TestThread.run {
      let runLoop = RunLoop.current
      let tracking: RunLoopMode = "tracking"
      let modes = Recorder<String>()
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(1)) { timer in
        modes.append(RunLoop.current.currentMode?.rawValue ?? "nil")
        if modes.count == 2 { timer.invalidate() } else { RunLoop.current.stop() }
      }
      runLoop.add(timer, forMode: .common)
      runLoop.addCommonMode(tracking)
      #expect(runLoop.contains(timer, inMode: tracking))
      #expect(runLoop.run(mode: tracking, timeout: .seconds(30)) == .stopped)
      // Fires in a tracking run nested in a default one.
      let nestedResult = Box<RunLoopRunResult?>(nil)
      runLoop.perform(inModes: [.default]) {
        nestedResult.value = RunLoop.current.run(mode: tracking, timeout: .seconds(30))
      }
      _ = runLoop.run(mode: .default, timeout: .seconds(30))
      #expect(modes.snapshot == ["tracking", "tracking"])
      #expect(nestedResult.value == .finished)
    }
  }

  @Test func aTimerRemovedFromEveryModeMayJoinAnotherRunLoop() {
    let timer = RunLoopTimer(after: .milliseconds(1)) { _ in }
    TestThread.run {
      let runLoop = RunLoop.current
      runLoop.add(timer, forMode: .default)
      runLoop.add(timer, forMode: "other")
      runLoop.remove(timer, forMode: .default)
      runLoop.remove(timer, forMode: "other")
    }
    TestThread.run {
      let runLoop = RunLoop.current
      #expect(runLoop.add(timer, forMode: .default))
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(!timer.isValid)
    }
  }

  @Test(.runsExitTests) func aTimerAddedToASecondRunLoopStopsTheProcess() async {
    await #expect(processExitsWith: .failure) {
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
      RunLoop.current.add(timer, forMode: .default)
      TestThread.run { RunLoop.current.add(timer, forMode: .default) }
    }
  }

  @Test func runningBeforeNowPollsAndReturnsPromptly() {
    TestThread.run {
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
      runLoop.add(timer, forMode: .default)
      let start = MonotonicInstant.now
      #expect(runLoop.run(before: .now) == .timedOut)
      #expect(MonotonicInstant.now - start < .seconds(3000))
      #expect(timer.isValid)
      timer.invalidate()
    }
  }

  @Test func aDueTimerFiresInAZeroTimeoutRun() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let first = MonotonicInstant.now - .seconds(1)
      let timer = RunLoopTimer(fireAt: first, interval: .seconds(3600)) { _ in ticks.update { $0 += 1 } }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(ticks.value == 1)
      // Added late, it fired once and stays on the grid of its first date.
      #expect(timer.nextFireDate == first + .seconds(3600))
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(ticks.value == 1)
      timer.invalidate()
    }
  }
}

@Suite("CF scenarios: blocks and common modes", .timeLimit(.minutes(3)))
struct PeerCFBlockTests {
  @Test func aBlockForAnotherModeWaitsForARunInThatMode() {
    TestThread.run {
      let runLoop = RunLoop.current
      let other: RunLoopMode = "other"
      let ran = Box(false)
      runLoop.perform(inModes: [other]) { ran.value = true }
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      _ = runLoop.run(mode: .default, timeout: .zero)
      #expect(!ran.value)
      // The queued block keeps `other` from being empty; once it ran, the mode is.
      #expect(runLoop.run(mode: other, timeout: .seconds(30)) == .finished)
      #expect(ran.value)
    }
  }

  @Test func aCommonModesBlockRunsInAModeMadeCommonAfterItWasQueued() {
    TestThread.run {
      let runLoop = RunLoop.current
      let tracking: RunLoopMode = "tracking"
      let ranIn = Box<RunLoopMode?>(nil)
      runLoop.perform(inModes: [.common]) { ranIn.value = RunLoop.current.currentMode }
      runLoop.add(RunLoopSource(perform: {}), forMode: tracking)
      _ = runLoop.run(mode: tracking, timeout: .zero)
      #expect(ranIn.value == nil)
      runLoop.addCommonMode(tracking)
      _ = runLoop.run(mode: tracking, timeout: .zero)
      #expect(ranIn.value == tracking)
    }
  }

  @Test func blocksRunInTheOrderQueued() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<Int>()
      for index in 0..<10 {
        runLoop.perform(inModes: index.isMultiple(of: 2) ? [.default] : [.common]) { log.append(index) }
      }
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == Array(0..<10))
    }
  }

  @Test func performDoesNotWakeASleepingLoopButPerformAndWakeUpDoes() {
    for wakes in [false, true] {
      let loopBox = Box<RunLoop?>(nil)
      let log = Recorder<String>()
      let timer = RunLoopTimer(after: .milliseconds(300)) { _ in log.append("timer") }
      let fireDate = timer.nextFireDate
      let loopThread = TestThread.spawn {
        let runLoop = RunLoop.current
        runLoop.add(timer, forMode: .default)
        loopBox.value = runLoop
        _ = runLoop.run(mode: .default, timeout: .seconds(30))
      }
      waitUntil { loopBox.value?.isWaiting == true }
      if wakes {
        loopBox.value!.performAndWakeUp { log.append("block") }
      } else {
        loopBox.value!.perform { log.append("block") }
      }
      // A machine so loaded that the block came after the timer's date says nothing.
      let queuedInTime = MonotonicInstant.now < fireDate
      loopThread.join()
      if !queuedInTime { continue }
      #expect(log.snapshot == (wakes ? ["block", "timer"] : ["timer", "block"]))
    }
  }
}

@Suite("CF scenarios: getting run loops and ports", .timeLimit(.minutes(3)))
struct PeerCFRunLoopIdentityTests {
  @Test func modeNamesAreCoreFoundationsConstants() {
    #expect(RunLoopMode.common.rawValue == "kCFRunLoopCommonModes")
    #expect(RunLoopMode.default.rawValue == "kCFRunLoopDefaultMode")
    // CFRunLoopRunResult and CFRunLoopActivity values.
    #expect([RunLoopRunResult.finished, .stopped, .timedOut, .handledSource].map(\.rawValue) == [1, 2, 3, 4])
    let activities: [RunLoopActivity] = [.entry, .beforeTimers, .beforeSources, .beforeWaiting, .afterWaiting, .exit]
    #expect(activities.map(\.rawValue) == [1, 2, 4, 32, 64, 128])
    #expect(RunLoopActivity.allActivities.rawValue == 0x0FFF_FFFF)
  }

  @Test func mainAndCurrentAreTheSameObjectsEachTime() {
    let main = RunLoop.main
    #expect(main === RunLoop.main)
    TestThread.run {
      let current = RunLoop.current
      #expect(current === RunLoop.current)
      #expect(current !== RunLoop.main)
      #expect(RunLoop.runLoop(of: Thread.current) === current)
    }
    if Thread.isMainThread { #expect(RunLoop.current === main) }
  }

  /// TestRunLoop.test_addingRemovingPorts: the port is deallocated once invalidated, though
  /// it was scheduled in two modes.
  @Test func anInvalidatedPortIsReleasedByTheRunLoop() {
    TestThread.run {
      let runLoop = RunLoop.current
      weak var weakPort: Port?
      do {
        let port = Port()
        weakPort = port
        runLoop.add(port, forMode: .default)
        runLoop.add(port, forMode: "Custom")
        #expect(port.invalidate())
      }
      #expect(weakPort == nil)
      weak var weakSource: RunLoopSource?
      weak var weakTimer: RunLoopTimer?
      weak var weakObserver: RunLoopObserver?
      do {
        let source = RunLoopSource(perform: {})
        let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
        let observer = RunLoopObserver(activities: .entry) { _, _ in }
        (weakSource, weakTimer, weakObserver) = (source, timer, observer)
        for mode: RunLoopMode in [.default, "Custom", .common] {
          runLoop.add(source, forMode: mode)
          runLoop.add(timer, forMode: mode)
          runLoop.add(observer, forMode: mode)
        }
        source.invalidate()
        timer.invalidate()
        observer.invalidate()
      }
      #expect(weakSource == nil && weakTimer == nil && weakObserver == nil)
    }
  }

  @Test func aPortFollowsTheModesItIsAddedToAndInvalidationRemovesItEverywhere() {
    TestThread.run {
      let runLoop = RunLoop.current
      let custom: RunLoopMode = "Custom"
      let port = Port()
      #expect(!runLoop.contains(port, inMode: .default))
      #expect(runLoop.add(port, forMode: .default))
      #expect(runLoop.add(port, forMode: .default))
      #expect(runLoop.add(port, forMode: custom))
      #expect(runLoop.contains(port, inMode: .default) && runLoop.contains(port, inMode: custom))
      runLoop.remove(port, forMode: custom)
      #expect(!runLoop.contains(port, inMode: custom))
      #expect(runLoop.add(port, forMode: custom))
      #expect(port.invalidate())
      #expect(!runLoop.contains(port, inMode: .default))
      #expect(!runLoop.contains(port, inMode: custom))
      #expect(!runLoop.add(port, forMode: .default))
      #expect(runLoop.run(mode: custom, timeout: .seconds(30)) == .finished)
    }
  }
}

@Suite("CF scenarios: cross-thread changes and re-entrancy", .timeLimit(.minutes(3)))
struct PeerCFCrossThreadAndReentrancyTests {
  @Test func handledSourceWinsOverAStopAndATimeoutWinsOverAStop() {
    TestThread.run {
      let runLoop = RunLoop.current
      let source = RunLoopSource(perform: { RunLoop.current.stop() })
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      // The stops were per run: a later run is not stopped.
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(10)) == .timedOut)
    }
  }

  @Test func aStopFromAnEntryObserverEndsTheRunBeforeItsFirstPass() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let stopper = RunLoopObserver(activities: .entry, order: -1) { _, _ in RunLoop.current.stop() }
      runLoop.add(stopper, forMode: .default)
      recordActivities(of: runLoop, into: log)
      let source = recordingSource("source", into: log)
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(log.snapshot == ["entry", "exit"])
      #expect(source.isSignalled)
    }
  }

  @Test func aSourcesPerformMayRunTheLoopNestedInTheSameModeAndFireAgain() {
    TestThread.run {
      let runLoop = RunLoop.current
      let calls = Box(0)
      let nested = Box<RunLoopRunResult?>(nil)
      let holder = Box<RunLoopSource?>(nil)
      let source = RunLoopSource(perform: {
        guard
          calls.update({
            $0 += 1
            return $0
          }) == 1
        else { return }
        holder.value!.signal()
        nested.value = RunLoop.current.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true)
      })
      holder.value = source
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(calls.value == 2)
      #expect(nested.value == .handledSource)
      holder.value = nil
    }
  }

  @Test func aRepeatingTimerIsNotFiredByARunNestedInItsOwnCalloutButOtherTimersAre() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let other = RunLoopTimer(after: .seconds(3600)) { _ in log.append("other") }
      runLoop.add(other, forMode: .default)
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(1)) { timer in
        log.append("outer")
        if log.count > 1 {
          timer.invalidate()
          return
        }
        other.setNextFireDate(.after(.milliseconds(5)))
        // The repeating timer is due again many times meanwhile: it must not re-enter.
        let nested = RunLoop.current.run(mode: .default, timeout: .milliseconds(20))
        log.append("nested \(nested)")
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["outer", "other", "nested timedOut", "outer"])
    }
  }

  @Test func aTimerAddedByABeforeWaitingObserverIsNotSleptThrough() {
    TestThread.run {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      let fired = Box(false)
      let observer = RunLoopObserver(activities: .beforeWaiting, repeats: false) { _, _ in
        let timer = RunLoopTimer(after: .milliseconds(1)) { _ in
          fired.value = true
          RunLoop.current.stop()
        }
        RunLoop.current.add(timer, forMode: .default)
      }
      runLoop.add(observer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(20)) == .stopped)
      #expect(fired.value)
    }
  }

  @Test func aTimerAddedFromAnotherThreadWakesALoopSleepingWithoutATimer() {
    let loopBox = Box<RunLoop?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, before: .distantFuture)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    let timer = RunLoopTimer(after: .milliseconds(1)) { _ in RunLoop.current.stop() }
    loopBox.value!.add(timer, forMode: .default)
    loopThread.join()
    #expect(result.value == .stopped)
    #expect(!timer.isValid)
  }

  @Test func aModeMadeCommonFromAnotherThreadBringsACommonTimerIntoASleepingRun() {
    let tracking: RunLoopMode = "tracking"
    let loopBox = Box<RunLoop?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let firedIn = Box<RunLoopMode?>(nil)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in
        firedIn.value = RunLoop.current.currentMode
        RunLoop.current.stop()
      }
      runLoop.add(timer, forMode: .common)
      runLoop.add(RunLoopSource(perform: {}), forMode: tracking)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: tracking, before: .distantFuture)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    loopBox.value!.addCommonMode(tracking)
    loopThread.join()
    #expect(result.value == .stopped)
    #expect(firedIn.value == tracking)
  }

  @Test func aBlockForAnotherModeWakesTheLoopForOnePassOnly() {
    let loopBox = Box<RunLoop?>(nil)
    let log = Recorder<String>()
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      let observer = RunLoopObserver(activities: [.beforeWaiting, .afterWaiting]) { _, activity in
        log.append(activity.description)
      }
      runLoop.add(observer, forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, before: .distantFuture)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    let runLoop = loopBox.value!
    let ran = Box(false)
    runLoop.performAndWakeUp(inModes: ["other"]) { ran.value = true }
    waitUntil { log.count == 3 && runLoop.isWaiting }
    runLoop.stop()
    loopThread.join()
    #expect(result.value == .stopped)
    #expect(!ran.value)
    #expect(log.snapshot == ["beforeWaiting", "afterWaiting", "beforeWaiting", "afterWaiting"])
  }

  @Test func anOuterModesSourceSignalledDuringANestedRunFiresWhenTheNestedRunReturns() {
    let loopBox = Box<RunLoop?>(nil)
    let nestedAsleep = Box(false)
    let log = Recorder<String>()
    let outerSource = recordingSource("outer source", into: log)
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      let inner: RunLoopMode = "inner"
      runLoop.add(outerSource, forMode: .default)
      runLoop.add(RunLoopSource(perform: {}), forMode: inner)
      let asleep = RunLoopObserver(activities: .beforeWaiting) { _, _ in nestedAsleep.value = true }
      runLoop.add(asleep, forMode: inner)
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in
        let nested = RunLoop.current.run(mode: inner, timeout: .milliseconds(50))
        log.append("nested \(nested)")
      }
      runLoop.add(timer, forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true)
    }
    waitUntil { nestedAsleep.value && loopBox.value?.isWaiting == true }
    outerSource.signalAndWakeUp()
    loopThread.join()
    #expect(result.value == .handledSource)
    #expect(log.snapshot == ["nested timedOut", "outer source"])
  }

  @Test func aPortMessageCountsAsAHandledSource() throws {
    let port = Port()
    let received = Recorder<Int32>()
    port.setHandler { message in received.append(message.msgid) }
    try port.send(PortMessage(msgid: 100), timeout: .seconds(10))
    TestThread.run {
      let runLoop = RunLoop.current
      runLoop.add(port, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      #expect(received.snapshot == [100])
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .timedOut)
    }
    _ = port.invalidate()
  }

  @Test func aLoopsThreadEndingCancelsItsSourcesAndFreesItsTimers() {
    let cancelled = Recorder<String>()
    let source = RunLoopSource(cancel: { _, mode in cancelled.append(mode.rawValue) }, perform: {})
    let timer = RunLoopTimer(after: .milliseconds(1)) { _ in }
    TestThread.run {
      RunLoop.current.add(source, forMode: .default)
      RunLoop.current.add(source, forMode: "other")
      RunLoop.current.add(timer, forMode: .default)
    }
    #expect(cancelled.snapshot.sorted() == [RunLoopMode.default.rawValue, "other"].sorted())
    #expect(timer.isValid)
    TestThread.run {
      #expect(RunLoop.current.add(timer, forMode: .default))
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(30)) == .finished)
    }
    #expect(!timer.isValid)
  }
}

@Suite("CF scenarios: timer tolerance", .timeLimit(.minutes(3)))
struct PeerCFTimerToleranceTests {
  @Test func aRepeatingTimersToleranceIsCappedAtHalfItsInterval() {
    let repeating = RunLoopTimer(after: .seconds(3600), interval: .milliseconds(20), tolerance: .seconds(1)) { _ in }
    #expect(repeating.tolerance == .milliseconds(10))
    repeating.tolerance = .milliseconds(4)
    #expect(repeating.tolerance == .milliseconds(4))
    repeating.tolerance = .milliseconds(60)
    #expect(repeating.tolerance == .milliseconds(10))
    repeating.interval = .milliseconds(100)
    #expect(repeating.tolerance == .milliseconds(50))
    repeating.interval = .zero
    #expect(repeating.tolerance == .milliseconds(60))
    let oneShot = RunLoopTimer(after: .seconds(3600), tolerance: .seconds(1)) { _ in }
    #expect(oneShot.tolerance == .seconds(1))
  }

  @Test func aRepeatingTimerWithAToleranceAboveItsIntervalDoesNotSkipPeriods() {
    TestThread.run {
      let runLoop = RunLoop.current
      let interval = Duration.milliseconds(20)
      let scheduled = Recorder<MonotonicInstant>()
      let timer = RunLoopTimer(after: .milliseconds(1), interval: interval, tolerance: .seconds(1)) { timer in
        scheduled.append(timer.scheduledFireDate!)
        if scheduled.count == 5 { timer.invalidate() }
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      let dates = scheduled.snapshot
      let gaps = zip(dates, dates.dropFirst()).map { $1 - $0 }
      // An idle loop fires every period, or nearly: a tolerance may delay a firing, not
      // drop periods (a tolerance past the interval would wake after the next period).
      #expect(gaps.contains(interval))
    }
  }
}

@Suite("CF scenarios: moving a repeating timer from its callout", .timeLimit(.minutes(3)))
struct PeerCFTimerCalloutFireDateTests {
  /// `__CFRunLoopDoTimer`: a date set from the callout is honoured only when later than the
  /// date the firing was due at; otherwise the timer continues on its grid.
  @Test func aDateBeforeTheFiringsDueDateSetFromTheCalloutIsIgnored() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let first = MonotonicInstant.after(.milliseconds(1))
      let timer = RunLoopTimer(fireAt: first, interval: .seconds(3600)) { timer in
        if ticks.update({
          $0 += 1
          return $0
        }) == 1 {
          timer.setNextFireDate(timer.scheduledFireDate! - .seconds(1))
        }
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(50)) == .timedOut)
      #expect(ticks.value == 1)
      #expect(timer.nextFireDate == first + .seconds(3600))
      timer.invalidate()
    }
  }

  @Test func aDateAfterTheFiringsDueDateSetFromTheCalloutIsHonoured() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let moved = Box<MonotonicInstant?>(nil)
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .seconds(3600)) { timer in
        if ticks.update({
          $0 += 1
          return $0
        }) == 1 {
          let date = timer.scheduledFireDate! + .milliseconds(2)
          moved.value = date
          timer.setNextFireDate(date)
        } else {
          #expect(timer.scheduledFireDate == moved.value)
          timer.invalidate()
        }
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 2)
    }
  }
}

@Suite("CF scenarios: work handed over at before-waiting", .timeLimit(.minutes(3)))
struct PeerCFBeforeWaitingTests {
  @Test func aSignalAndWakeUpFromABeforeWaitingObserverKeepsTheLoopFromSleeping() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Box(0)
      let source = RunLoopSource(perform: { fired.update { $0 += 1 } })
      runLoop.add(source, forMode: .default)
      let observer = RunLoopObserver(activities: .beforeWaiting, repeats: false) { _, _ in
        source.signal()
        RunLoop.current.wakeUp()
      }
      runLoop.add(observer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(20), returnAfterSourceHandled: true) == .handledSource)
      #expect(fired.value == 1)
    }
  }

  @Test func commonObserversJoinAModeMadeCommonLaterInOrderAmongItsOwn() {
    TestThread.run {
      let runLoop = RunLoop.current
      let tracking: RunLoopMode = "tracking"
      let log = Recorder<String>()
      runLoop.add(RunLoopObserver(activities: .entry, order: 10) { _, _ in log.append("own 10") }, forMode: tracking)
      runLoop.add(RunLoopObserver(activities: .entry, order: -1) { _, _ in log.append("own -1") }, forMode: tracking)
      runLoop.add(RunLoopObserver(activities: .entry, order: 1) { _, _ in log.append("common 1") }, forMode: .common)
      runLoop.add(RunLoopObserver(activities: .entry, order: 20) { _, _ in log.append("common 20") }, forMode: .common)
      runLoop.addCommonMode(tracking)
      runLoop.add(RunLoopSource(perform: {}), forMode: tracking)
      _ = runLoop.run(mode: tracking, timeout: .zero)
      #expect(log.snapshot == ["own -1", "common 1", "own 10", "common 20"])
    }
  }
}

@Suite("CF scenarios: modes", .timeLimit(.minutes(3)))
struct PeerCFModeTests {
  /// CFRunLoopRunInMode looks the mode up without creating it; adding an item or queueing a
  /// block for a mode creates it (CFRunLoopPerformBlock "ensures the mode exists").
  @Test func runningAnUnknownModeDoesNotCreateItButAddingOrQueueingDoes() {
    TestThread.run {
      let runLoop = RunLoop.current
      #expect(runLoop.allModes == [.default])
      #expect(runLoop.run(mode: "ran", timeout: .zero) == .finished)
      #expect(!runLoop.allModes.contains("ran"))
      runLoop.add(RunLoopSource(perform: {}), forMode: "added")
      runLoop.perform(inModes: ["queued"]) {}
      #expect(runLoop.allModes == [.default, "added", "queued"])
      #expect(runLoop.commonModes == [.default])
    }
  }

  @Test func aSourceSignalledWhileTheLoopRunsAnotherModeWaitsForARunInItsMode() {
    let loopBox = Box<RunLoop?>(nil)
    let wakes = Box(0)
    let fired = Box(0)
    let source = RunLoopSource(perform: { fired.update { $0 += 1 } })
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(source, forMode: .default)
      runLoop.add(RunLoopSource(perform: {}), forMode: "other")
      runLoop.add(RunLoopObserver(activities: .afterWaiting) { _, _ in wakes.update { $0 += 1 } }, forMode: "other")
      loopBox.value = runLoop
      #expect(runLoop.run(mode: "other", before: .distantFuture) == .stopped)
      #expect(fired.value == 0)
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    let runLoop = loopBox.value!
    source.signalAndWakeUp()
    waitUntil { wakes.value == 1 && runLoop.isWaiting }
    #expect(source.isSignalled)
    runLoop.stop()
    loopThread.join()
    #expect(fired.value == 1)
  }

  @Test func currentModeIsSetDuringEntryAndExitNotifications() {
    TestThread.run {
      let runLoop = RunLoop.current
      let seen = Recorder<String>()
      let observer = RunLoopObserver(activities: [.entry, .exit]) { _, activity in
        seen.append("\(activity) \(RunLoop.current.currentMode?.rawValue ?? "nil")")
      }
      runLoop.add(observer, forMode: "custom")
      runLoop.add(RunLoopSource(perform: {}), forMode: "custom")
      _ = runLoop.run(mode: "custom", timeout: .zero)
      #expect(seen.snapshot == ["entry custom", "exit custom"])
      #expect(runLoop.currentMode == nil)
    }
  }
}

@Suite("CF scenarios: many timers", .timeLimit(.minutes(3)))
struct PeerCFManyTimersTests {
  @Test func aDueTimerMovedLaterByAnEarlierTimersCalloutDoesNotFireInThatPass() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let due = MonotonicInstant.after(.milliseconds(2))
      let later = RunLoopTimer(fireAt: due) { _ in log.append("later") }
      let moved = Box<MonotonicInstant?>(nil)
      let first = RunLoopTimer(fireAt: due) { _ in
        log.append("first")
        let date = MonotonicInstant.after(.milliseconds(20))
        moved.value = date
        later.setNextFireDate(date)
      }
      runLoop.add(first, forMode: .default)
      runLoop.add(later, forMode: .default)
      let firedAt = Box<MonotonicInstant?>(nil)
      runLoop.add(RunLoopObserver(activities: .exit) { _, _ in firedAt.value = .now }, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["first", "later"])
      #expect(later.scheduledFireDate == moved.value)
      #expect(firedAt.value! >= moved.value!)
    }
  }

  @Test func manyTimersEachFireOnceInFireDateOrderWithTiesInTheOrderAdded() {
    TestThread.run {
      let runLoop = RunLoop.current
      let count = 300
      let start = MonotonicInstant.after(.milliseconds(5))
      // Scrambled offsets with many ties: (index * 7) % 23 milliseconds.
      let fired = Recorder<(offset: Int, index: Int)>()
      for index in 0..<count {
        let offset = (index * 7) % 23
        let timer = RunLoopTimer(fireAt: start + .milliseconds(offset)) { _ in fired.append((offset, index)) }
        runLoop.add(timer, forMode: index.isMultiple(of: 3) ? .common : .default)
      }
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      let order = fired.snapshot
      #expect(order.count == count)
      #expect(Set(order.map(\.index)).count == count)
      for (earlier, later) in zip(order, order.dropFirst()) {
        #expect(earlier.offset < later.offset || (earlier.offset == later.offset && earlier.index < later.index))
      }
    }
  }
}
