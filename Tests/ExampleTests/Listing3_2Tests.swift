import RunLoop
import Sync
import TestSupport
import Testing

/// Listing 3-2: a skeleton thread main routine runs its run loop with a timeout, returning
/// after each source, and ends when the loop was stopped or has nothing left to run.
@Suite(.timeLimit(.minutes(3))) struct Listing3_2Tests {
  @Test func skeletonThreadMainRunsUntilStoppedOrFinished() {
    let handled = Recorder<Int>()
    let results = Recorder<RunLoopRunResult>()
    let loopBox = Box<RunLoop?>(nil)
    let source = RunLoopSource(perform: { handled.append(handled.count + 1) })

    let worker = runLoopExampleSpawn {
      // skeletonThreadMain
      var done = false
      // Add your sources or timers to the run loop and do any other setup.
      RunLoop.current.add(source, forMode: .default)
      loopBox.value = RunLoop.current
      repeat {
        // Start the run loop but return after each source is handled.
        let result = RunLoop.current.run(mode: .default, timeout: .seconds(1), returnAfterSourceHandled: true)
        results.append(result)
        // If a source explicitly stopped the run loop, or if there are no sources or timers,
        // go ahead and exit.
        if result == .stopped || result == .finished { done = true }
        // Check for any other exit conditions here and set the done variable as needed.
      } while !done
    }

    waitUntil { loopBox.value != nil }
    let runLoop = loopBox.value!
    for expected in 1...3 {
      source.signal()
      runLoop.wakeUp()
      waitUntil { handled.count == expected }
    }
    // No sources left: the current or next run returns finished.
    source.invalidate()
    runLoop.wakeUp()
    worker.join()

    let all = results.snapshot
    #expect(all.filter { $0 == .handledSource }.count == 3)
    #expect(all.last == .finished)
    #expect(all.allSatisfy { $0 == .handledSource || $0 == .timedOut || $0 == .finished })
    #expect(handled.snapshot == [1, 2, 3])
  }
}
