import TestSupport
import Testing
import Threads

@testable import RunLoop
@testable import Sync

// Scenarios of WebKit's WTF RunLoop and WorkQueue tests translated to the toolkit: WTF's
// `RunLoop::dispatch` is `performAndWakeUp`, `RunLoop::main()` a `RunLoopThread`'s loop (a
// test runner's main thread runs no loop), `Util::run(&done)` a nested run of the default
// mode until a flag is set, `RunLoop::Timer` a `RunLoopTimer`, and a serial `WorkQueue` a
// `RunLoopThread`.

/// Stress loops scale down under the sanitizers.
private let scale = isRunningUnderSanitizer ? 10 : 1

/// Runs the calling thread's loop in the default mode, nested or not, until `done` holds
/// (WTF's `Util::run`). Each run is bounded so a missed wake-up shows as a test time-out
/// only through `giveUp`, never as a silent hang.
private func runUntil(_ done: () -> Bool, giveUp: Duration = .seconds(20)) -> Bool {
  let limit = MonotonicInstant.after(giveUp)
  while !done() {
    if limit.hasPassed { return false }
    _ = RunLoop.current.run(mode: .default, before: .after(.milliseconds(100)))
  }
  return true
}

/// An object whose deinit runs `onDeinit` (captured by blocks to see when they are released).
private final class DeinitProbe: Sendable {
  let onDeinit: @Sendable () -> Void
  init(_ onDeinit: @escaping @Sendable () -> Void) { self.onDeinit = onDeinit }
  deinit { onDeinit() }
}

