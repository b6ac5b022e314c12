import RunLoop
import Sync
import TestSupport
import Testing
import Threads

/// Wake-ups that must reach the run they were meant for, exit requests that must end every
/// run of their thread, modes emptied from another thread, observers added mid-pass, and
/// what `returnAfterSourceHandled` counts as handled.
///
/// Each run here has a five-second deadline that only a regression reaches: the behaviour
/// under test ends it long before. Latches and observers say where the loop is; no test
/// waits for time to pass.
@Suite("RunLoop wake-ups and run results", .timeLimit(.minutes(3)))
struct WakeAndRunCorrectnessTests {
  /// The deadline no passing run reaches.
  static let bound: Duration = .seconds(5)
  static let nested = RunLoopMode("WakeAndRunCorrectnessTests.nested")

  // MARK: Exit requests

  @Test("an exit request between the thread's check and run() ends that run")
  func exitRequestBeforeRunStartsEndsTheRun() {
    let checked = Latch(count: 1)
    let requested = Latch(count: 1)
    let results = Recorder<RunLoopRunResult>()
    let worker = TestThread.spawn {
      let runLoop = RunLoop.current
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: .default)
      if !Thread.current.isExitRequested {
        checked.countDown()
        requested.wait()
        results.append(runLoop.run(mode: .default, timeout: Self.bound))
        // Every later run of the thread ends at once too.
        results.append(runLoop.run(before: .after(Self.bound)))
      }
      keepAlive.invalidate()
    }
    checked.wait()
    worker.thread.requestExit()
    requested.countDown()
    worker.join()
    #expect(results.snapshot == [.stopped, .stopped])
  }

  @Test("an exit request made before the thread's run loop exists ends its first run")
  func exitRequestBeforeTheRunLoopExistsEndsTheRun() {
    let checked = Latch(count: 1)
    let requested = Latch(count: 1)
    let results = Recorder<RunLoopRunResult>()
    let worker = TestThread.spawn {
      if !Thread.current.isExitRequested {
        checked.countDown()
        requested.wait()
        let runLoop = RunLoop.current
        let keepAlive = RunLoopSource(perform: {})
        runLoop.add(keepAlive, forMode: .default)
        results.append(runLoop.run(mode: .default, timeout: Self.bound))
        keepAlive.invalidate()
      }
    }
    checked.wait()
    worker.thread.requestExit()
    requested.countDown()
    worker.join()
    #expect(results.snapshot == [.stopped])
  }

  @Test("a thread that saw its exit request before the run loop's handler ran does not start a run")
  func runAfterTheThreadSawItsExitRequestEndsAtOnce() {
    let results = Recorder<RunLoopRunResult>()
    let ready = Latch(count: 1)
    let worker = TestThread.spawn {
      // Added before the run loop's own handler, so it runs first: it holds the requesting
      // thread until this thread's run has returned.
      let ranRun = Latch(count: 1)
      Thread.current.addExitRequestHandler { ranRun.wait() }
      let runLoop = RunLoop.current
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: .default)
      ready.countDown()
      waitUntil { Thread.current.isExitRequested }
      results.append(runLoop.run(mode: .default, timeout: Self.bound))
      ranRun.countDown()
      keepAlive.invalidate()
    }
    ready.wait()
    let requester = TestThread.spawn { worker.thread.requestExit() }
    worker.join()
    requester.join()
    #expect(results.snapshot == [.stopped])
  }

  @Test("an exit request during a nested run ends the nested run and every outer run")
  func exitRequestEndsEveryNestedRun() {
    let nestedWaiting = Latch(count: 1)
    let results = Recorder<String>()
    let worker = TestThread.spawn {
      let runLoop = RunLoop.current
      let nestedKeepAlive = RunLoopSource(perform: {})
      runLoop.add(nestedKeepAlive, forMode: Self.nested)
      runLoop.add(
        RunLoopObserver(activities: .beforeWaiting) { _, _ in nestedWaiting.countDown() }, forMode: Self.nested)
      let trigger = RunLoopSource(perform: {
        results.append("nested \(runLoop.run(mode: Self.nested, timeout: Self.bound))")
      })
      runLoop.add(trigger, forMode: .default)
      trigger.signal()
      results.append("outer \(runLoop.run(mode: .default, timeout: Self.bound))")
      trigger.invalidate()
      nestedKeepAlive.invalidate()
    }
    nestedWaiting.wait()
    worker.thread.requestExit()
    worker.join()
    #expect(results.snapshot == ["nested stopped", "outer stopped"])
  }

  // MARK: Wake-ups meant for an outer run

  /// Runs the worker's loop in the default mode (which holds `outerSource` and `outerItem`) with a
  /// before-waiting observer that runs the loop once, nested, in another mode until one
  /// source fires there. That nested source is signalled (without a wake-up) by the nested
  /// run's after-waiting observer, so the nested run ends after the first wake-up it sees and
  /// nothing on the loop's thread wakes the loop again. `wakeWhileNested` runs on the
  /// calling thread while the nested run waits. Returns the nested and outer results.
  private func runWithNestedWait(
    outerSource: RunLoopSource? = nil, outerItem: RunLoopTimer? = nil, returnAfterSourceHandled: Bool,
    wakeWhileNested: @Sendable (RunLoop) -> Void
  ) -> (nested: [RunLoopRunResult], outer: [RunLoopRunResult]) {
    let nestedWaiting = Latch(count: 1)
    let loopBox = Box<RunLoop?>(nil)
    let nestedResults = Recorder<RunLoopRunResult>()
    let outerResults = Recorder<RunLoopRunResult>()
    let worker = TestThread.spawn {
      let runLoop = RunLoop.current
      loopBox.value = runLoop
      let nestedSource = RunLoopSource(perform: {})
      runLoop.add(nestedSource, forMode: Self.nested)
      runLoop.add(
        RunLoopObserver(activities: .beforeWaiting) { _, _ in nestedWaiting.countDown() }, forMode: Self.nested)
      runLoop.add(
        RunLoopObserver(activities: .afterWaiting) { _, _ in nestedSource.signal() }, forMode: Self.nested)
      let nester = RunLoopObserver(activities: .beforeWaiting, repeats: false) { _, _ in
        nestedResults.append(runLoop.run(mode: Self.nested, timeout: Self.bound, returnAfterSourceHandled: true))
      }
      runLoop.add(nester, forMode: .default)
      if let outerSource { runLoop.add(outerSource, forMode: .default) }
      if let outerItem { runLoop.add(outerItem, forMode: .default) }
      outerResults.append(
        runLoop.run(mode: .default, timeout: Self.bound, returnAfterSourceHandled: returnAfterSourceHandled))
      nestedSource.invalidate()
      outerSource?.invalidate()
      outerItem?.invalidate()
    }
    nestedWaiting.wait()
    wakeWhileNested(loopBox.value!)
    worker.join()
    return (nestedResults.snapshot, outerResults.snapshot)
  }

  @Test("performAndWakeUp for the outer mode while a nested run waits runs the block after the nested run")
  func outerModeBlockIsNotLostToNestedRun() {
    let ran = Recorder<String>()
    let results = runWithNestedWait(outerSource: RunLoopSource(perform: {}), returnAfterSourceHandled: false) {
      runLoop in
      runLoop.performAndWakeUp(inModes: [.default]) {
        ran.append("block")
        RunLoop.current.stop()
      }
    }
    #expect(results.nested == [.handledSource])
    // Stopped by the block, not timed out: the outer run did not sleep after the nested one.
    #expect(results.outer == [.stopped])
    #expect(ran.snapshot == ["block"])
  }

  @Test("a source signal plus wakeUp while a nested run waits fires the outer run's source")
  func outerSourceSignalIsNotLostToNestedRun() {
    let fired = Recorder<String>()
    let outerSource = RunLoopSource(perform: { fired.append("outer source") })
    let results = runWithNestedWait(outerSource: outerSource, returnAfterSourceHandled: true) { runLoop in
      outerSource.signal()
      runLoop.wakeUp()
    }
    #expect(results.nested == [.handledSource])
    #expect(results.outer == [.handledSource])
    #expect(fired.snapshot == ["outer source"])
  }

  @Test("a plain wakeUp while a nested run waits also ends the outer run's coming sleep")
  func plainWakeUpReachesOuterRun() {
    let log = Recorder<String>()
    let outerSource = RunLoopSource(perform: {})
    let results = runWithNestedWait(outerSource: outerSource, returnAfterSourceHandled: false) { runLoop in
      // Nothing to do but wake: an observer of the outer mode records that the outer run
      // woke before its deadline, and ends it.
      runLoop.add(
        RunLoopObserver(activities: .afterWaiting, repeats: false) { _, _ in
          log.append("outer woke")
          RunLoop.current.stop()
        }, forMode: .default)
      runLoop.wakeUp()
    }
    #expect(results.nested == [.handledSource])
    #expect(results.outer == [.stopped])
    #expect(log.snapshot == ["outer woke"])
  }

  // MARK: Modes emptied from another thread

  /// Ways to take the last item out of a sleeping loop's mode.
  enum LastItem: String, CaseIterable, Sendable {
    case removedSource, invalidatedSource, removedTimer, invalidatedTimer, removedTimerLeavingObservers
    case removedPort, removedDescriptorSource
  }

  @Test(
    "taking the last item out of a sleeping loop's mode from another thread ends the run with finished",
    arguments: LastItem.allCases)
  func emptiedModeEndsSleepingRun(_ item: LastItem) {
    let remover = Box<(@Sendable (RunLoop) -> Void)?>(nil)
    let loopBox = Box<RunLoop?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let pipe = PortsPipe()
    let worker = TestThread.spawn {
      let runLoop = RunLoop.current
      switch item {
      case .removedSource, .invalidatedSource:
        let source = RunLoopSource(perform: {})
        runLoop.add(source, forMode: .default)
        remover.value = { loop in
          if item == .removedSource { loop.remove(source, forMode: .default) } else { source.invalidate() }
        }
      case .removedTimer, .invalidatedTimer, .removedTimerLeavingObservers:
        let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
        runLoop.add(timer, forMode: .default)
        if item == .removedTimerLeavingObservers {
          runLoop.add(RunLoopObserver(activities: .allActivities) { _, _ in }, forMode: .default)
        }
        remover.value = { loop in
          if item == .invalidatedTimer { timer.invalidate() } else { loop.remove(timer, forMode: .default) }
        }
      case .removedPort:
        let port = Port()
        runLoop.add(port, forMode: .default)
        remover.value = { loop in loop.remove(port, forMode: .default) }
      case .removedDescriptorSource:
        let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in }
        runLoop.add(source, forMode: .default)
        remover.value = { loop in loop.remove(source, forMode: .default) }
      }
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, timeout: Self.bound)
    }
    waitUntil { loopBox.value?.isWaiting == true }
    remover.value!(loopBox.value!)
    worker.join()
    #expect(result.value == .finished)
  }

  @Test("emptying an outer run's mode while a nested run waits ends the outer run with finished")
  func emptiedOuterModeEndsOuterRunAfterNestedRun() {
    let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
    let results = runWithNestedWait(outerItem: timer, returnAfterSourceHandled: false) { _ in
      timer.invalidate()
    }
    #expect(results.nested == [.handledSource])
    #expect(results.outer == [.finished])
  }

  // MARK: Observers added mid-pass

  @Test("an observer added by a before-timers observer is called at before-sources of the same pass")
  func observerAddedDuringCalloutSeesLaterPointsOfThePass() {
    let log = Recorder<String>()
    TestThread.run {
      let runLoop = RunLoop.current
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: .default)
      let late = RunLoopObserver(activities: [.beforeSources, .exit]) { _, activity in
        log.append("late \(activity)")
      }
      let adder = RunLoopObserver(activities: .beforeTimers, repeats: false) { _, _ in
        log.append("beforeTimers")
        runLoop.add(late, forMode: .default)
      }
      runLoop.add(adder, forMode: .default)
      runLoop.run(mode: .default, timeout: .zero)
      keepAlive.invalidate()
    }
    #expect(log.snapshot == ["beforeTimers", "late beforeSources", "late exit"])
  }

  // MARK: What counts as a handled source

  @Test("returnAfterSourceHandled does not count a descriptor drained before its mode ran")
  func drainedDescriptorIsNotAHandledSource() {
    let calls = Recorder<String>()
    let results = Recorder<RunLoopRunResult>()
    let pipe = PortsPipe()
    TestThread.run {
      let runLoop = RunLoop.current
      let other = RunLoopMode("WakeAndRunCorrectnessTests.other")
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: other)
      let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
        calls.append("handler")
      }
      runLoop.add(source, forMode: Self.nested)
      pipe.write(1)
      // A pass in another mode sees the descriptor ready; its source waits for its own mode.
      results.append(runLoop.run(mode: other, timeout: .zero))
      _ = pipe.readAll()
      results.append(runLoop.run(mode: Self.nested, timeout: .milliseconds(50), returnAfterSourceHandled: true))
      source.invalidate()
      keepAlive.invalidate()
    }
    #expect(results.snapshot == [.timedOut, .timedOut])
    #expect(calls.snapshot.isEmpty)
  }
}
