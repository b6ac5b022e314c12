import Glibc
import RunLoop
import Sync
import TestSupport
import Testing
import Threads

// More of swift-corelibs-foundation's TestRunLoop and TestTimer scenarios, and Core
// Foundation's CFRunLoop.c behaviour, written against this toolkit's API: `limitDate(forMode:)`
// becomes `nextTimerFireDate(inMode:)`, `Date` deadlines become `MonotonicInstant` ones, and
// `Timer` becomes `RunLoopTimer`. Each test runs on a fresh thread (its run loop starts empty)
// unless it needs two.

@Suite("Foundation scenarios, round 2: running and limit dates", .timeLimit(.minutes(3)))
struct PeerFoundationRunLoopRound2Tests {
  /// TestRunLoop.test_runLoopRunMode: a repeating timer counts to three while the caller runs
  /// the loop in its mode, one `run(mode:before:)` call at a time.
  @Test func aRepeatingTimerCountsToThreeAcrossRunCalls() {
    TestThread.run {
      let runLoop = RunLoop.current
      let count = Box(0)
      let timer = RunLoopTimer(after: .milliseconds(2), interval: .milliseconds(5)) { timer in
        if count.update({
          $0 += 1
          return $0
        }) == 3 {
          timer.invalidate()
        }
      }
      runLoop.add(timer, forMode: .default)
      let end = MonotonicInstant.after(.seconds(30))
      var calls = 0
      while count.value < 3, !end.hasPassed {
        calls += 1
        if runLoop.run(mode: .default, before: end, returnAfterSourceHandled: true) == .finished { break }
      }
      #expect(count.value == 3)
      #expect(!timer.isValid)
      #expect(calls >= 1)
      // Nothing left in the mode: the next run returns at once.
      #expect(runLoop.run(mode: .default, before: end) == .finished)
    }
  }

  /// TestRunLoop.test_runLoopLimitDate: the limit date of a mode is its earliest valid
  /// timer's fire date, per mode, and nil when the mode has no timer.
  @Test func theNextTimerFireDateIsTheEarliestValidTimerOfThatModeOnly() {
    TestThread.run {
      let runLoop = RunLoop.current
      let base = MonotonicInstant.after(.seconds(3600))
      let early = RunLoopTimer(fireAt: base) { _ in }
      let late = RunLoopTimer(fireAt: base + .seconds(60)) { _ in }
      let otherModes = RunLoopTimer(fireAt: base - .seconds(600)) { _ in }
      runLoop.add(late, forMode: .default)
      runLoop.add(early, forMode: .default)
      runLoop.add(otherModes, forMode: "other")
      #expect(runLoop.nextTimerFireDate(inMode: .default) == base)
      #expect(runLoop.nextTimerFireDate(inMode: "other") == base - .seconds(600))
      #expect(runLoop.nextTimerFireDate(inMode: "never-mentioned") == nil)
      early.invalidate()
      #expect(runLoop.nextTimerFireDate(inMode: .default) == base + .seconds(60))
      late.setNextFireDate(base + .seconds(5))
      #expect(runLoop.nextTimerFireDate(inMode: .default) == base + .seconds(5))
      runLoop.remove(late, forMode: .default)
      #expect(runLoop.nextTimerFireDate(inMode: .default) == nil)
      // A timer of the common modes counts in a mode made common later.
      let common = RunLoopTimer(fireAt: base + .seconds(1)) { _ in }
      runLoop.add(common, forMode: .common)
      runLoop.addCommonMode("tracking")
      #expect(runLoop.nextTimerFireDate(inMode: "tracking") == base + .seconds(1))
      #expect(runLoop.nextTimerFireDate(inMode: .default) == base + .seconds(1))
      for timer in [late, otherModes, common] { timer.invalidate() }
      #expect(runLoop.nextTimerFireDate(inMode: "other") == nil)
      #expect(runLoop.nextTimerFireDate(inMode: "tracking") == nil)
    }
  }