@Suite("WebKit WTF scenarios: RunLoop", .timeLimit(.minutes(3)))
struct PeerWebKitRunLoopTests {
  @Test("a block whose captures queue a new block on the same loop when released does not deadlock")
  func captureDeinitQueuesBlockOnSameLoop() throws {
    let worker = try RunLoopThread.start(name: "peer-deadlock")
    let loop = worker.runLoop
    let count = 100
    let remaining = AtomicInteger<Int>(count)
    let finished = Semaphore(value: 0)
    for _ in 0..<count {
      let capture = DeinitProbe {
        loop.performAndWakeUp {
          if remaining.decrement(ordering: .full) == 0 { finished.signal() }
        }
      }
      loop.performAndWakeUp { withExtendedLifetime(capture) {} }
    }
    let allRan = finished.wait(timeout: .seconds(20))
    #expect(
      allRan,
      "the blocks queued from the captures' deinits did not all run: \(allRan ? "" : loopState(loop, "peer-deadlock"))")
    #expect(remaining.load(ordering: .acquiring) == 0)
    worker.stop()
  }

  @Test("blocks never run are released when the loop's thread stops, and their captures may queue blocks then")
  func captureDeinitQueuesBlockWhileThreadStops() throws {
    let worker = try RunLoopThread.start(name: "peer-stop-release")
    let loop = worker.runLoop
    let released = AtomicInteger<Int>(0)
    let count = 20
    for _ in 0..<count {
      let capture = DeinitProbe {
        _ = released.increment(ordering: .relaxed)
        loop.perform { Issue.record("a block queued on an ended loop ran") }
      }
      // A mode the thread never runs: the block stays queued until the thread ends.
      loop.perform(inModes: [RunLoopMode("peer-never-run")]) { withExtendedLifetime(capture) {} }
    }
    worker.stop()
    #expect(released.load(ordering: .relaxed) == count)
  }

  @Test(
    "a nested run runs blocks queued during it before the blocks its pass took after the nesting block, as Core Foundation does (NestedInOrder)"
  )
  func nestedRunKeepsOrder() throws {
    let worker = try RunLoopThread.start(name: "peer-nested-order")
    let loop = worker.runLoop
    let order = Recorder<String>()
    let finished = Semaphore(value: 0)
    // Both blocks are queued while the loop is busy, so one pass takes them together.
    try worker.performAndWait {
      loop.perform {
        order.append("outer")
        let done = Box(false)
        loop.performAndWakeUp {
          order.append("inner")
          done.value = true
        }
        #expect(runUntil { done.value })
        finished.signal()
      }
      loop.perform { order.append("queued after outer") }
    }
    #expect(finished.wait(timeout: .seconds(20)))
    try worker.performAndWait {}
    // WebKit expects ["outer", "queued after outer", "inner"]; the toolkit documents Core
    // Foundation's order (`RunLoop.perform`): the pass took "queued after outer" with "outer",
    // so the nested run does not see it, and it runs once "outer" returned.
    #expect(order.snapshot == ["outer", "inner", "queued after outer"])
    worker.stop()
  }

  @Test("a nested run is woken by a block another thread queues (DispatchCrossThreadWhileNested)")
  func nestedRunServesCrossThreadBlock() throws {
    let worker = try RunLoopThread.start(name: "peer-nested-cross")
    let loop = worker.runLoop
    let finished = Semaphore(value: 0)
    let sawDone = Box(false)
    worker.performAndWakeUp {
      let done = Box(false)
      let helper = TestThread.spawn(name: "peer-dispatcher") {
        loop.performAndWakeUp { done.value = true }
      }
      sawDone.value = runUntil { done.value }
      helper.join()
      finished.signal()
    }
    worker.performAndWakeUp {}
    #expect(finished.wait(timeout: .seconds(30)))
    #expect(sawDone.value)
    worker.stop()
  }

  @Test("a block re-queuing itself many times runs that many times, then stop ends the run (ManyTimes)")
  func blockRequeuesItselfManyTimes() {
    let target = 100_000 / scale
    let count = Box(0)
    TestThread.run {
      let loop = RunLoop.current
      final class Counter: @unchecked Sendable {
        var value = 0  // touched on the loop's thread only
        let target: Int
        init(target: Int) { self.target = target }
        func step(_ loop: RunLoop) {
          value += 1
          if value == target {
            loop.stop()
            return
          }
          loop.perform { self.step(loop) }
        }
      }
      let counter = Counter(target: target)
      loop.perform { counter.step(loop) }
      loop.run()
      count.value = counter.value
    }
    #expect(count.value == target)
  }

  @Test("a block queued by a block on the loop's own thread runs before the loop sleeps, without a wake-up")
  func blockQueuedByBlockRunsBeforeSleeping() {
    // Each run is a fresh thread with a fresh loop: the block chain must reach its end in
    // every one of them, and never by waiting out the run's deadline.
    for _ in 0..<(50 / scale) {
      let result = Box<RunLoopRunResult?>(nil)
      let ran = Box(0)
      TestThread.run {
        let loop = RunLoop.current
        loop.perform {
          ran.update { $0 += 1 }
          loop.perform {
            ran.update { $0 += 1 }
            loop.perform {
              ran.update { $0 += 1 }
              loop.stop()
            }
          }
        }
        result.value = loop.run(mode: .default, before: .after(.seconds(10)))
      }
      #expect(ran.value == 3)
      #expect(result.value == .stopped)
      if result.value != .stopped { break }
    }
  }

  @Test("one cycle of the loop (a zero timeout) runs the queued blocks and returns, even when a block re-queues itself")
  func zeroTimeoutRunIsOneCycle() {
    let results = Recorder<RunLoopRunResult>()
    let ran = Box(0)
    TestThread.run {
      let loop = RunLoop.current
      final class Again: @unchecked Sendable {
        let loop: RunLoop
        let ran: Box<Int>
        init(_ loop: RunLoop, _ ran: Box<Int>) {
          self.loop = loop
          self.ran = ran
        }
        func step() {
          ran.update { $0 += 1 }
          loop.perform { self.step() }
        }
      }
      let again = Again(loop, ran)
      loop.perform { again.step() }
      for _ in 0..<3 { results.append(loop.run(mode: .default, timeout: .zero)) }
      // The chain's last block stays queued; the thread's end releases it.
    }
    #expect(results.snapshot == [.timedOut, .timedOut, .timedOut])
    #expect(ran.value >= 3)
  }

  @Test("blocks queued from several threads run in each thread's order, none lost")
  func crossThreadBlocksKeepPerThreadOrder() throws {
    let worker = try RunLoopThread.start(name: "peer-order")
    let loop = worker.runLoop
    let senders = 4
    let perSender = 5_000 / scale
    let seen = Box([Int](repeating: -1, count: senders))
    let outOfOrder = Box(0)
    runThreads(senders) { sender in
      for index in 0..<perSender {
        loop.performAndWakeUp {
          seen.update { last in
            if last[sender] != index - 1 { outOfOrder.update { $0 += 1 } }
            last[sender] = index
          }
        }
      }
    }
    try worker.performAndWait {}
    #expect(seen.value == [Int](repeating: perSender - 1, count: senders))
    #expect(outOfOrder.value == 0)
    worker.stop()
  }

  @Test(
    "a block queued on a loop whose thread ends unrun is released, and so is the loop (ThreadTerminationSelfReferenceCleanup)"
  )
  func unrunBlockCapturingItsLoopIsReleasedAtThreadEnd() {
    final class WeakBox: @unchecked Sendable {
      weak var loop: RunLoop?
    }
    let weakLoop = WeakBox()
    let captureReleased = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      weakLoop.loop = loop
      let capture = DeinitProbe { _ = captureReleased.increment(ordering: .relaxed) }
      // Never run: the thread ends without running its loop.
      loop.perform { withExtendedLifetime((loop, capture)) {} }
    }
    #expect(captureReleased.load(ordering: .relaxed) == 1)
    #expect(weakLoop.loop == nil, "the ended thread's run loop is kept alive by its own queued block")
  }

  @Test("a one-shot timer fires once on the loop's thread, not early, and is invalid once its callback returned")
  func oneShotTimer() {
    let fired = Box(0)
    let onLoopThread = Box(false)
    let validInCallback = Box(false)
    let validAfter = Box(true)
    let result = Box<RunLoopRunResult?>(nil)
    TestThread.run {
      let loopThread = Thread.current
      let start = MonotonicInstant.now
      let timer = RunLoopTimer(after: .milliseconds(20)) { timer in
        fired.update { $0 += 1 }
        onLoopThread.value = Thread.current == loopThread
        // Documented: a one-shot timer stays valid until its callback returns (WTF's
        // `isActive()` is already false here).
        validInCallback.value = timer.isValid
        #expect(start.duration(to: .now) >= .milliseconds(20))
      }
      RunLoop.current.add(timer, forMode: .default)
      // The only item of the mode: once it fired and was invalidated, the run finishes.
      result.value = RunLoop.current.run(mode: .default, before: .after(.seconds(20)))
      validAfter.value = timer.isValid
    }
    #expect(fired.value == 1)
    #expect(onLoopThread.value)
    #expect(validInCallback.value)
    #expect(!validAfter.value)
    #expect(result.value == .finished)
  }

  @Test("a repeating timer fires until its callback invalidates it, then never again (RepeatingTimer)")
  func repeatingTimerInvalidatedFromCallback() {
    let fired = Box(0)
    let stateInCallback = Recorder<Bool>()
    let result = Box<RunLoopRunResult?>(nil)
    TestThread.run {
      let timer = RunLoopTimer(after: .milliseconds(2), interval: .milliseconds(2)) { timer in
        stateInCallback.append(timer.isValid)
        if fired.update({
          $0 += 1
          return $0
        }) == 10 {
          timer.invalidate()
          stateInCallback.append(timer.isValid)
        }
      }
      RunLoop.current.add(timer, forMode: .default)
      result.value = RunLoop.current.run(mode: .default, before: .after(.seconds(20)))
      // Nothing fires after the invalidation, even if the loop runs on.
      _ = RunLoop.current.run(mode: .default, before: .after(.milliseconds(20)))
    }
    #expect(fired.value == 10)
    #expect(stateInCallback.snapshot == [Bool](repeating: true, count: 10) + [false])
    #expect(result.value == .finished)
  }

  @Test("a repeating timer whose callback runs the loop nested is not fired again from inside its own callback")
  func timerCallbackRunningNestedIsNotReentered() {
    let depth = Box(0)
    let maxDepth = Box(0)
    let fired = Box(0)
    TestThread.run {
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(1)) { timer in
        let now = depth.update {
          $0 += 1
          return $0
        }
        maxDepth.update { $0 = max($0, now) }
        if fired.update({
          $0 += 1
          return $0
        }) == 1 {
          // Several periods pass in the nested run: the timer must not fire inside itself.
          _ = RunLoop.current.run(mode: .default, before: .after(.milliseconds(20)))
        } else if fired.value >= 3 {
          timer.invalidate()
        }
        depth.update { $0 -= 1 }
      }
      RunLoop.current.add(timer, forMode: .default)
      _ = RunLoop.current.run(mode: .default, before: .after(.seconds(20)))
    }
    #expect(maxDepth.value == 1)
    #expect(fired.value == 3)
  }

  @Test("stop from another thread ends the innermost nested run only; the outer run goes on")
  func stopFromAnotherThreadEndsInnermostRun() throws {
    let worker = try RunLoopThread.start(name: "peer-stop-nested")
    let loop = worker.runLoop
    let innerResult = Box<RunLoopRunResult?>(nil)
    let nestedRunning = Semaphore(value: 0)
    let finished = Semaphore(value: 0)
    let afterNested = Box(false)
    worker.performAndWakeUp {
      loop.perform { nestedRunning.signal() }
      innerResult.value = RunLoop.current.run(mode: .default, before: .after(.seconds(20)))
      finished.signal()
    }
    #expect(nestedRunning.wait(timeout: .seconds(20)))
    loop.stop()
    #expect(finished.wait(timeout: .seconds(20)))
    #expect(innerResult.value == .stopped)
    // The outer run (the thread's own) still serves blocks.
    try worker.performAndWait { afterNested.value = true }
    #expect(afterNested.value)
    worker.stop()
  }

  @Test("a nested run in another mode runs only the blocks queued for that mode or the common modes")
  func nestedRunInAnotherModeRunsOnlyItsBlocks() throws {
    let worker = try RunLoopThread.start(name: "peer-nested-mode")
    let loop = worker.runLoop
    let order = Recorder<String>()
    let privateMode = RunLoopMode("peer-private")
    let finished = Semaphore(value: 0)
    worker.performAndWakeUp {
      loop.perform(inModes: [.default]) { order.append("default") }
      loop.perform(inModes: [.common]) { order.append("common") }
      loop.perform(inModes: [privateMode]) { order.append("private") }
      // Runs until its mode has nothing left: the private block (and not the default one).
      let result = RunLoop.current.run(mode: privateMode, before: .after(.seconds(20)))
      order.append("nested returned \(result)")
      finished.signal()
    }
    #expect(finished.wait(timeout: .seconds(20)))
    try worker.performAndWait {}
    let seen = order.snapshot
    #expect(seen.first == "private")
    #expect(seen.contains("nested returned finished"))
    if let returned = seen.firstIndex(of: "nested returned finished") {
      #expect(
        seen.firstIndex(of: "default").map { $0 > returned } == true, "a default-mode block ran in the private run")
      #expect(seen.contains("common"))
    }
    worker.stop()
  }

  @Test("a run-loop thread runs blocks on itself under its name; once stopped it has ended and refuses work (Create)")
  func runLoopThreadCreateAndStop() throws {
    let worker = try RunLoopThread.start(name: "peer-create")
    let loop = worker.runLoop
    let thread = worker.thread
    let ranOn = Box<Thread?>(nil)
    try worker.performAndWait { ranOn.value = Thread.current }
    #expect(ranOn.value == thread)
    #expect(thread.name == "peer-create")
    worker.stop()
    #expect(thread.isFinished)
    let released = AtomicInteger<Int>(0)
    let capture = DeinitProbe { _ = released.increment(ordering: .relaxed) }
    #expect(throws: PerformError.targetExited) {
      try loop.performAndWait { withExtendedLifetime(capture) {} }
    }
    loop.performAndWakeUp { withExtendedLifetime(capture) {} }
    withExtendedLifetime(capture) {}
    ranOn.value = nil
  }
}

