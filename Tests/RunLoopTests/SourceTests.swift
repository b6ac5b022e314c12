import RunLoop
import Sync
import TestSupport
import Testing

@Suite(.timeLimit(.minutes(3))) struct SourceTests {
  @Test func scheduleAndCancelReceiveTheRunLoopAndMode() {
    let log = Recorder<String>()
    let source = RunLoopSource(
      schedule: { runLoop, mode in log.append("schedule \(mode) \(runLoop === RunLoop.current)") },
      cancel: { _, mode in log.append("cancel \(mode)") },
      perform: { log.append("perform") })
    TestThread.run {
      let runLoop = RunLoop.current
      #expect(runLoop.add(source, forMode: .default))
      runLoop.add(source, forMode: .default)  // twice: harmless, no second schedule
      runLoop.add(source, forMode: "other")
      #expect(runLoop.contains(source, inMode: .default))
      runLoop.remove(source, forMode: "other")
      runLoop.remove(source, forMode: "never")  // harmless
      source.signal()
      #expect(source.isSignalled)
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      #expect(!source.isSignalled)
      source.invalidate()
      #expect(!source.isValid)
      #expect(!runLoop.contains(source, inMode: .default))
      source.signal()  // harmless once invalid
      #expect(!source.isSignalled)
      #expect(runLoop.add(source, forMode: .default) == false)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
    }
    #expect(
      log.snapshot == [
        "schedule kCFRunLoopDefaultMode true", "schedule other true", "cancel other", "perform",
        "cancel kCFRunLoopDefaultMode",
      ])
  }

  @Test func lowerOrderFiresFirstAndReturnAfterOneFiresOnlyTheLowest() {
    TestThread.run {
      let log = Recorder<String>()
      let runLoop = RunLoop.current
      let sources = [5, -1, 3].map { order in recordingSource("\(order)", into: log, order: order) }
      for source in sources {
        runLoop.add(source, forMode: .default)
        source.signal()
      }
      #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      #expect(log.snapshot == ["-1"])
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(log.snapshot == ["-1", "3", "5"])
    }
  }

  @Test func signalWithoutWakeUpDoesNotWakeASleepingLoop() {
    let loopBox = Box<RunLoop?>(nil)
    let log = Recorder<String>()
    let source = recordingSource("source", into: log)
    let thread = TestThread.spawn {
      RunLoop.current.add(source, forMode: .default)
      recordActivities(of: RunLoop.current, into: log)
      loopBox.value = RunLoop.current
      log.append("\(RunLoop.current.run(mode: .default, timeout: .milliseconds(50), returnAfterSourceHandled: true))")
    }
    waitUntil { loopBox.value?.isWaiting == true }
    source.signal()
    thread.join()
    // Slept until the timeout; the signal was only noticed by a later pass (here: none).
    #expect(
      log.snapshot == ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "exit", "timedOut"])
    #expect(source.isSignalled)
  }

  @Test func signalAndWakeUpWakesASleepingLoopThatFiresTheSource() {
    let loopBox = Box<RunLoop?>(nil)
    let log = Recorder<String>()
    let source = recordingSource("source", into: log)
    let thread = TestThread.spawn {
      RunLoop.current.add(source, forMode: .default)
      loopBox.value = RunLoop.current
      // Long enough that only the wake-up can end the run with a handled source in time.
      log.append("\(RunLoop.current.run(mode: .default, timeout: .seconds(50), returnAfterSourceHandled: true))")
    }
    waitUntil { loopBox.value?.isWaiting == true }
    source.signalAndWakeUp()
    thread.join()
    #expect(log.snapshot == ["source", "handledSource"])
  }

  @Test func signalAndWakeUpWakesEveryRunLoopTheSourceIsIn() {
    let source = RunLoopSource(perform: {})
    let loops = Recorder<RunLoop>()
    let wokenLoops = Recorder<Int>()
    let threads = (0..<2).map { index in
      TestThread.spawn {
        let runLoop = RunLoop.current
        runLoop.add(source, forMode: .default)
        runLoop.add(RunLoopObserver(activities: .afterWaiting) { _, _ in wokenLoops.append(index) }, forMode: .default)
        loops.append(runLoop)
        while runLoop.run(mode: .default, timeout: .seconds(50)) != .stopped {}
      }
    }
    waitUntil { loops.snapshot.count == 2 && loops.snapshot.allSatisfy(\.isWaiting) }
    source.signalAndWakeUp()
    // Both sleeping loops wake, though only one of them can fire the source.
    waitUntil { Set(wokenLoops.snapshot) == [0, 1] }
    for loop in loops.snapshot {
      waitUntil { loop.isWaiting }
      loop.stop()
    }
    for thread in threads { thread.join() }
    #expect(Set(wokenLoops.snapshot) == [0, 1])
  }

  @Test func aSourceInTwoRunLoopsFiresOncePerSignal() {
    let fired = Box(0)
    let source = RunLoopSource(perform: { fired.update { $0 += 1 } })
    let loops = Recorder<RunLoop>()
    let done = Box(false)
    let threads = (0..<2).map { _ in
      TestThread.spawn {
        RunLoop.current.add(source, forMode: .default)
        loops.append(RunLoop.current)
        while !done.value { RunLoop.current.run(mode: .default, timeout: .milliseconds(2)) }
      }
    }
    waitUntil { loops.count == 2 }
    for expected in 1...20 {
      source.signal()
      for loop in loops.snapshot { loop.wakeUp() }
      waitUntil { fired.value >= expected }
    }
    done.value = true
    for thread in threads { thread.join() }
    #expect(fired.value == 20)
  }

  @Test func invalidateCancelsInEveryModeOfEveryRunLoop() {
    let cancels = Recorder<String>()
    let source = RunLoopSource(cancel: { _, mode in cancels.append(mode.rawValue) }, perform: {})
    TestThread.run {
      RunLoop.current.add(source, forMode: .default)
      RunLoop.current.add(source, forMode: "a")
      TestThread.run {
        RunLoop.current.add(source, forMode: "b")
        source.invalidate()
      }
      source.invalidate()
    }
    #expect(cancels.snapshot.sorted() == ["a", "b", "kCFRunLoopDefaultMode"])
  }

  @Test func threadExitCancelsItsSourcesAndReleasesItsRunLoop() {
    let cancels = Recorder<String>()
    let source = RunLoopSource(cancel: { _, mode in cancels.append(mode.rawValue) }, perform: {})
    let weakLoop = WeakBox()
    TestThread.run {
      RunLoop.current.add(source, forMode: .default)
      RunLoop.current.add(RunLoopTimer(after: .seconds(60)) { _ in }, forMode: .default)
      weakLoop.set(RunLoop.current)
    }
    #expect(cancels.snapshot == ["kCFRunLoopDefaultMode"])
    #expect(weakLoop.get() == nil)
  }
}

final class WeakBox: @unchecked Sendable {
  private let lock = Lock()
  private weak var value: RunLoop?  // protected by lock
  func set(_ runLoop: RunLoop) { lock.withLock { value = runLoop } }
  func get() -> RunLoop? { lock.withLock { value } }
}
