import RunLoop
import Sync
import TestSupport
import Testing

/// Runs `action` from its deinit: stands for a user object, captured by a timer's or a
/// queued block's closure, whose teardown calls back into the run loop.
private final class DeinitProbe: Sendable {
  let action: @Sendable () -> Void

  init(_ action: @escaping @Sendable () -> Void = {}) {
    self.action = action
  }

  deinit { action() }
}

/// When a timer's or a queued block's closure, and what it captures, is released: at
/// invalidation or cancellation, and never while a run loop lock is held (a capture's deinit
/// may call the same run loop: with a lock held that would stop the process as a
/// self-deadlock).
@Suite("RunLoop callback lifetimes", .timeLimit(.minutes(3)))
struct CallbackLifetimeTests {
  /// A probe whose deinit queues a block on `runLoop` and adds and invalidates a timer there
  /// (each takes the loop's lock), then logs "deinit".
  private static func reentrantProbe(_ runLoop: RunLoop, _ log: Recorder<String>) -> DeinitProbe {
    DeinitProbe {
      runLoop.perform(inModes: [.default]) { log.append("block queued by deinit") }
      let timer = RunLoopTimer(after: .seconds(3_600)) { _ in }
      runLoop.add(timer, forMode: .default)
      timer.invalidate()
      log.append("deinit")
    }
  }

  /// Runs `loop` (the caller's thread's) nested in `mode` for at most 5 seconds, with a far
  /// timer keeping the mode from being empty; returns how the run ended (`.stopped` when a
  /// block stopped it in time).
  private static func runNested(_ loop: RunLoop, in mode: RunLoopMode) -> RunLoopRunResult {
    let keepAlive = RunLoopTimer(after: .seconds(3_600)) { _ in }
    loop.add(keepAlive, forMode: mode)
    defer { keepAlive.invalidate() }
    return loop.run(mode: mode, timeout: .seconds(5))
  }