  /// TestRunLoop.test_runLoopPoll with a due timer: a run before a passed date makes one pass,
  /// fires the due timer and reports a timeout; the limit date then moves on.
  @Test func aPollFiresADueRepeatingTimerOnceAndMovesItsFireDateOn() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let first = MonotonicInstant.now
      let timer = RunLoopTimer(fireAt: first, interval: .seconds(3600)) { _ in ticks.update { $0 += 1 } }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, before: .distantPast) == .timedOut)
      #expect(ticks.value == 1)
      #expect(runLoop.nextTimerFireDate(inMode: .default) == first + .seconds(3600))
      #expect(timer.scheduledFireDate == first)
      timer.invalidate()
    }
  }

  /// CFRunLoopAddCommonMode: the common set starts with the default mode, a mode added twice
  /// is there once, and every mode mentioned is among all modes.
  @Test func theCommonSetStartsWithTheDefaultModeAndKeepsEachModeOnce() {
    TestThread.run {
      let runLoop = RunLoop.current
      #expect(runLoop.commonModes == [.default])
      runLoop.addCommonMode("tracking")
      runLoop.addCommonMode("tracking")
      runLoop.addCommonMode(.default)
      #expect(runLoop.commonModes == [.default, "tracking"])
      #expect(runLoop.allModes.isSuperset(of: [.default, "tracking"]))
      #expect(!runLoop.allModes.contains(.common))
    }
  }

  /// CFRunLoopRemoveTimer(kCFRunLoopCommonModes): the timer leaves every common mode,
  /// including one made common after it was added.
  @Test func aTimerRemovedFromTheCommonModesLeavesEachOfThem() {
    TestThread.run {
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
      runLoop.add(timer, forMode: .common)
      runLoop.addCommonMode("tracking")
      #expect(runLoop.contains(timer, inMode: .common))
      #expect(runLoop.contains(timer, inMode: .default))
      #expect(runLoop.contains(timer, inMode: "tracking"))
      runLoop.remove(timer, forMode: .common)
      #expect(!runLoop.contains(timer, inMode: .common))
      #expect(!runLoop.contains(timer, inMode: .default))
      #expect(!runLoop.contains(timer, inMode: "tracking"))
      // In no mode, nothing keeps a run going.
      #expect(runLoop.run(mode: "tracking", timeout: .seconds(30)) == .finished)
      #expect(timer.isValid)
      timer.invalidate()
    }
  }

  /// Foundation's `run(until:)` keeps running across stops; the toolkit's `run(before:)` is
  /// ended by a stop, as `RunLoop/run(before:)` documents ("Unlike Foundation's
  /// `run(until:)`, a stop ends it").
  @Test func aStopEndsRunBefore() {
    TestThread.run {
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in RunLoop.current.stop() }
      let keepAlive = RunLoopTimer(after: .seconds(3600)) { _ in }
      runLoop.add(timer, forMode: .default)
      runLoop.add(keepAlive, forMode: .default)
      #expect(runLoop.run(before: .after(.seconds(30))) == .stopped)
      #expect(!timer.isValid)
      keepAlive.invalidate()
    }
  }
}

@Suite("Foundation scenarios, round 2: what keeps a run going", .timeLimit(.minutes(3)))
struct PeerFoundationRunLoopEmptyModeRound2Tests {
  /// CFRunLoopRunSpecific: observers alone do not keep a mode alive; the run returns
  /// finished at once, without entry or exit notifications.
  @Test func aModeWithOnlyAnObserverFinishesAtOnceWithoutNotifying() {
    TestThread.run {
      let runLoop = RunLoop.current
      let calls = Box(0)
      let observer = RunLoopObserver(activities: .allActivities) { _, _ in calls.update { $0 += 1 } }
      runLoop.add(observer, forMode: .default)
      let start = MonotonicInstant.now
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(MonotonicInstant.now - start < .seconds(20))
      #expect(calls.value == 0)
      observer.invalidate()
    }
  }

  /// A block queued for the mode is work (CF's `__CFRunLoopModeIsEmpty` looks at the block
  /// list): the run enters, runs it, and finishes once nothing is left, well before its
  /// deadline (the toolkit's documented difference for an emptied mode).
  @Test func aModeWithOnlyAQueuedBlockRunsItAndFinishes() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ran = Recorder<String>()
      runLoop.perform(inModes: [.default]) { ran.append("default") }
      runLoop.perform(inModes: [.common]) { ran.append("common") }
      let start = MonotonicInstant.now
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(MonotonicInstant.now - start < .seconds(20))
      #expect(ran.snapshot == ["default", "common"])
    }
  }

  /// A repeating timer whose callback removes it from the run's mode (without invalidating
  /// it) fires no more there and stays valid; the emptied mode finishes the run.
  @Test func aRepeatingTimerRemovedFromItsModeByItsCalloutStopsFiringButStaysValid() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(1)) { timer in
        ticks.update { $0 += 1 }
        RunLoop.current.remove(timer, forMode: RunLoop.current.currentMode!)
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 1)
      #expect(timer.isValid)
      #expect(!runLoop.contains(timer, inMode: .default))
      // Added back, it goes on from its grid.
      runLoop.add(timer, forMode: "other")
      #expect(runLoop.run(mode: "other", timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 2)
      timer.invalidate()
    }
  }

  /// CFRunLoopGetNextTimerFireDate from a timer's own callout: the firing timer does not
  /// count; after the callout its next period does.
  @Test func theFiringTimerDoesNotCountInTheNextFireDateDuringItsCallout() {
    TestThread.run {
      let runLoop = RunLoop.current
      let seen = Box<[MonotonicInstant?]>([])
      let first = MonotonicInstant.now
      let other = RunLoopTimer(fireAt: first + .seconds(7200)) { _ in }
      let timer = RunLoopTimer(fireAt: first, interval: .seconds(3600)) { _ in
        seen.update { $0.append(RunLoop.current.nextTimerFireDate(inMode: .default)) }
      }
      runLoop.add(timer, forMode: .default)
      runLoop.add(other, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(seen.value == [first + .seconds(7200)])
      #expect(runLoop.nextTimerFireDate(inMode: .default) == first + .seconds(3600))
      timer.invalidate()
      other.invalidate()
    }
  }
}

@Suite("Foundation scenarios, round 2: timers", .timeLimit(.minutes(3)))
struct PeerFoundationTimerRound2Tests {
  /// TestTimer.test_scheduledTimer: a scheduled timer is in the calling thread's default mode
  /// only, and fires when that loop runs.
  @Test func aScheduledTimerIsInTheDefaultModeOfTheCallingThreadsLoopOnly() {
    TestThread.run {
      let runLoop = RunLoop.current
      let firedOn = Box<RunLoopMode?>(nil)
      let timer = RunLoopTimer.scheduled(after: .milliseconds(1)) { _ in firedOn.value = RunLoop.current.currentMode }
      #expect(runLoop.contains(timer, inMode: .default))
      #expect(!runLoop.contains(timer, inMode: .common))
      #expect(!runLoop.contains(timer, inMode: "other"))
      #expect(timer.scheduledFireDate == nil)
      #expect(runLoop.run(mode: "other", timeout: .milliseconds(20)) == .finished)
      #expect(firedOn.value == nil)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(firedOn.value == .default)
    }
  }

