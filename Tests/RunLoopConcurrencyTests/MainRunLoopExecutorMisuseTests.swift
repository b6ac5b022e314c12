import RunLoopConcurrency
import TestSupport
import Testing

@Suite(.timeLimit(.minutes(3))) struct MainRunLoopExecutorMisuseTests {
  @Test(.runsExitTests) func installingOffTheMainThreadStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      TestThread.run { try? MainRunLoopExecutor.install() }
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("install() called off the main thread"), "\(stderr)")
  }

  @Test func theSwitchIsOffUnlessInstalled() {
    #expect(!MainRunLoopExecutor.isInstalled)
  }
}
