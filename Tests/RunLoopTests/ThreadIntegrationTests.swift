import RunLoop
import Sync
import TestSupport
import Testing
import Threads

@Suite(.timeLimit(.minutes(3))) struct ThreadIntegrationTests {
  @Test func exitRequestStopsTheThreadsSleepingRunLoop() {
    let loopBox = Box<RunLoop?>(nil)
    let log = Recorder<String>()
    let worker = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      recordActivities(of: runLoop, into: log)
      loopBox.value = runLoop
      var passes = 0
      while !Thread.current.isExitRequested {
        runLoop.run(mode: .default, timeout: .seconds(3600))
        passes += 1
      }
      log.append("passes \(passes)")
    }
    waitUntil { loopBox.value?.isWaiting == true }
    worker.thread.requestExit()
    worker.join()
    // One hour-long run, ended at once by the exit request (it ends the thread's runs).
    #expect(
      log.snapshot == [
        "entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "exit", "passes 1",
      ])
  }
}