  /// A one-shot timer in two modes fires once, whichever mode runs first, and its firing
  /// removes it from both (CFRunLoopTimerInvalidate after a non-repeating firing).
  @Test func aOneShotTimerInTwoModesFiresOnceAndLeavesBoth() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in ticks.update { $0 += 1 } }
      runLoop.add(timer, forMode: .default)
      runLoop.add(timer, forMode: "other")
      #expect(runLoop.run(mode: "other", timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 1)
      #expect(!timer.isValid)
      #expect(!runLoop.contains(timer, inMode: .default))
      #expect(!runLoop.contains(timer, inMode: "other"))
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 1)
    }
  }

  /// A repeating timer in two modes keeps one schedule: runs alternating between the modes
  /// fire it once per due date, never once per mode.
  @Test func aRepeatingTimerInTwoModesFiresOncePerDueDate() {
    TestThread.run {
      let runLoop = RunLoop.current
      let scheduled = Recorder<MonotonicInstant>()
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(4)) { timer in
        scheduled.append(timer.scheduledFireDate!)
        if scheduled.count == 6 { timer.invalidate() }
      }
      runLoop.add(timer, forMode: .default)
      runLoop.add(timer, forMode: "other")
      var runs = 0
      while timer.isValid, runs < 10_000 {
        runs += 1
        _ = runLoop.run(mode: runs % 2 == 0 ? .default : "other", timeout: .milliseconds(3))
      }
      let dates = scheduled.snapshot
      #expect(dates.count == 6)
      #expect(Set(dates).count == dates.count)
      #expect(dates == dates.sorted())
    }
  }

  /// Removing a timer from one of its modes keeps it in the other.
  @Test func aTimerRemovedFromOneModeStillFiresInTheOther() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in ticks.update { $0 += 1 } }
      runLoop.add(timer, forMode: .default)
      runLoop.add(timer, forMode: "other")
      runLoop.remove(timer, forMode: .default)
      #expect(!runLoop.contains(timer, inMode: .default))
      #expect(runLoop.contains(timer, inMode: "other"))
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 0)
      #expect(runLoop.run(mode: "other", timeout: .seconds(30)) == .finished)
      #expect(ticks.value == 1)
    }
  }

  /// TestTimer.test_timerInvalidation from another thread: a timer invalidated while its loop
  /// sleeps for it never fires, and the loop, left with nothing, finishes (the toolkit's
  /// documented difference: an emptied mode ends the run instead of sleeping to the deadline).
  @Test func aTimerInvalidatedFromAnotherThreadWhileTheLoopSleepsNeverFires() {
    let loopBox = Box<RunLoop?>(nil)
    let fired = Box(false)
    let timer = RunLoopTimer(after: .seconds(3600)) { _ in fired.value = true }
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(timer, forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, timeout: .seconds(30))
    }
    waitUntil { loopBox.value?.isWaiting == true }
    timer.invalidate()
    #expect(!timer.isValid)
    loopThread.join()
    #expect(result.value == .finished)
    #expect(!fired.value)
  }

  /// TestTimer: a fire date moved later from another thread while the loop sleeps for the old
  /// one is honoured: the timer does not fire at the old date. (When a loaded machine moves
  /// it only after the old date, the loop may rightly have fired it then: checks skipped.)
  @Test func aFireDateMovedLaterFromAnotherThreadIsNotFiredEarly() {
    let loopBox = Box<RunLoop?>(nil)
    let firedAt = Box<MonotonicInstant?>(nil)
    let timer = RunLoopTimer(after: .milliseconds(300)) { _ in firedAt.value = .now }
    let oldFireDate = timer.nextFireDate
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(timer, forMode: .default)
      loopBox.value = runLoop
      _ = runLoop.run(mode: .default, timeout: .seconds(30))
    }
    waitUntil { loopBox.value?.isWaiting == true }
    let later = MonotonicInstant.after(.milliseconds(400))
    timer.setNextFireDate(later)
    let readBack = timer.nextFireDate
    let movedInTime = MonotonicInstant.now < oldFireDate
    loopThread.join()
    guard movedInTime else { return }
    #expect(readBack == later)
    #expect(firedAt.value != nil)
    #expect(firedAt.value! >= later)
  }

  /// An interval changed from another thread while a repeating timer waits for its next
  /// period re-plans it at once from its last scheduled date, as `RunLoopTimer/interval`
  /// documents (Foundation's `timeInterval` is read-only: a documented difference).
  @Test func anIntervalShortenedFromAnotherThreadReplansASleepingTimer() {
    let loopBox = Box<RunLoop?>(nil)
    let scheduled = Recorder<MonotonicInstant>()
    let first = MonotonicInstant.now
    let timer = RunLoopTimer(fireAt: first, interval: .seconds(3600)) { timer in
      scheduled.append(timer.scheduledFireDate!)
      if scheduled.count == 2 { timer.invalidate() }
    }
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(timer, forMode: .default)
      loopBox.value = runLoop
      _ = runLoop.run(mode: .default, timeout: .seconds(30))
    }
    waitUntil { scheduled.count == 1 && loopBox.value?.isWaiting == true }
    timer.interval = .milliseconds(5)
    loopThread.join()
    #expect(scheduled.snapshot == [first, first + .milliseconds(5)])
  }

  /// CFRunLoopAddTimer of an invalidated timer does nothing: the add says so, and the mode
  /// stays empty.
  @Test func anInvalidatedTimerIsNotAdded() {
    TestThread.run {
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .zero) { _ in Issue.record("an invalidated timer fired") }
      timer.invalidate()
      #expect(!runLoop.add(timer, forMode: .default))
      #expect(!runLoop.add(timer, forMode: .common))
      #expect(!runLoop.contains(timer, inMode: .default))
      #expect(runLoop.nextTimerFireDate(inMode: .default) == nil)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
    }
  }

  /// Foundation's `Timer(timeInterval:...)` takes seconds as `Double`: the toolkit's
  /// seconds-based initializer clamps huge values and rejects NaN and infinities, as its
  /// doc says. A huge delay never fires in a poll; a huge negative one fires at once.
  @Test func secondsBasedTimersWithExtremeValuesBehave() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Recorder<String>()
      let far = RunLoopTimer(seconds: 1e300) { _ in ticks.append("far") }!
      let past = RunLoopTimer(seconds: -1e300) { _ in ticks.append("past") }!
      let tiny = RunLoopTimer(seconds: 3600, intervalSeconds: 1e-12) { _ in }!
      #expect(far.nextFireDate > .after(.seconds(100 * 365 * 86_400)))
      #expect(tiny.interval == .nanoseconds(1))
      #expect(tiny.isRepeating)
      #expect(RunLoopTimer(seconds: 1, intervalSeconds: .infinity) { _ in } == nil)
      #expect(RunLoopTimer(seconds: 1, toleranceSeconds: -.infinity) { _ in } == nil)
      runLoop.add(far, forMode: .default)
      runLoop.add(past, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(ticks.snapshot == ["past"])
      #expect(far.isValid)
      #expect(!past.isValid)
      far.invalidate()
    }
  }

  /// A late repeating timer with a one-nanosecond interval and a first date far in the past
  /// fires once and lands after now on its grid (no overflow, no burst of catch-up firings).
  @Test func aRepeatingTimerFromTheDistantPastFiresOnceAndMovesAfterNow() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let timer = RunLoopTimer(fireAt: .now - .seconds(86_400 * 365), interval: .nanoseconds(1)) { timer in
        ticks.update { $0 += 1 }
        timer.invalidate()
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(ticks.value == 1)
      #expect(!timer.isValid)
    }
  }
}

