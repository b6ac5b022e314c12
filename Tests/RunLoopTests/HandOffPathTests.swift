import RunLoop
import Sync
import TestSupport
import Testing

/// A run in a mode with one source and no observers, timers or descriptor members takes the
/// hand-off steps (the source's handler is followed by the next pass's source check and sleep
/// decision in one critical section): what the rest of the pass would have done still
/// happens in order. Each test runs its loop on a fresh thread.
@Suite(.timeLimit(.minutes(3))) struct HandOffPathTests {
  @Test func aSourceSignalledByItsOwnHandlerFiresAgainInTheNextPassWithoutAWakeUp() {
    TestThread.run {
      let runLoop = RunLoop.current
      let count = Box(0)
      let sourceBox = Box<RunLoopSource?>(nil)
      let source = RunLoopSource(perform: {
        count.value += 1
        if count.value < 5 { sourceBox.value?.signal() } else { runLoop.stop() }
      })
      sourceBox.value = source
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(count.value == 5)
      source.invalidate()
      sourceBox.value = nil  // the handler captures the box: break the cycle
    }
  }

  @Test func aBlockQueuedByTheHandlerRunsBeforeTheLoopSleeps() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let source = RunLoopSource(perform: {
        log.append("handler")
        // No wake-up: the pass must run it before it decides to sleep.
        runLoop.perform {
          log.append("block")
          runLoop.stop()
        }
      })
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(log.snapshot == ["handler", "block"])
      source.invalidate()
    }
  }

  @Test func aRunWhoseDeadlinePassesDuringTheHandlerTimesOutInsteadOfSleeping() {
    TestThread.run {
      let runLoop = RunLoop.current
      let deadline = MonotonicInstant.after(.milliseconds(20))
      let fired = Box(0)
      let source = RunLoopSource(perform: {
        fired.value += 1
        while !deadline.hasPassed {}  // the handler outlasts the run's deadline
      })
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, before: deadline) == .timedOut)
      #expect(fired.value == 1)
      source.invalidate()
    }
  }

  @Test func aHandlerThatRemovesTheLastSourceEndsTheRunAsFinished() {
    TestThread.run {
      let runLoop = RunLoop.current
      let sourceBox = Box<RunLoopSource?>(nil)
      let source = RunLoopSource(perform: { sourceBox.value?.invalidate() })
      sourceBox.value = source
      runLoop.add(source, forMode: .default)
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      sourceBox.value = nil  // the handler captures the box: break the cycle
    }
  }

  @Test func aSignalFromAnotherThreadDuringTheHandlerIsNotLost() {
    // The other thread signals and wakes while the handler runs, i.e. just before the loop
    // checks the source again and decides to sleep: the second firing must come.
    let loopBox = Box<RunLoop?>(nil)
    let inHandler = Semaphore()
    let signalled = Semaphore()
    let fired = AtomicInteger<Int>(0)
    let sourceBox = Box<RunLoopSource?>(nil)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      let source = RunLoopSource(perform: {
        if fired.increment(ordering: .full) == 1 {
          inHandler.signal()
          signalled.wait()
        } else {
          runLoop.stop()
        }
      })
      sourceBox.value = source
      runLoop.add(source, forMode: .default)
      loopBox.value = runLoop
      source.signal()
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      source.invalidate()
    }
    inHandler.wait()
    sourceBox.value!.signal()
    loopBox.value!.wakeUp()
    signalled.signal()
    loopThread.join()
    #expect(fired.load(ordering: .full) == 2)
    sourceBox.value = nil
  }
}