@Suite("WebKit WTF scenarios: WorkQueue on a run-loop thread", .timeLimit(.minutes(3)))
struct PeerWebKitWorkQueueTests {
  @Test("a serial queue runs its blocks one after another in order (Simple)")
  func serialQueueKeepsOrder() throws {
    let queue = try RunLoopThread.start(name: "peer-simple")
    let order = Recorder<String>()
    let completed = Semaphore(value: 0)
    let overlapping = AtomicInteger<Int>(0)
    let running = AtomicInteger<Int>(0)
    for label in ["simple", "long", "third"] {
      queue.performAndWakeUp {
        if running.increment(ordering: .full) != 1 { _ = overlapping.increment(ordering: .relaxed) }
        order.append(label)
        _ = running.decrement(ordering: .full)
        if label == "third" { completed.signal() }
      }
    }
    #expect(completed.wait(timeout: .seconds(20)))
    #expect(order.snapshot == ["simple", "long", "third"])
    #expect(overlapping.load(ordering: .relaxed) == 0)
    queue.stop()
  }

  @Test("two queues run independently: one blocked does not hold up the other (TwoQueues)")
  func twoQueuesAreIndependent() throws {
    let queue1 = try RunLoopThread.start(name: "peer-two-1")
    let queue2 = try RunLoopThread.start(name: "peer-two-2")
    let order = Recorder<String>()
    let queue1Done = Semaphore(value: 0)
    let queue2Done = Semaphore(value: 0)
    queue1.performAndWakeUp { order.append("simple") }
    queue2.performAndWakeUp {
      // Blocked until queue 1 has finished its work: queue 1 must not need queue 2.
      #expect(queue1Done.wait(timeout: .seconds(20)))
      order.append("long")
      queue2Done.signal()
    }
    queue1.performAndWakeUp {
      order.append("third")
      queue1Done.signal()
    }
    #expect(queue2Done.wait(timeout: .seconds(20)))
    #expect(order.snapshot == ["simple", "third", "long"])
    queue1.stop()
    queue2.stop()
  }