@Suite("Foundation scenarios, round 2: run loop lifetime", .timeLimit(.minutes(3)))
struct PeerFoundationRunLoopLifetimeRound2Tests {
  /// TestRunLoop's "main run loop and thread do not retain each other", for a spawned thread:
  /// a thread's run loop is released when the thread ends, even with a repeating timer whose
  /// block captures the loop itself (`RunLoop` doc: "released when the thread ends").
  @Test func aThreadsRunLoopIsReleasedWhenTheThreadEndsEvenIfItsTimerCapturesIt() {
    final class WeakLoop: @unchecked Sendable {
      weak var loop: RunLoop?
    }
    let weak = WeakLoop()
    let timer = Box<RunLoopTimer?>(nil)
    TestThread.run {
      let runLoop = RunLoop.current
      weak.loop = runLoop
      let repeating = RunLoopTimer(after: .seconds(3600), interval: .seconds(3600)) { _ in
        runLoop.wakeUp()
      }
      runLoop.add(repeating, forMode: .default)
      runLoop.add(repeating, forMode: "other")
      timer.value = repeating
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
    }
    // The ended thread's loop let its timer go (a user's timer stays valid and may join
    // another loop); the timer's block alone keeps the loop, until the timer is invalidated.
    #expect(timer.value!.isValid)
    #expect(weak.loop != nil)
    timer.value!.invalidate()
    timer.value = nil
    #expect(weak.loop == nil)
  }
}

@Suite("Foundation scenarios, round 2: ports and queued work", .timeLimit(.minutes(3)))
struct PeerFoundationPortsAndQueuedWorkRound2Tests {
  /// TestRunLoop.test_addingRemovingPorts, with a version-0 source standing for the custom
  /// `Port` (its `schedule`/`cancel` callbacks are the port's `schedule(in:forMode:)` and
  /// `remove(from:forMode:)`): a second add to a mode schedules nothing more, removal
  /// follows each mode, and invalidation releases what the source holds.
  @Test func aSourcesScheduledModesFollowAddsAndRemovesAndInvalidationReleasesIt() {
    final class Sentinel: @unchecked Sendable {
      let released: Box<Bool>
      init(_ released: Box<Bool>) { self.released = released }
      deinit { released.value = true }
    }
    TestThread.run {
      let runLoop = RunLoop.current
      let released = Box(false)
      let scheduledModes = Box<[RunLoopMode]>([])
      let custom: RunLoopMode = "Custom"
      do {
        let sentinel = Sentinel(released)
        let source = RunLoopSource(
          schedule: { _, mode in scheduledModes.update { $0.append(mode) } },
          cancel: { _, mode in scheduledModes.update { $0.removeAll { $0 == mode } } },
          perform: { _ = sentinel })
        #expect(scheduledModes.value == [])
        runLoop.add(source, forMode: .default)
        #expect(scheduledModes.value == [.default])
        runLoop.add(source, forMode: .default)
        #expect(scheduledModes.value == [.default])
        runLoop.add(source, forMode: custom)
        #expect(scheduledModes.value == [.default, custom])
        runLoop.remove(source, forMode: custom)
        #expect(scheduledModes.value == [.default])
        runLoop.add(source, forMode: custom)
        #expect(scheduledModes.value == [.default, custom])
        source.invalidate()
        #expect(scheduledModes.value == [])
        #expect(!runLoop.contains(source, inMode: .default))
      }
      #expect(released.value)
    }
  }

