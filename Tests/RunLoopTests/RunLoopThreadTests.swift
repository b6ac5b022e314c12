import RunLoop
import Sync
import TestSupport
import Testing
import Threads

/// Polls `condition` for at most `limit`; whether it held.
private func holdsWithin(_ limit: Duration, _ condition: () -> Bool) -> Bool {
  let giveUp = MonotonicInstant.after(limit)
  while !condition() {
    if giveUp.hasPassed { return false }
    Thread.yield()
  }
  return true
}

/// Holds a worker handle so a block on the worker can drop it.
private final class HandleSlot: @unchecked Sendable {
  // @unchecked: written by the test thread before the block is queued, then by the block.
  var worker: RunLoopThread?
}

@Suite(.timeLimit(.minutes(3))) struct RunLoopThreadTests {
  @Test func startReturnsOnceTheThreadsRunLoopServesRequests() throws {
    // Repeated: a request made right after start must never find the thread without a loop.
    for _ in 0..<20 {
      let worker = try RunLoopThread.start(name: "rl-worker")
      #expect(RunLoop.runLoop(of: worker.thread) === worker.runLoop)
      let ranOn = Box<UInt64?>(nil)
      try RunLoop.performAndWait(on: worker.thread) { ranOn.value = Thread.current.id }
      #expect(ranOn.value == worker.thread.id)
      #expect(worker.thread.name == "rl-worker")
      worker.stop()
    }
  }

  @Test func anInvalidConfigurationIsAThreadStartErrorAndStartsNoThread() {
    var configuration = ThreadConfiguration()
    configuration.stackSize = 1
    #expect(
      throws: ThreadStartError.invalidConfiguration(
        .stackSizeTooSmall(1, minimum: ThreadConfiguration.minimumStackSize))
    ) {
      _ = try RunLoopThread.start(name: "never", configuration: configuration)
    }
  }

  @Test func anIdleWorkerSleepsInsteadOfFinishingItsRuns() throws {
    let worker = try RunLoopThread.start()
    // Without the keep-alive item its empty default mode would end every run at once, and
    // the thread would spin, never waiting.
    #expect(holdsWithin(.seconds(20)) { worker.runLoop.isWaiting })
    #expect(worker.runLoop.currentMode == .default)
    worker.stop()
  }

  @Test func stoppingTheLoopFromABlockEndsOneRunOnly() throws {
    let worker = try RunLoopThread.start()
    try worker.performAndWait { RunLoop.current.stop() }
    let ran = Box(false)
    try worker.performAndWait(timeout: .seconds(30)) { ran.value = true }
    #expect(ran.value)
    worker.stop()
  }

  @Test func stopEndsTheThreadAndLaterRequestsThrowTargetExited() throws {
    let worker = try RunLoopThread.start()
    let runLoop = worker.runLoop
    worker.stop()
    // Bounded, so a loop that kept the request forever fails as timedOut instead of hanging.
    #expect(throws: PerformError.targetExited) { try runLoop.performAndWait(timeout: .seconds(30)) {} }
  }

  @Test func droppingTheHandleStopsAndJoinsTheThread() throws {
    let runLoop: RunLoop
    do {
      let worker = try RunLoopThread.start()
      runLoop = worker.runLoop
    }
    #expect(throws: PerformError.targetExited) { try runLoop.performAndWait(timeout: .seconds(30)) {} }
  }

  @Test func droppingTheHandleOnItsOwnThreadEndsTheThreadInsteadOfJoiningItself() throws {
    let worker = try RunLoopThread.start()
    let runLoop = worker.runLoop
    let slot = HandleSlot()
    slot.worker = consume worker
    let ended = Latch(count: 1)
    try runLoop.performAndWait {
      Thread.current.onExit { ended.countDown() }
      // The handle's last owner lets go of it on the worker itself.
      slot.worker = nil
    }
    #expect(ended.wait(timeout: .seconds(30)))
    #expect(throws: PerformError.targetExited) { try runLoop.performAndWait(timeout: .seconds(30)) {} }
  }

  @Test func aWorkerServesSourcesAddedFromAnotherThread() throws {
    let worker = try RunLoopThread.start()
    let fired = Box(0)
    let source = RunLoopSource(perform: { fired.update { $0 += 1 } })
    worker.runLoop.add(source, forMode: .default)
    source.signalAndWakeUp()
    #expect(holdsWithin(.seconds(30)) { fired.value == 1 })
    source.invalidate()
    // Its last source gone, the worker still waits for work.
    let ran = Box(false)
    try worker.performAndWait { ran.value = true }
    #expect(ran.value)
    worker.stop()
  }
}
