import RunLoop
import TestSupport
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// Starts a `RunLoopThread` and calls its `stop()` from a block on that thread.
private func stopARunLoopThreadFromItself() {
  final class Slot: @unchecked Sendable { var worker: RunLoopThread? }
  let slot = Slot()
  let worker = try! RunLoopThread.start()
  let runLoop = worker.runLoop
  slot.worker = consume worker
  try? runLoop.performAndWait {
    if let worker = slot.worker.take() { worker.stop() }
  }
}

/// Asks a running worker loop to run a block for no mode, and waits for it.
private func waitForABlockForNoMode() {
  let worker = try! RunLoopThread.start()
  try? worker.runLoop.performAndWait(inModes: []) {}
}

@Suite(.timeLimit(.minutes(3))) struct MisuseTests {
  @Test(.runsExitTests) func runningTheCommonPseudoModeIsRefused() async {
    await #expect(processExitsWith: .failure) {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .common)
      runOnce(runLoop, mode: .common)
    }
  }

  @Test(.runsExitTests) func aBlockForNoModeIsRefused() async {
    await #expect(processExitsWith: .failure) {
      RunLoop.current.perform(inModes: []) {}
    }
  }

  @Test(.runsExitTests) func aWaitingRequestForNoModeIsRefusedInsteadOfWaitingForEver() async {
    await #expect(processExitsWith: .failure) {
      waitForABlockForNoMode()
    }
  }

  @Test(.runsExitTests) func aDelayedRequestForNoModeIsRefused() async {
    await #expect(processExitsWith: .failure) {
      RunLoop.current.perform(afterDelay: .zero, inModes: []) {}
    }
  }

  @Test(.runsExitTests) func addingCommonAsACommonModeIsRefused() async {
    await #expect(processExitsWith: .failure) {
      RunLoop.current.addCommonMode(.common)
    }
  }

  @Test(.runsExitTests) func stoppingARunLoopThreadFromItselfIsRefused() async {
    await #expect(processExitsWith: .failure) {
      stopARunLoopThreadFromItself()
    }
  }

  @Test(.runsExitTests) func runningAnotherThreadsRunLoopIsRefused() async {
    await #expect(processExitsWith: .failure) {
      final class Slot: @unchecked Sendable { var runLoop: RunLoop? }
      let slot = Slot()
      TestThread.run { slot.runLoop = RunLoop.current }
      runOnce(slot.runLoop!, mode: .default)
    }
  }

  @Test(.runsExitTests) func runningTheRunLoopOfAnEndedThreadFromALaterThreadWithItsPthreadIsRefused() async {
    await #expect(processExitsWith: .failure) {
      final class Slot: @unchecked Sendable {
        var runLoop: RunLoop?
        var handle = pthread_t()
      }
      // glibc gives a joined thread's descriptor, and so its pthread_t, to the next thread
      // with the same stack size: try until the later thread has the ended one's handle.
      for attempt in 1...50 {
        let slot = Slot()
        TestThread.run {
          slot.runLoop = RunLoop.current
          slot.handle = pthread_self()
        }
        TestThread.run {
          if pthread_equal(pthread_self(), slot.handle) != 0 || attempt == 50 {
            runOnce(slot.runLoop!, mode: .default)
            exit(0)  // the loop was run by a thread that does not own it
          }
        }
      }
    }
  }

  @Test(.runsExitTests) func rearmingAValidTimerFromAnotherThreadWhileItsCallbackRunsIsRefused() async {
    await #expect(processExitsWith: .failure) {
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .zero) { timer in
        // Only the callback's own thread may re-arm the still valid timer.
        TestThread.run { timer.rearm(after: .zero) { _ in } }
      }
      runLoop.add(timer, forMode: .default)
      runOnce(runLoop, mode: .default)
    }
  }

  @Test("an observer removed from every mode of its run loop may join another (as in Core Foundation)", .runsExitTests)
  func observerRemovedFromEveryModeMayJoinAnotherRunLoop() async {
    // An exit test: a regression stops the process with the misuse report.
    await #expect(processExitsWith: .success) {
      let observer = RunLoopObserver(activities: .entry) { _, _ in }
      precondition(RunLoop.current.add(observer, forMode: .default))
      precondition(RunLoop.current.add(observer, forMode: .common))
      RunLoop.current.remove(observer, forMode: .default)
      RunLoop.current.remove(observer, forMode: .common)
      precondition(!RunLoop.current.contains(observer, inMode: .default))
      TestThread.run { precondition(RunLoop.current.add(observer, forMode: .default)) }
    }
  }

  @Test(.runsExitTests) func addingAnObserverToASecondRunLoopIsRefused() async {
    await #expect(processExitsWith: .failure) {
      let observer = RunLoopObserver(activities: .entry) { _, _ in }
      RunLoop.current.add(observer, forMode: .default)
      TestThread.run { RunLoop.current.add(observer, forMode: .default) }
    }
  }
}

/// A synchronous wrapper: exit-test bodies are async, and `run` is `noasync`.
func runOnce(_ runLoop: RunLoop, mode: RunLoopMode) {
  runLoop.run(mode: mode, timeout: .zero)
}