  /// TestRunLoop.test_mainDispatchQueueCallout, with blocks handed to the loop from another
  /// thread standing for the main queue: each run serves the block queued for it, and a
  /// later run with only a timer still waits for the timer instead of returning early on a
  /// wake-up left over from the earlier blocks.
  @Test func blocksFromAnotherThreadLeaveNoStaleWakeUpForALaterTimerRun() {
    let loopBox = Box<RunLoop?>(nil)
    let queued = Box(0)
    let served = Box(0)
    let runsEnded = Box(0)
    let timerFired = Box(false)
    let thread = TestThread.spawn {
      let runLoop = RunLoop.current
      loopBox.value = runLoop
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: .default)
      for round in 1...2 {
        waitUntil { queued.value == round }
        _ = runLoop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true)
        #expect(served.value == round)
        runsEnded.value = round
      }
      runLoop.remove(keepAlive, forMode: .default)
      let fireDate = MonotonicInstant.after(.milliseconds(50))
      let timer = RunLoopTimer(fireAt: fireDate) { _ in timerFired.value = true }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(timerFired.value)
      #expect(fireDate.hasPassed)
    }
    waitUntil { loopBox.value != nil }
    for round in 1...2 {
      loopBox.value!.performAndWakeUp(inModes: [.default]) {
        served.update { $0 += 1 }
        RunLoop.current.stop()
      }
      queued.value = round
      // The next block is queued once this round's run has returned: queued while the run
      // still ends its pass, it could run there, before the stop takes effect.
      waitUntil { runsEnded.value == round }
    }
    thread.join()
    #expect(timerFired.value)
  }
}

@Suite("Foundation scenarios, round 2: changing a timer", .timeLimit(.minutes(3)))
struct PeerFoundationTimerChangeRound2Tests {
  /// CFRunLoopTimerSetNextFireDate on a timer in no run loop yet: the date is kept, and the
  /// timer fires at it once added.
  @Test func aFireDateSetBeforeTheTimerIsAddedIsTheOneItFiresAt() {
    TestThread.run {
      let runLoop = RunLoop.current
      let firedAt = Box<MonotonicInstant?>(nil)
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in firedAt.value = .now }
      let date = MonotonicInstant.after(.milliseconds(5))
      timer.setNextFireDate(date)
      #expect(timer.nextFireDate == date)
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.nextTimerFireDate(inMode: .default) == date)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(firedAt.value! >= date)
    }
  }

  /// CFRunLoopTimerSetTolerance while the loop sleeps: lowering the tolerance re-plans the
  /// wake-up at once (`RunLoopTimer` doc: "the loop re-plans at once, also while it
  /// sleeps"), so the timer no longer waits for the end of its old window.
  @Test func aToleranceLoweredFromAnotherThreadWhileTheLoopSleepsIsHonoured() {
    let loopBox = Box<RunLoop?>(nil)
    let fireDate = MonotonicInstant.after(.milliseconds(20))
    let firedAt = Box<MonotonicInstant?>(nil)
    let timer = RunLoopTimer(fireAt: fireDate, tolerance: .seconds(3600)) { _ in firedAt.value = .now }
    let thread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(timer, forMode: .default)
      loopBox.value = runLoop
      _ = runLoop.run(mode: .default, timeout: .seconds(40))
    }
    waitUntil { loopBox.value?.isWaiting == true }
    timer.tolerance = .zero
    #expect(timer.tolerance == .zero)
    thread.join()
    #expect(firedAt.value != nil)
    #expect(firedAt.value! >= fireDate)
    #expect(firedAt.value! - fireDate < .seconds(20))
  }

  /// A fire date moved to the distant future leaves a sleeping loop asleep (no overflow in
  /// the wake-up), and moving it back to now from another thread fires it.
  @Test func aFireDateMovedToTheDistantFutureAndBackFromAnotherThread() {
    let loopBox = Box<RunLoop?>(nil)
    let fired = Box(0)
    let timer = RunLoopTimer(after: .seconds(3600), tolerance: .seconds(10)) { _ in fired.update { $0 += 1 } }
    let result = Box<RunLoopRunResult?>(nil)
    let thread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(timer, forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, timeout: .seconds(30))
    }
    waitUntil { loopBox.value?.isWaiting == true }
    timer.setNextFireDate(.distantFuture)
    #expect(loopBox.value!.nextTimerFireDate(inMode: .default) == .distantFuture)
    #expect(fired.value == 0)
    // Without a tolerance, so the idle loop fires it at once rather than at its window's end.
    timer.tolerance = .zero
    timer.setNextFireDate(.now)
    thread.join()
    #expect(fired.value == 1)
    #expect(result.value == .finished)
  }

  /// A timer removed from another thread while the loop sleeps for it, other work keeping
  /// the mode alive: the loop does not wake for the removed timer's date to fire it. (On a
  /// machine so loaded that the removal comes after the timer's date, the loop may rightly
  /// have fired it first: the run then says nothing about removal and its checks are skipped.)
  @Test func aTimerRemovedFromASleepingModeWithOtherWorkDoesNotFire() {
    let loopBox = Box<RunLoop?>(nil)
    let fired = Box(false)
    let timer = RunLoopTimer(after: .milliseconds(400)) { _ in fired.value = true }
    let fireDate = timer.nextFireDate
    let thread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(timer, forMode: .default)
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      loopBox.value = runLoop
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(700)) == .timedOut)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    loopBox.value!.remove(timer, forMode: .default)
    let removedInTime = MonotonicInstant.now < fireDate
    thread.join()
    guard removedInTime else { return }
    #expect(!fired.value)
    #expect(timer.isValid)
  }

  /// A repeating timer's tolerance reads as at most half its interval, and the value set is
  /// kept: it applies in full once the timer becomes one-shot (`RunLoopTimer/tolerance`).
  @Test func aCappedToleranceComesBackWhenTheIntervalChanges() {
    let timer = RunLoopTimer(after: .seconds(3600), interval: .seconds(10), tolerance: .seconds(8)) { _ in }
    #expect(timer.tolerance == .seconds(5))
    timer.interval = .seconds(20)
    #expect(timer.tolerance == .seconds(8))
    timer.interval = .zero
    #expect(timer.tolerance == .seconds(8))
    #expect(!timer.isRepeating)
    timer.invalidate()
  }
}

