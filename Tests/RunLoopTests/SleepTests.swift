import Sync
import TestSupport
import Testing

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

/// How a run loop sleeps: on its futex when it has nothing to wait for but wake-ups, in
/// epoll (with the timerfd) otherwise, and how work that appears during a futex sleep moves
/// it to epoll. Each run here has no deadline, so only the behaviour under test can end it.
@Suite("RunLoop sleeping", .timeLimit(.minutes(3)))
struct SleepTests {
  /// Starts a thread that adds `source` to its run loop and runs it with no deadline until
  /// stopped; returns the thread, the loop (once created) and where the run's result lands.
  private func startLoop(
    with source: RunLoopSource
  ) -> (TestThread, RunLoop, Box<RunLoopRunResult?>) {
    let loopBox = Box<RunLoop?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let thread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(source, forMode: .default)
      loopBox.value = runLoop
      result.value = runLoop.run(mode: .default, before: .distantFuture)
    }
    waitUntil { loopBox.value != nil }
    return (thread, loopBox.value!, result)
  }

  /// Runs `body`, stopping the process with a message naming `what` if it has not returned
  /// after two minutes: a loop that misses its wake-up would otherwise hang the test run
  /// silently (every way to end a run goes through the wake-up under test).
  private func failingIfStuck(_ what: String, _ body: () -> Void) {
    let done = AtomicInteger<UInt32>(0)
    let watchdog = TestThread.spawn {
      let deadline = MonotonicInstant.after(.seconds(120))
      while done.load(ordering: .acquiring) == 0 {
        if !done.wait(whileEqualTo: 0, before: deadline) && done.load(ordering: .acquiring) == 0 {
          fatalError("RunLoop sleeping: \(what) did not end within 120 s: the loop missed its wake-up")
        }
      }
    }
    body()
    done.store(1, ordering: .releasing)
    done.wakeAll()
    watchdog.join()
  }

  /// Whether `runLoop` sleeps right now, and on its futex.
  private func sleepsOnFutex(_ runLoop: RunLoop) -> Bool {
    runLoop.lock.withLock { runLoop.isSleeping && runLoop.sleepsOnFutex }
  }

  @Test("with only sources and no deadline the loop sleeps on its futex, and a wake-up ends the sleep")
  func futexSleepEndsOnWakeUp() {
    let fired = AtomicInteger<Int>(0)
    let source = RunLoopSource(perform: {
      _ = fired.increment(ordering: .relaxed)
      RunLoop.current.stop()
    })
    let (thread, runLoop, result) = startLoop(with: source)
    waitUntil { sleepsOnFutex(runLoop) }
    #expect(runLoop.isWaiting)
    source.signal()
    runLoop.wakeUp()
    failingIfStuck("a futex sleep woken by wakeUp") { thread.join() }
    #expect(fired.load(ordering: .relaxed) == 1)
    #expect(result.value == .stopped)
    source.invalidate()
  }

  @Test("a timer added by another thread during a futex sleep fires, never early")
  func timerAddedDuringFutexSleep() {
    let keepAlive = RunLoopSource(perform: {})
    let (thread, runLoop, result) = startLoop(with: keepAlive)
    waitUntil { sleepsOnFutex(runLoop) }
    let firedAt = Box<MonotonicInstant?>(nil)
    let fireDate = MonotonicInstant.after(.milliseconds(20))
    let timer = RunLoopTimer(fireAt: fireDate) { _ in
      firedAt.value = .now
      RunLoop.current.stop()
    }
    #expect(runLoop.add(timer, forMode: .default))
    // The loop could only see the timer by leaving its futex sleep.
    failingIfStuck("a futex sleep after a timer was added") { thread.join() }
    #expect(result.value == .stopped)
    let fired = firedAt.value
    #expect(fired != nil)
    if let fired { #expect(fired >= fireDate, "a timer never fires before its date") }
    keepAlive.invalidate()
  }

  @Test("a descriptor source added by another thread during a futex sleep is watched")
  func descriptorAddedDuringFutexSleep() {
    let keepAlive = RunLoopSource(perform: {})
    let (thread, runLoop, result) = startLoop(with: keepAlive)
    waitUntil { sleepsOnFutex(runLoop) }
    let pipe = PortsPipe()
    let reports = Recorder<Bool>()
    let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { source, events in
      reports.append(events.contains(.readable))
      source.invalidate()
      RunLoop.current.stop()
    }
    runLoop.add(source, forMode: .default)
    // The loop now sleeps (or is about to) in epoll, where the pipe is watched; the byte is
    // the only thing that can end that sleep.
    failingIfStuck("a futex sleep after a descriptor source was added") {
      waitUntil { runLoop.lock.withLock { runLoop.isSleeping && !runLoop.sleepsOnFutex } }
      pipe.write(7)
      thread.join()
    }
    #expect(result.value == .stopped)
    #expect(reports.snapshot == [true])
    keepAlive.invalidate()
  }

  @Test("a loop with a timer pending sleeps in epoll with the timerfd, not on its futex")
  func timerPendingSleepsInEpoll() {
    let runLoop = RunLoop.current
    let observed = Box<Bool?>(nil)
    let timer = RunLoopTimer(after: .seconds(600)) { _ in }
    runLoop.add(timer, forMode: .default)
    let helper = TestThread.spawn {
      waitUntil { runLoop.isWaiting }
      observed.value = runLoop.lock.withLock { runLoop.sleepsOnFutex }
      // Leave the mode empty and wake the loop: the run finishes.
      timer.invalidate()
      runLoop.wakeUp()
    }
    #expect(runLoop.run(mode: .default, before: .distantFuture) == .finished)
    helper.join()
    #expect(observed.value == false)
  }
}
