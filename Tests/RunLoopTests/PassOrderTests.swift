import RunLoop
import Sync
import TestSupport
import Testing

/// The exact sequence of one run's observer notifications (GUIDE.md section 3, "The order of
/// one pass"), each on a fresh thread so its run loop starts empty.
@Suite(.timeLimit(.minutes(3))) struct PassOrderTests {
  @Test func emptyModeReturnsFinishedAtOnceWithoutEntryOrExit() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      recordActivities(of: runLoop, into: log)  // observers alone do not keep a mode alive
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(runLoop.run(mode: "never-mentioned", timeout: .seconds(30)) == .finished)
      #expect(log.snapshot.isEmpty)
    }
  }

  @Test func zeroTimeoutRunMakesOnePassWithoutWaitingNotifications() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      runLoop.add(recordingSource("source", into: log), forMode: .default)
      recordActivities(of: runLoop, into: log)
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(log.snapshot == ["entry", "beforeTimers", "beforeSources", "exit"])
    }
  }

  @Test func timerFiring() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .milliseconds(5)) { _ in log.append("timer") }
      runLoop.add(timer, forMode: .default)
      recordActivities(of: runLoop, into: log)
      // The one-shot timer leaves the mode empty once it fired: finished.
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(
        log.snapshot == ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "timer", "exit"])
      #expect(!timer.isValid)
    }
  }

  @Test func sourceSignalledFromAnotherThread() {
    let loopBox = Box<RunLoop?>(nil)
    let log = Recorder<String>()
    let source = recordingSource("source", into: log)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(source, forMode: .default)
      recordActivities(of: runLoop, into: log)
      loopBox.value = runLoop
      let result = runLoop.run(mode: .default, timeout: .seconds(60), returnAfterSourceHandled: true)
      log.append("result \(result)")
    }
    waitUntil { loopBox.value?.isWaiting == true }
    source.signal()
    loopBox.value!.wakeUp()
    loopThread.join()
    #expect(
      log.snapshot == [
        "entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting",
        "beforeTimers", "beforeSources", "source", "exit", "result handledSource",
      ])
  }

  @Test func sourceFiredInAPassSkipsWaiting() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      let source = recordingSource("source", into: log)
      runLoop.add(source, forMode: .default)
      recordActivities(of: runLoop, into: log)
      source.signal()
      // Without return-after-one-source the loop polls after the source fired, then sleeps.
      let result = runLoop.run(mode: .default, timeout: .milliseconds(20))
      #expect(result == .timedOut)
      #expect(
        log.snapshot == [
          "entry", "beforeTimers", "beforeSources", "source",
          "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "exit",
        ])
    }
  }

  @Test func timeout() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      runLoop.add(recordingSource("source", into: log), forMode: .default)
      recordActivities(of: runLoop, into: log)
      let start = MonotonicInstant.now
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(20)) == .timedOut)
      #expect(start.duration(to: .now) >= .milliseconds(20))  // never early
      #expect(log.snapshot == ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "exit"])
    }
  }

  @Test func stopFromAnotherThread() {
    let loopBox = Box<RunLoop?>(nil)
    let log = Recorder<String>()
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(recordingSource("source", into: log), forMode: .default)
      recordActivities(of: runLoop, into: log)
      loopBox.value = runLoop
      log.append("result \(runLoop.run(mode: .default, timeout: .seconds(60)))")
    }
    waitUntil { loopBox.value?.isWaiting == true }
    loopBox.value!.stop()
    loopThread.join()
    #expect(
      log.snapshot == [
        "entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "exit", "result stopped",
      ])
  }

  @Test func nestedRunInAnotherMode() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      let inner: RunLoopMode = "inner"
      runLoop.add(recordingSource("inner source", into: log), forMode: inner)
      recordActivities(of: runLoop, mode: inner, into: log, prefix: "inner ")
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in
        log.append("timer")
        #expect(RunLoop.current.currentMode == .default)
        let result = RunLoop.current.run(mode: inner, timeout: .zero)
        log.append("inner result \(result)")
        #expect(RunLoop.current.currentMode == .default)
      }
      runLoop.add(timer, forMode: .default)
      recordActivities(of: runLoop, into: log, prefix: "outer ")
      #expect(runLoop.currentMode == nil)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(
        log.snapshot == [
          "outer entry", "outer beforeTimers", "outer beforeSources", "outer beforeWaiting", "outer afterWaiting",
          "timer", "inner entry", "inner beforeTimers", "inner beforeSources", "inner exit",
          "inner result timedOut", "outer exit",
        ])
    }
  }

  @Test func stopEndsOnlyTheInnermostRun() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: .default)
      let outerTimer = RunLoopTimer(after: .milliseconds(1)) { _ in
        let loop = RunLoop.current
        loop.perform(inModes: [.default]) { loop.stop() }
        log.append("nested \(loop.run(mode: .default, timeout: .seconds(30)))")
        // Back in the outer run: end it with a later block.
        loop.perform(inModes: [.default]) { log.append("outer block") }
        keepAlive.invalidate()
      }
      runLoop.add(outerTimer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["nested stopped", "outer block"])
    }
  }

  @Test func aWakeUpSwallowedByANestedRunStillEndsTheOuterSleep() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let outerSource = recordingSource("outer source", into: log)
      runLoop.add(outerSource, forMode: .default)
      let inner: RunLoopMode = "inner"
      runLoop.add(RunLoopSource(perform: {}), forMode: inner)
      // The nested run's entry happens while it ignores wake-ups: this wake-up is swallowed.
      runLoop.add(
        RunLoopObserver(activities: .entry) { _, _ in
          outerSource.signal()
          RunLoop.current.wakeUp()
        }, forMode: inner)
      // The outer pass runs the nested run right before it sleeps.
      runLoop.add(
        RunLoopObserver(activities: .beforeWaiting, repeats: false) { _, _ in
          RunLoop.current.run(mode: inner, timeout: .zero)
        }, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(log.snapshot == ["outer source"])
    }
  }

  @Test func stopWhenNotRunningDoesNotAffectTheNextRun() {
    TestThread.run {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      runLoop.stop()
      runLoop.wakeUp()
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(5)) == .timedOut)
    }
  }

  @Test func stopFromAnEntryObserverStopsBeforeTheFirstPass() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      let stopper = RunLoopObserver(activities: .entry, order: -1) { _, _ in RunLoop.current.stop() }
      runLoop.add(stopper, forMode: .default)
      recordActivities(of: runLoop, into: log)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(log.snapshot == ["entry", "exit"])
    }
  }

  @Test func observersRunInOrderAndOneShotObserversFireOnce() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      runLoop.add(RunLoopObserver(activities: .beforeTimers, order: 5) { _, _ in log.append("5") }, forMode: .default)
      runLoop.add(RunLoopObserver(activities: .beforeTimers, order: -3) { _, _ in log.append("-3") }, forMode: .default)
      let once = RunLoopObserver(activities: .beforeTimers, repeats: false, order: 0) { _, _ in log.append("once") }
      runLoop.add(once, forMode: .default)
      runLoop.run(mode: .default, timeout: .zero)
      runLoop.run(mode: .default, timeout: .zero)
      #expect(log.snapshot == ["-3", "once", "5", "-3", "5"])
      #expect(!once.isValid)
      #expect(!runLoop.contains(once, inMode: .default))
    }
  }
}
