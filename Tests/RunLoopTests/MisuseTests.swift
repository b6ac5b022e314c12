import RunLoop
import Testing
import TestSupport

@Suite(.timeLimit(.minutes(2))) struct MisuseTests {
  @Test func runningTheCommonPseudoModeIsRefused() async {
    await #expect(processExitsWith: .failure) {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .common)
      runOnce(runLoop, mode: .common)
    }
  }

  @Test func addingCommonAsACommonModeIsRefused() async {
    await #expect(processExitsWith: .failure) {
      RunLoop.current.addCommonMode(.common)
    }
  }

  @Test func runningAnotherThreadsRunLoopIsRefused() async {
    await #expect(processExitsWith: .failure) {
      final class Slot: @unchecked Sendable { var runLoop: RunLoop? }
      let slot = Slot()
      TestThread.run { slot.runLoop = RunLoop.current }
      runOnce(slot.runLoop!, mode: .default)
    }
  }

  @Test func addingAnObserverToASecondRunLoopIsRefused() async {
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
