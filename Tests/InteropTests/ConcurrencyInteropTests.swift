// RunLoopConcurrency beside Foundation and Synchronization: an actor pinned to a toolkit
// run-loop thread, in a file where Foundation's `Thread` and `RunLoop` are visible too.
import Foundation
import RunLoop
import RunLoopConcurrency
import Sync
import Synchronization
import Testing
import Threads

/// An actor whose jobs run on a toolkit run loop's thread.
private actor PinnedCounter {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  private var count = 0
  init(executor: RunLoopExecutor) { self.executor = executor }
  /// Counts, and says whether it ran on the run loop's thread.
  func increment() -> Bool {
    count += 1
    return RunLoop::RunLoop.current === executor.runLoop
  }
}

/// Starting and stopping a run-loop thread block the caller briefly (`noasync`); a test does
/// it from a synchronous function, as a program does at start-up and shutdown.
private func startWorker() throws -> RunLoopThread { try RunLoopThread.start(name: "interop-actor") }
private func stopWorker(_ worker: consuming RunLoopThread) { worker.stop() }

@Suite("RunLoopConcurrency beside Foundation", .timeLimit(.minutes(3)))
struct ConcurrencyInteropTests {
  @Test("every RunLoopConcurrency public API is usable with Foundation imported")
  func executorAndAsyncJoin() async throws {
    let worker = try startWorker()
    let executor = RunLoopExecutor(runLoop: worker.runLoop)
    let counter = PinnedCounter(executor: executor)
    #expect(await counter.increment())
    #expect(executor.queuedJobCount == 0)
    #expect(executor.modes == [.common])
    let summer = try Threads::Thread.spawn(name: "interop-sum") { (1...10).reduce(0, +) }
    #expect(await summer.value() == 55)
    // Foundation's types by their own names, in the same scope.
    #expect(Foundation.RunLoop.main === Foundation.RunLoop.main)
    stopWorker(worker)
  }
}