@Suite("Foundation scenarios, round 2: sources signalled during a pass", .timeLimit(.minutes(3)))
struct PeerFoundationSignalDuringPassRound2Tests {
  /// `__CFRunLoopDoSources0` collects the signalled sources before firing any: a source
  /// signalled by another source's perform fires in the next pass, so a zero-timeout run (one
  /// pass) leaves it signalled whatever the two sources' order.
  @Test(arguments: [(0, 1), (1, 0)])
  func aSourceSignalledByAnotherSourcesPerformFiresInTheNextPass(orders: (Int, Int)) {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let second = RunLoopSource(order: orders.1, perform: { log.append("second") })
      let first = RunLoopSource(
        order: orders.0,
        perform: {
          log.append("first")
          second.signal()
        })
      runLoop.add(first, forMode: .default)
      runLoop.add(second, forMode: .default)
      first.signal()
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(log.snapshot == ["first"])
      #expect(second.isSignalled)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(log.snapshot == ["first", "second"])
    }
  }

  /// A source that signals itself from its perform fires once per pass: once in a
  /// zero-timeout run, and again and again (without sleeping) in a run with a deadline,
  /// which then times out.
  @Test func aSourceSignallingItselfFiresOncePerPass() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Box(0)
      let holder = Box<RunLoopSource?>(nil)
      let source = RunLoopSource(perform: {
        fired.update { $0 += 1 }
        holder.value?.signal()
      })
      holder.value = source
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(fired.value == 1)
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(20)) == .timedOut)
      #expect(fired.value > 2)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      source.invalidate()
      holder.value = nil
    }
  }
}

@Suite("Foundation scenarios, round 2: extreme dates", .timeLimit(.minutes(3)))
struct PeerFoundationExtremeDatesRound2Tests {
  /// `Date.distantFuture`-like values everywhere: a run with a huge timeout still ends when
  /// its timer leaves the mode; a huge delay, interval or tolerance saturates instead of
  /// overflowing; and a run's own deadline ends it even when a timer's window reaches past it.
  @Test func hugeTimeoutsIntervalsAndTolerancesSaturate() {
    TestThread.run {
      let runLoop = RunLoop.current
      let ticks = Box(0)
      let soon = RunLoopTimer(after: .milliseconds(1)) { _ in ticks.update { $0 += 1 } }
      runLoop.add(soon, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(Int64.max)) == .finished)
      #expect(ticks.value == 1)

      let far = RunLoopTimer(after: .seconds(Int64.max)) { _ in ticks.update { $0 += 1 } }
      #expect(far.nextFireDate == .distantFuture)
      runLoop.add(far, forMode: .default)
      #expect(runLoop.nextTimerFireDate(inMode: .default) == .distantFuture)
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(5)) == .timedOut)
      far.invalidate()

      let first = MonotonicInstant.now
      let hugeInterval = RunLoopTimer(fireAt: first, interval: .seconds(Int64.max)) { _ in ticks.update { $0 += 1 } }
      runLoop.add(hugeInterval, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(ticks.value == 2)
      #expect(hugeInterval.nextFireDate == .distantFuture)
      hugeInterval.invalidate()

      let wide = RunLoopTimer(fireAt: .now, tolerance: .seconds(Int64.max)) { _ in ticks.update { $0 += 1 } }
      runLoop.add(wide, forMode: .default)
      let start = MonotonicInstant.now
      let result = runLoop.run(mode: .default, timeout: .milliseconds(20))
      #expect(MonotonicInstant.now - start < .seconds(20))
      #expect(result == .timedOut || result == .finished)
      wide.invalidate()

      let tiny = RunLoopTimer(fireAt: .now, interval: .nanoseconds(1), tolerance: .seconds(Int64.max)) { timer in
        ticks.update { $0 += 1 }
        if ticks.value >= 6 { timer.invalidate() }
      }
      #expect(tiny.tolerance <= .nanoseconds(1))
      runLoop.add(tiny, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
    }
  }
}