  @Test("a one-shot timer nobody else holds releases its captures after firing, outside the loop's lock")
  func firedOneShotTimerReleasesCapturesOutsideTheLock() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      do {
        let probe = Self.reentrantProbe(runLoop, log)
        runLoop.add(
          RunLoopTimer(after: .zero) { _ in withExtendedLifetime(probe) { log.append("fired") } }, forMode: .default)
      }
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["fired", "deinit", "block queued by deinit"])
    }
  }

  @Test("a repeating timer invalidating itself releases its captures when its block returns")
  func selfInvalidatingTimerReleasesCapturesWhenItsBlockReturns() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      do {
        let probe = Self.reentrantProbe(runLoop, log)
        let timer = RunLoopTimer(after: .zero, interval: .milliseconds(1)) { timer in
          withExtendedLifetime(probe) {
            timer.invalidate()
            log.append("invalidated")
          }
        }
        runLoop.add(timer, forMode: .default)
      }
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["invalidated", "deinit", "block queued by deinit"])
    }
  }

  @Test("invalidate() releases the block and its captures at once, though the timer is still referenced")
  func invalidateReleasesTheBlockAtOnce() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      weak var weakProbe: DeinitProbe?
      let timer: RunLoopTimer
      do {
        let probe = Self.reentrantProbe(runLoop, log)
        weakProbe = probe
        timer = RunLoopTimer(after: .seconds(3_600)) { _ in withExtendedLifetime(probe) {} }
      }
      runLoop.add(timer, forMode: .default)
      #expect(weakProbe != nil, "held by the scheduled timer's block")
      timer.invalidate()
      #expect(weakProbe == nil)
      #expect(log.snapshot == ["deinit"])
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["deinit", "block queued by deinit"])
      withExtendedLifetime(timer) {}
    }
  }

  @Test("a one-shot timer still referenced releases its block once it has fired")
  func firedOneShotTimerReleasesItsBlock() {
    TestThread.run {
      let runLoop = RunLoop.current
      weak var weakProbe: DeinitProbe?
      let timer: RunLoopTimer
      do {
        let probe = DeinitProbe()
        weakProbe = probe
        timer = RunLoopTimer(after: .zero) { _ in withExtendedLifetime(probe) {} }
      }
      runLoop.add(timer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(!timer.isValid)
      #expect(weakProbe == nil)
    }
  }

  @Test("a timer removed from its mode and dropped releases its captures with the last reference")
  func removedAndDroppedTimerReleasesCapturesAtOnce() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      do {
        let probe = Self.reentrantProbe(runLoop, log)
        let timer = RunLoopTimer(after: .zero) { _ in withExtendedLifetime(probe) { log.append("fired") } }
        runLoop.add(timer, forMode: .default)
        runLoop.remove(timer, forMode: .default)
      }
      #expect(log.snapshot == ["deinit"], "the loop keeps nothing of a timer that left its modes")
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["deinit", "block queued by deinit"])
    }
  }

  @Test("many timers removed and dropped while the loop keeps its schedule release each capture once, outside the lock")
  func manyRemovedTimersReleaseOutsideTheLock() {
    TestThread.run {
      let runLoop = RunLoop.current
      let log = Recorder<String>()
      let keepAlive = RunLoopTimer(after: .milliseconds(1)) { _ in log.append("fired") }
      runLoop.add(keepAlive, forMode: .default)
      // Enough schedule entries left behind to make the mode rebuild its schedule.
      for _ in 0..<200 {
        let probe = Self.reentrantProbe(runLoop, log)
        let timer = RunLoopTimer(after: .microseconds(500)) { _ in withExtendedLifetime(probe) {} }
        runLoop.add(timer, forMode: .default)
        timer.setNextFireDate(.after(.microseconds(200)))
        runLoop.remove(timer, forMode: .default)
      }
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      let entries = log.snapshot
      #expect(entries.filter { $0 == "deinit" }.count == 200)
      #expect(entries.filter { $0 == "block queued by deinit" }.count == 200)
      #expect(entries.filter { $0 == "fired" }.count == 1)
    }
  }

  @Test("blocks still queued when the thread exits are released outside the loop's lock")
  func queuedBlocksAtThreadExitAreReleasedOutsideTheLock() {
    let log = Recorder<String>()
    TestThread.run {
      let runLoop = RunLoop.current
      do {
        let probe = Self.reentrantProbe(runLoop, log)
        runLoop.perform(inModes: [RunLoopMode("never run")]) { withExtendedLifetime(probe) {} }
      }
      #expect(log.snapshot.isEmpty, "held by the queued block")
    }
    #expect(log.snapshot == ["deinit"])
  }

  @Test(
    "a block a pass took at its top releases its captures before the loop sleeps, so what their deinit queues runs",
    arguments: [false, true])
  func blockTakenAtTheTopOfAPassIsReleasedBeforeTheSleep(withTimer: Bool) throws {
    let worker = try RunLoopThread.start(name: "release-before-sleep")
    let loop = worker.runLoop
    if withTimer {
      // A far timer makes the loop sleep in epoll rather than on its futex.
      try worker.performAndWait { loop.add(RunLoopTimer(after: .seconds(3_600)) { _ in }, forMode: .default) }
    }
    let queuedByDeinit = Semaphore(value: 0)
    // The first block runs after a wake-up; the block it queues on the loop's own thread is
    // taken at the top of the next pass, and only that block holds the probe. The probe's
    // deinit queues a third block: if the pass kept the second one until after its sleep,
    // nothing would wake the loop for the third.
    loop.performAndWakeUp {
      let probe = DeinitProbe { loop.performAndWakeUp { queuedByDeinit.signal() } }
      loop.perform { withExtendedLifetime(probe) {} }
    }
    #expect(queuedByDeinit.wait(timeout: .seconds(10)), "the block queued by the capture's deinit did not run")
    worker.stop()
  }

  @Test("each block of a pass's batch is released once it ran, before the next block runs (as Core Foundation does)")
  func eachBlockOfABatchIsReleasedBeforeTheNextRuns() throws {
    let worker = try RunLoopThread.start(name: "release-per-block")
    let loop = worker.runLoop
    let nested = RunLoopMode("release-per-block.nested")
    let result = LockedValue<RunLoopRunResult?>(nil)
    let done = Semaphore(value: 0)
    loop.performAndWakeUp {
      // Both queued on the loop's own thread, so the next pass takes them together. The
      // first one's capture, once released, queues the block that stops the nested run the
      // second one makes: kept until the batch ends, the nested run would time out.
      do {
        let probe = DeinitProbe { loop.performAndWakeUp(inModes: [nested]) { RunLoop.current.stop() } }
        loop.perform(inModes: [.default]) { withExtendedLifetime(probe) {} }
      }
      loop.perform(inModes: [.default]) {
        result.withLock { $0 = Self.runNested(loop, in: nested) }
        done.signal()
      }
    }
    #expect(done.wait(timeout: .seconds(20)))
    #expect(
      result.withLock { $0 } == .stopped, "the first block's capture was released only after the nested run")
    worker.stop()
  }

  @Test("a source that invalidated itself in its handler is released before the next source of the pass fires")
  func selfInvalidatedSourceIsReleasedBeforeTheNextSourceFires() throws {
    let worker = try RunLoopThread.start(name: "release-per-source")
    let loop = worker.runLoop
    let nested = RunLoopMode("release-per-source.nested")
    let result = LockedValue<RunLoopRunResult?>(nil)
    let done = Semaphore(value: 0)
    let handle = AtomicReference<RunLoopSource>()
    let second = RunLoopSource(order: 1) {
      // Runs the loop nested; the first source's capture, once released, queues the block
      // that stops this run. Kept until every signalled source fired, it would time out.
      result.withLock { $0 = Self.runNested(loop, in: nested) }
      done.signal()
    }
    // Made on the loop's thread, so only the loop and `handle` hold the first source.
    try worker.performAndWait {
      let probe = DeinitProbe { loop.performAndWakeUp(inModes: [nested]) { RunLoop.current.stop() } }
      let first = RunLoopSource(order: 0) {
        withExtendedLifetime(probe) {}
        handle.exchange(nil)?.invalidate()
      }
      handle.store(first)
      _ = loop.add(first, forMode: .default)
      _ = loop.add(second, forMode: .default)
      first.signal()
      second.signal()
    }
    loop.wakeUp()
    #expect(done.wait(timeout: .seconds(20)))
    #expect(result.withLock { $0 } == .stopped, "the first source was released only after the second one's handler")
    worker.stop()
    second.invalidate()
  }

  @Test(
    "a source that invalidated itself in its handler is released before the loop sleeps: a block its capture's deinit queues runs",
    arguments: [false, true], [false, true])
  func blockQueuedBySelfInvalidatedSourceCaptureRuns(besideAnotherSource: Bool, wakesTheLoop: Bool) throws {
    let worker = try RunLoopThread.start(name: "source-release-perform")
    let loop = worker.runLoop
    // A second, never signalled source takes the pass off its one-source hand-off steps.
    let idle = RunLoopSource {}
    if besideAnotherSource { #expect(loop.add(idle, forMode: .default)) }
    let queuedByDeinit = Semaphore(value: 0)
    let handle = AtomicReference<RunLoopSource>()
    let firings = AtomicInteger<Int>(0)
    // Made on the loop's thread, so only the loop and `handle` hold the source.
    loop.performAndWakeUp {
      // Plain perform on the loop's own thread needs no wake-up: the loop runs the block
      // before it would sleep, provided the source goes before the sleep is decided.
      let probe = DeinitProbe {
        if wakesTheLoop {
          loop.performAndWakeUp { queuedByDeinit.signal() }
        } else {
          loop.perform { queuedByDeinit.signal() }
        }
      }
      let source = RunLoopSource {
        withExtendedLifetime(probe) {}
        if firings.increment(ordering: .full) == 1 {
          // Fired again by the next pass's first step (the one-source hand-off step).
          handle.load()?.signal()
        } else {
          handle.exchange(nil)?.invalidate()
        }
      }
      handle.store(source)
      _ = loop.add(source, forMode: .default)
      source.signal()
    }
    #expect(queuedByDeinit.wait(timeout: .seconds(10)), "the block queued by the capture's deinit did not run")
    #expect(firings.load(ordering: .full) == 2)
    worker.stop()
    idle.invalidate()
  }

  @Test("a common-mode timer left only in the common set is released outside the loop's lock at thread exit")
  func commonOnlyTimerAtThreadExitIsReleasedOutsideTheLock() {
    let log = Recorder<String>()
    TestThread.run {
      let runLoop = RunLoop.current
      do {
        let probe = Self.reentrantProbe(runLoop, log)
        let timer = RunLoopTimer(after: .seconds(3_600)) { _ in withExtendedLifetime(probe) {} }
        runLoop.add(timer, forMode: .common)
        runLoop.remove(timer, forMode: .default)
      }
      #expect(log.snapshot.isEmpty, "held by the common set")
    }
    #expect(log.snapshot == ["deinit"])
  }

  @Test("cancelling a delayed perform releases the request's block and captures at once")
  func cancelledDelayedPerformReleasesItsBlockAtOnce() {
    TestThread.run {
      let runLoop = RunLoop.current
      weak var weakProbe: DeinitProbe?
      let request: DelayedPerform
      do {
        let probe = DeinitProbe()
        weakProbe = probe
        request = runLoop.perform(afterDelay: .seconds(3_600)) { withExtendedLifetime(probe) {} }
      }
      #expect(weakProbe != nil, "held by the pending request")
      request.cancel()
      #expect(weakProbe == nil)
      #expect(!request.isPending)
    }
  }

  @Test("a fired delayed perform releases its block and captures")
  func firedDelayedPerformReleasesItsBlock() {
    TestThread.run {
      let runLoop = RunLoop.current
      weak var weakProbe: DeinitProbe?
      let ran = Box(false)
      do {
        let probe = DeinitProbe()
        weakProbe = probe
        runLoop.perform(afterDelay: .zero, inModes: [.default]) { withExtendedLifetime(probe) { ran.value = true } }
      }
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(ran.value)
      #expect(weakProbe == nil)
    }
  }

  @Test("a delayed perform left by an ended thread is released when it ends, and its capture may make requests")
  func delayedPerformOfAnEndedThreadIsReleasedWhenItEnds() {
    let log = Recorder<String>()
    TestThread.run {
      let probe = DeinitProbe {
        // Makes and cancels a delayed request on another run loop.
        RunLoop.main.perform(afterDelay: .seconds(3_600)) {}.cancel()
        log.append("deinit")
      }
      RunLoop.current.perform(afterDelay: .seconds(3_600)) { withExtendedLifetime(probe) {} }
    }
    #expect(log.snapshot == ["deinit"])
  }

  @Test("a delayed perform whose handle is kept is withdrawn when its loop's thread ends: not pending, block released")
  func keptDelayedPerformOfAnEndedThreadIsWithdrawn() {
    let log = Recorder<String>()
    let handle = Box<DelayedPerform?>(nil)
    TestThread.run {
      let probe = DeinitProbe { log.append("deinit") }
      handle.value = RunLoop.current.perform(afterDelay: .seconds(3_600)) { withExtendedLifetime(probe) {} }
      #expect(handle.value?.isPending == true)
    }
    #expect(handle.value?.isPending == false, "a request whose loop's thread ended still says it is pending")
    #expect(log.snapshot == ["deinit"], "the withdrawn request's block is still held by its handle")
    handle.value?.cancel()
  }
}
