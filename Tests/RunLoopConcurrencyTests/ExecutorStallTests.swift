import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

/// An actor on a run-loop thread whose one method stalls the loop.
private actor Staller {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

  init(on loop: LoopThread) {
    executor = RunLoopExecutor(runLoop: loop.runLoop)
  }

  func stall() {
    stallTheThread()
  }
}

/// The scenario: a job that keeps its thread far past the stall threshold.
private func stallTheThread() {
  Thread.sleep(for: .seconds(30))
}

@Suite(.timeLimit(.minutes(3))) struct ExecutorStallTests {
  @Test(.runsExitTests) func aStalledActorJobIsReportedAsTheExecutorsSourceOnItsLoopThread() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      // The loop is started, and has run a block to its end, before the 10-ms threshold is
      // set: on a loaded machine its start-up block alone can be preempted past 10 ms and be
      // reported first (a pass with stalls=stop in the environment saw 14 ms).
      let loop = LoopThread(name: "executor-stall")
      await offPool { loop.onLoop {} }
      Diagnostics.stallThreshold = .milliseconds(10)
      Diagnostics.setMode(.stop, for: .stalls)
      await Staller(on: loop).stall()
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("run loop of thread \"executor-stall\""), "\(stderr)")
    #expect(stderr.contains("source \"RunLoopExecutor jobs\" has run for"), "\(stderr)")
  }
}