@Suite("Foundation scenarios, round 2: common-mode bookkeeping", .timeLimit(.minutes(3)))
struct PeerFoundationCommonModeBookkeepingRound2Tests {
  /// `CFRunLoopRemoveSource(rl, rls, kCFRunLoopCommonModes)` removes the source from each
  /// common mode, and a direct removal from one common mode leaves the common set's entry:
  /// a mode made common later still gets the source.
  @Test func commonAndDirectMembershipsOfASource() {
    TestThread.run {
      let runLoop = RunLoop.current
      let source = RunLoopSource(perform: {})
      runLoop.add(source, forMode: .common)
      runLoop.remove(source, forMode: .default)
      #expect(!runLoop.contains(source, inMode: .default))
      #expect(runLoop.contains(source, inMode: .common))
      runLoop.addCommonMode("tracking")
      #expect(runLoop.contains(source, inMode: "tracking"))
      runLoop.remove(source, forMode: .common)
      #expect(!runLoop.contains(source, inMode: .common))
      #expect(!runLoop.contains(source, inMode: "tracking"))
      #expect(!runLoop.contains(source, inMode: .default))
      source.invalidate()
    }
  }

  /// The same bookkeeping for observers and timers.
  @Test func commonAndDirectMembershipsOfAnObserverAndATimer() {
    TestThread.run {
      let runLoop = RunLoop.current
      let observer = RunLoopObserver(activities: .entry) { _, _ in }
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
      runLoop.add(observer, forMode: .common)
      runLoop.add(timer, forMode: .common)
      runLoop.remove(observer, forMode: .default)
      runLoop.remove(timer, forMode: .default)
      #expect(!runLoop.contains(observer, inMode: .default))
      #expect(!runLoop.contains(timer, inMode: .default))
      #expect(runLoop.contains(observer, inMode: .common))
      #expect(runLoop.contains(timer, inMode: .common))
      runLoop.addCommonMode("tracking")
      #expect(runLoop.contains(observer, inMode: "tracking"))
      #expect(runLoop.contains(timer, inMode: "tracking"))
      runLoop.remove(observer, forMode: .common)
      runLoop.remove(timer, forMode: .common)
      #expect(!runLoop.contains(observer, inMode: "tracking"))
      #expect(!runLoop.contains(timer, inMode: "tracking"))
      #expect(timer.isValid)
      timer.invalidate()
      observer.invalidate()
    }
  }
}

@Suite("Foundation scenarios, round 2: waiting perform on the calling thread", .timeLimit(.minutes(3)))
struct PeerFoundationPerformOnCallerRound2Tests {
  /// `performSelector:onThread:withObject:waitUntilDone:YES` naming the calling thread
  /// performs at once (the guide's rule, and `RunLoop.performAndWait(on:inModes:before:_:)`'s
  /// doc: "at once when `thread` is the caller"), also on a thread that never used its run
  /// loop: there is nothing to wait for, so there is no run loop to need.
  @Test func aWaitingPerformOnTheCallingThreadRunsAtOnceEvenBeforeItHasARunLoop() {
    TestThread.run {
      #expect(RunLoop.runLoop(of: Thread.current) == nil)
      let ran = Box(0)
      #expect(throws: Never.self) { try RunLoop.performAndWait(on: Thread.current) { ran.update { $0 += 1 } } }
      #expect(throws: Never.self) {
        try RunLoop.performAndWait(on: Thread.current, inModes: ["unused"], timeout: .zero) { ran.update { $0 += 1 } }
      }
      #expect(ran.value == 2)
      #expect(RunLoop.runLoop(of: Thread.current) == nil)
    }
  }

  /// With no mode, the request could never run: misuse stops the process on this path too.
  @Test(.runsExitTests) func aWaitingPerformOnTheCallingThreadWithNoModeStopsTheProcess() async {
    await #expect(processExitsWith: .failure) {
      TestThread.run { try? RunLoop.performAndWait(on: Thread.current, inModes: []) {} }
    }
  }
}