  @Test("work scheduled for later runs after work queued now, not early (DispatchAfter)")
  func dispatchAfterRunsLater() throws {
    let queue = try RunLoopThread.start(name: "peer-after")
    let order = Recorder<String>()
    let done = Semaphore(value: 0)
    let start = MonotonicInstant.now
    let delay = Duration.milliseconds(50)
    let firedAfter = Box<Duration?>(nil)
    queue.performAndWakeUp { order.append("simple") }
    // Added from another thread while the loop sleeps: the loop re-plans at once.
    let timer = RunLoopTimer(after: delay) { _ in
      firedAfter.value = start.duration(to: .now)
      order.append("dispatchAfter")
      done.signal()
    }
    #expect(queue.runLoop.add(timer, forMode: .default))
    #expect(done.wait(timeout: .seconds(20)))
    #expect(order.snapshot == ["simple", "dispatchAfter"])
    #expect((firedAfter.value ?? .zero) >= delay)
    queue.stop()
  }

  @Test("the last owner of a run-loop thread letting go of it on that thread ends the thread (DestroyOnSelf)")
  func handleDroppedOnItsOwnThread() throws {
    final class Owner: @unchecked Sendable {
      var queue: RunLoopThread?  // set once before sharing; taken on the queue's thread
      let thread: Thread
      init(_ queue: consuming RunLoopThread) {
        thread = queue.thread
        self.queue = consume queue
      }
    }
    let owner = Owner(try RunLoopThread.start(name: "peer-destroy-on-self"))
    let thread = owner.thread
    let dropped = Semaphore(value: 0)
    let timer = RunLoopTimer(after: .milliseconds(10)) { _ in
      // The handle goes away on its own thread: it cannot join itself, so it detaches.
      owner.queue = nil
      dropped.signal()
    }
    #expect(owner.queue?.runLoop.add(timer, forMode: .default) == true)
    #expect(dropped.wait(timeout: .seconds(20)))
    waitUntil { thread.isFinished }
    #expect(thread.isFinished)
  }
}

/// What a hang's failure message says about `loop` and its thread (named `threadName`):
/// its wake-up state, its queued blocks, and where the thread sleeps in the kernel beside
/// the addresses of the two words it can sleep on (the wake-up state and the loop's lock).
/// The kernel states are read first: the `unlock` after the look at the queue wakes a
/// thread asleep on the lock word, which would erase what the message is for.
private func loopState(_ loop: RunLoop, _ threadName: String) -> String {
  let threads = kernelStates(ofThreadsNamed: threadName)
  var state =
    "wakeState \(loop.wakeState.load(ordering: .full)) at \(loop.wakeState.storage), lock word at \(loop.lock.core.base)"
  if loop.lock.tryLock() {
    state += ", \(loop.blocks.count) blocks queued, isSleeping \(loop.isSleeping)"
    loop.lock.unlock()
  } else {
    state += ", lock held"
  }
  return state + "\n" + threads
}
