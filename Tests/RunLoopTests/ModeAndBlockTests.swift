import RunLoop
import Sync
import TestSupport
import Testing

@Suite(.timeLimit(.minutes(3))) struct ModeAndBlockTests {
  @Test func commonItemsArePresentInEveryCommonModeIncludingLaterOnes() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Recorder<String>()
      let tracking: RunLoopMode = "tracking"
      #expect(runLoop.commonModes == [.default])
      let source = recordingSource("source", into: fired)
      let timer = RunLoopTimer(after: .zero) { _ in fired.append("timer") }
      runLoop.add(source, forMode: .common)
      runLoop.add(timer, forMode: .common)
      #expect(runLoop.contains(source, inMode: .common))
      #expect(runLoop.contains(source, inMode: .default))
      #expect(!runLoop.contains(source, inMode: tracking))
      runLoop.addCommonMode(tracking)
      runLoop.addCommonMode(tracking)  // idempotent
      #expect(runLoop.commonModes == [.default, tracking])
      #expect(runLoop.contains(source, inMode: tracking))
      #expect(runLoop.contains(timer, inMode: tracking))
      #expect(runLoop.allModes.isSuperset(of: [.default, tracking]))
      source.signal()
      #expect(runLoop.run(mode: tracking, timeout: .zero) == .timedOut)
      #expect(fired.snapshot == ["source", "timer"])
      runLoop.remove(source, forMode: .common)
      #expect(!runLoop.contains(source, inMode: .default))
      #expect(!runLoop.contains(source, inMode: tracking))
    }
  }

  @Test func itemsOfOtherModesWaitForARunInTheirMode() {
    TestThread.run {
      let runLoop = RunLoop.current
      let fired = Recorder<String>()
      let other: RunLoopMode = "other"
      let source = recordingSource("other source", into: fired)
      runLoop.add(source, forMode: other)
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      source.signal()
      runLoop.run(mode: .default, timeout: .zero)
      #expect(fired.snapshot.isEmpty)
      runLoop.run(mode: other, timeout: .zero)
      #expect(fired.snapshot == ["other source"])
    }
  }

  @Test func blocksRunFifoInTheirModesAndKeepTheModeAlive() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let other: RunLoopMode = "other"
      runLoop.perform(inModes: [.default]) { log.append("1") }
      runLoop.perform(inModes: [other]) { log.append("other") }
      runLoop.perform { log.append("2 common") }
      runLoop.perform(inModes: [.default]) {
        log.append("3")
        // Queued during a pass: perform alone would not end the coming sleep (CF's rule).
        RunLoop.current.performAndWakeUp(inModes: [.default]) { log.append("queued during a pass") }
      }
      // Only blocks keep the default mode non-empty: the run makes passes until they ran.
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["1", "2 common", "3", "queued during a pass"])
      #expect(runLoop.run(mode: other, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot.last == "other")
    }
  }

  @Test func performDoesNotWakeButPerformAndWakeUpDoes() {
    let loopBox = Box<RunLoop?>(nil)
    let log = Recorder<String>()
    let thread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      recordActivities(of: runLoop, into: log)
      loopBox.value = runLoop
      log.append("\(runLoop.run(mode: .default, timeout: .milliseconds(50)))")
      log.append("\(runLoop.run(mode: .default, timeout: .seconds(60)))")
    }
    waitUntil { loopBox.value?.isWaiting == true }
    let runLoop = loopBox.value!
    // Not woken: the block runs after the sleep that ends with the 50 ms timeout.
    runLoop.perform(inModes: [.default]) { log.append("block") }
    waitUntil { log.snapshot.contains("timedOut") }
    waitUntil { runLoop.isWaiting }
    // Woken: the block runs at once and stops the second (60 s) run.
    runLoop.performAndWakeUp(inModes: [.default]) {
      log.append("woken block")
      RunLoop.current.stop()
    }
    thread.join()
    let waits = ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting"]
    #expect(log.snapshot == waits + ["block", "exit", "timedOut"] + waits + ["woken block", "exit", "stopped"])
  }

  @Test func wakeUpWhenNotRunningAndIsWaitingOnOwnThread() {
    TestThread.run {
      let runLoop = RunLoop.current
      runLoop.wakeUp()
      #expect(!runLoop.isWaiting)
      #expect(runLoop.currentMode == nil)
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      runLoop.add(
        RunLoopObserver(activities: .beforeWaiting) { _, _ in #expect(!RunLoop.current.isWaiting) }, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(5)) == .timedOut)
    }
  }

  @Test func runBeforeDeadlineAndRunReturn() {
    TestThread.run {
      let runLoop = RunLoop.current
      #expect(runLoop.run(before: .after(.seconds(60))) == .finished)
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      let deadline = MonotonicInstant.after(.milliseconds(10))
      #expect(runLoop.run(before: deadline) == .timedOut)
      #expect(deadline.hasPassed)
      runLoop.perform(inModes: [.default]) { RunLoop.current.stop() }
      runLoop.run()  // ends with the stop
    }
  }

  @Test func mainRunLoopIsReachableFromAnyThread() {
    let fromThread = Box<RunLoop?>(nil)
    TestThread.run {
      fromThread.value = RunLoop.main
      #expect(RunLoop.current !== RunLoop.main)
    }
    #expect(fromThread.value === RunLoop.main)
  }

  @Test func eachThreadHasItsOwnRunLoop() {
    let loops = Recorder<RunLoop>()
    let threads = (0..<4).map { _ in
      TestThread.spawn {
        #expect(RunLoop.current === RunLoop.current)
        loops.append(RunLoop.current)
      }
    }
    for thread in threads { thread.join() }
    #expect(Set(loops.snapshot.map(ObjectIdentifier.init)).count == 4)
  }
}