@Suite("Foundation scenarios, round 2: work handed to a loop asleep without a deadline", .timeLimit(.minutes(3)))
struct PeerFoundationFutexSleepRound2Tests {
  /// Runs `body` once `runLoop` sleeps in a run with no deadline (nothing but a source), then
  /// returns what the run returned; the run is expected to end by a stop from the work.
  private func whileAsleepWithoutADeadline(_ body: @escaping @Sendable (RunLoop) -> Void) -> RunLoopRunResult? {
    let loopBox = Box<RunLoop?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let thread = TestThread.spawn {
      let runLoop = RunLoop.current
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, before: .distantFuture)
      keepAlive.invalidate()
    }
    waitUntil { loopBox.value?.isWaiting == true }
    body(loopBox.value!)
    thread.join()
    return result.value
  }

  /// `performSelector:withObject:afterDelay:` made from another thread on a loop asleep with
  /// no timer and no deadline: its timer wakes the loop, which runs it after the delay.
  @Test func aDelayedPerformFromAnotherThreadReachesALoopAsleepWithoutADeadline() {
    let ranAt = Box<MonotonicInstant?>(nil)
    let madeAt = Box<MonotonicInstant?>(nil)
    let result = whileAsleepWithoutADeadline { runLoop in
      madeAt.value = .now
      _ = runLoop.perform(afterDelay: .milliseconds(10), inModes: [.default]) {
        ranAt.value = .now
        RunLoop.current.stop()
      }
    }
    #expect(result == .stopped)
    #expect(ranAt.value! - madeAt.value! >= .milliseconds(10))
  }

  /// A descriptor source added from another thread to a loop asleep with no deadline: the
  /// loop starts watching the descriptor at once.
  @Test func aDescriptorSourceAddedFromAnotherThreadReachesALoopAsleepWithoutADeadline() throws {
    var fds: [Int32] = [0, 0]
    #expect(pipe(&fds) == 0)
    defer {
      close(fds[0])
      close(fds[1])
    }
    let readEnd = fds[0]
    let writeEnd = fds[1]
    let handled = Box(0)
    let source = FileDescriptorSource(descriptor: readEnd) { source, _ in
      var byte: UInt8 = 0
      _ = read(source.descriptor, &byte, 1)
      handled.update { $0 += 1 }
      RunLoop.current.stop()
    }
    let result = whileAsleepWithoutADeadline { runLoop in
      #expect(runLoop.add(source, forMode: .default))
      var byte: UInt8 = 1
      #expect(write(writeEnd, &byte, 1) == 1)
    }
    source.invalidate()
    #expect(result == .stopped)
    #expect(handled.value == 1)
  }

  /// A timer added from another thread to a loop asleep with no deadline, in a mode made
  /// common from that thread too, before the timer.
  @Test func aCommonTimerReachesALoopAsleepWithoutADeadlineInAModeMadeCommon() {
    let loopBox = Box<RunLoop?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let thread = TestThread.spawn {
      let runLoop = RunLoop.current
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: "tracking")
      loopBox.value = runLoop
      result.value = runLoop.run(mode: "tracking", before: .distantFuture)
      keepAlive.invalidate()
    }
    waitUntil { loopBox.value?.isWaiting == true }
    let runLoop = loopBox.value!
    runLoop.addCommonMode("tracking")
    let timer = RunLoopTimer(after: .milliseconds(5)) { _ in RunLoop.current.stop() }
    runLoop.add(timer, forMode: .common)
    thread.join()
    #expect(result.value == .stopped)
    #expect(!timer.isValid)
  }
}

@Suite("Foundation scenarios, round 2: observers and nested runs", .timeLimit(.minutes(3)))
struct PeerFoundationObserverNestingRound2Tests {
  /// `__CFRunLoopDoObservers` skips an observer that is firing: a run nested in an
  /// observer's callout does not call that observer again, but calls the mode's others, and
  /// the outer pass goes on with the observers after it.
  @Test func aRunNestedInAnObserversCalloutSkipsThatObserverOnly() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let nestedDone = Box(false)
      let nesting = RunLoopObserver(activities: .beforeSources, order: 0) { _, _ in
        log.append("nesting")
        if !nestedDone.value {
          nestedDone.value = true
          log.append("nested-start")
          _ = RunLoop.current.run(mode: .default, timeout: .zero)
          log.append("nested-end")
        }
      }
      let other = RunLoopObserver(activities: .beforeSources, order: 1) { _, _ in log.append("other") }
      runLoop.add(nesting, forMode: .default)
      runLoop.add(other, forMode: .default)
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(log.snapshot == ["nesting", "nested-start", "other", "nested-end", "other"])
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(log.snapshot.suffix(2) == ["nesting", "other"])
      nesting.invalidate()
      other.invalidate()
    }
  }

  /// A one-shot observer that runs the loop nested from its callout is not called by the
  /// nested run and is invalidated once its callout returns.
  @Test func aOneShotObserverRunningANestedRunFiresOnce() {
    TestThread.run {
      let runLoop = RunLoop.current
      let calls = Box(0)
      let observer = RunLoopObserver(activities: .beforeSources, repeats: false) { _, _ in
        calls.update { $0 += 1 }
        _ = RunLoop.current.run(mode: .default, timeout: .zero)
      }
      runLoop.add(observer, forMode: .default)
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(calls.value == 1)
      #expect(!observer.isValid)
      #expect(!runLoop.contains(observer, inMode: .default))
    }
  }
}

@Suite("Foundation scenarios, round 2: a run loop made as its thread ends", .timeLimit(.minutes(3)))
struct PeerFoundationLateRunLoopRound2Tests {
  /// A run loop first asked for by an exit handler (NSThreadWillExitNotification's observer
  /// using `RunLoop.current`) is still released with its thread: its sources are cancelled
  /// and its timers let go before `join` returns.
  @Test func aRunLoopFirstUsedInAnExitHandlerIsReleasedWithItsThread() throws {
    final class WeakLoop: @unchecked Sendable {
      weak var loop: RunLoop?
    }
    let weak = WeakLoop()
    let cancelled = Recorder<String>()
    let source = RunLoopSource(cancel: { _, mode in cancelled.append(mode.rawValue) }, perform: {})
    let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
    let worker = try Thread.spawn { () -> Void in
      Thread.current.onExit {
        let runLoop = RunLoop.current
        weak.loop = runLoop
        runLoop.add(source, forMode: .default)
        runLoop.add(timer, forMode: .default)
      }
    }
    worker.join()
    #expect(cancelled.snapshot == [RunLoopMode.default.rawValue])
    #expect(weak.loop == nil)
    // The timer left the ended thread's loop and may join another.
    TestThread.run {
      #expect(RunLoop.current.add(timer, forMode: .default))
      timer.invalidate()
    }
    source.invalidate()
  }
}
