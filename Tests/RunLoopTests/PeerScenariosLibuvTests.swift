import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

// libuv's loop tests (test-async.c, test-async-null-cb.c, test-loop-stop.c, test-timer.c,
// test-embed.c) translated to RunLoop: `uv_async_t` is a `RunLoopSource` signalled with
// `signalAndWakeUp()` (or a bare `wakeUp()` for the null callback), `uv_prepare_t` and
// `uv_check_t` are observers, `uv_stop` is `stop()`, `uv_timer_t` is `RunLoopTimer`,
// `UV_RUN_NOWAIT` is a run with a zero timeout, and `uv_backend_fd` with
// `uv_run(UV_RUN_NOWAIT)` is `pollDescriptor` with `runDueWork()`.

@Suite("libuv scenarios: async wake-ups", .timeLimit(.minutes(3)))
struct PeerLibuvAsyncTests {
  @Test(
    "async: many sends from several threads coalesce, and a callback runs after the last send",
    arguments: [1, 4])
  func sendsCoalesceAndNoneIsLost(senders: Int) {
    let perSender = isRunningUnderSanitizer ? 2_000 : 20_000
    let total = senders * perSender
    let sent = AtomicInteger<Int>(0)
    let callbacks = AtomicInteger<Int>(0)
    let ready = Semaphore()
    let sourceBox = Box<RunLoopSource?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let loop = RunLoop.current
      let source = RunLoopSource {
        callbacks.increment(ordering: .relaxed)
        // Every send happened before its signal; a callback after the last one sees them all.
        if sent.load(ordering: .acquiring) == total { loop.stop() }
      }
      loop.add(source, forMode: .default)
      sourceBox.value = source
      ready.signal()
      result.value = loop.run(mode: .default, timeout: .seconds(30))
      source.invalidate()
    }
    ready.wait()
    let source = sourceBox.value!
    runThreads(senders) { _ in
      for _ in 0..<perSender {
        sent.increment(ordering: .releasing)
        source.signalAndWakeUp()
      }
    }
    loopThread.join()
    #expect(result.value == .stopped)
    let count = callbacks.load(ordering: .relaxed)
    #expect(count >= 1 && count <= total)
  }

  @Test("async: a send made while the callback runs causes another callback")
  func aSendDuringTheCallbackIsNotSwallowed() {
    let rounds = isRunningUnderSanitizer ? 50 : 300
    let value = AtomicInteger<Int>(0)
    let callbackStarted = Semaphore()
    let sentAgain = Semaphore()
    let handledSecond = Semaphore()
    let ready = Semaphore()
    let sourceBox = Box<RunLoopSource?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let loop = RunLoop.current
      let source = RunLoopSource {
        let seen = value.load(ordering: .acquiring)
        if seen % 2 == 1 {
          // The first send of a round: the second is made while this callback runs.
          callbackStarted.signal()
          sentAgain.wait()
        } else if seen > 0 {
          handledSecond.signal()
          if seen == 2 * rounds { loop.stop() }
        }
      }
      loop.add(source, forMode: .default)
      sourceBox.value = source
      ready.signal()
      result.value = loop.run(mode: .default, timeout: .seconds(30))
      source.invalidate()
    }
    ready.wait()
    let source = sourceBox.value!
    var lost = 0
    for _ in 0..<rounds {
      value.increment(ordering: .releasing)
      source.signalAndWakeUp()
      callbackStarted.wait()
      value.increment(ordering: .releasing)
      source.signalAndWakeUp()
      sentAgain.signal()
      // Only a callback after the second send signals this.
      if !handledSecond.wait(timeout: .seconds(10)) {
        lost += 1
        break
      }
    }
    if lost > 0 { source.invalidate() }
    loopThread.join()
    #expect(lost == 0)
    #expect(result.value == .stopped)
  }

  @Test("async: a send before the loop runs is handled in its first pass")
  func aSendBeforeTheRunIsHandled() {
    TestThread.run {
      let loop = RunLoop.current
      let handled = AtomicInteger<Int>(0)
      let source = RunLoopSource { handled.increment(ordering: .relaxed) }
      loop.add(source, forMode: .default)
      TestThread.run { source.signalAndWakeUp() }
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(handled.load(ordering: .relaxed) == 1)
      source.invalidate()
    }
  }

  @Test("async: a source that signals itself from its callback fires again in a later pass")
  func aSendFromTheCallbackItselfIsNotLost() {
    TestThread.run {
      let loop = RunLoop.current
      let handled = AtomicInteger<Int>(0)
      let box = Box<RunLoopSource?>(nil)
      let source = RunLoopSource {
        if handled.increment(ordering: .relaxed) == 5 { loop.stop() } else { box.value!.signal() }
      }
      box.value = source
      loop.add(source, forMode: .default)
      source.signal()
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(handled.load(ordering: .relaxed) == 5)
      box.value = nil
      source.invalidate()
    }
  }

  @Test("async close: a signalled source invalidated by an earlier callback of the same pass does not fire")
  func invalidatedByAnEarlierCallbackDoesNotFire() {
    TestThread.run {
      let loop = RunLoop.current
      let fired = Recorder<String>()
      let box = Box<RunLoopSource?>(nil)
      let first = RunLoopSource(order: 0) {
        fired.append("first")
        box.value!.invalidate()
      }
      let second = RunLoopSource(order: 1) { fired.append("second") }
      box.value = second
      loop.add(first, forMode: .default)
      loop.add(second, forMode: .default)
      let keepAlive = RunLoopTimer(after: .seconds(3600)) { _ in }
      loop.add(keepAlive, forMode: .default)
      first.signal()
      second.signal()
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(fired.snapshot == ["first"])
      box.value = nil
      first.invalidate()
      keepAlive.invalidate()
    }
  }

  @Test("async_null_cb: a bare wake-up from another thread wakes a sleeping loop")
  func bareWakeUpWakesTheLoop() {
    let loopBox = Box<RunLoop?>(nil)
    let ready = Semaphore()
    let result = Box<RunLoopRunResult?>(nil)
    let fired = AtomicBool(false)
    let loopThread = TestThread.spawn {
      let loop = RunLoop.current
      // Keeps the mode from being empty; never fires within the run.
      let far = RunLoopTimer(after: .seconds(3600)) { _ in fired.store(true, ordering: .relaxed) }
      loop.add(far, forMode: .default)
      let woke = RunLoopObserver(activities: .afterWaiting) { _, _ in loop.stop() }
      loop.add(woke, forMode: .default)
      loopBox.value = loop
      ready.signal()
      result.value = loop.run(mode: .default, timeout: .seconds(30))
      far.invalidate()
      woke.invalidate()
    }
    ready.wait()
    let loop = loopBox.value!
    waitUntil { loop.isWaiting }
    loop.wakeUp()
    loopThread.join()
    #expect(result.value == .stopped)
    #expect(!fired.load(ordering: .relaxed))
  }
}

@Suite("libuv scenarios: stopping a loop", .timeLimit(.minutes(3)))
struct PeerLibuvLoopStopTests {
  @Test("loop_stop: stop from a timer ends the run after that pass; later runs continue where it left off")
  func stopFromATimer() {
    TestThread.run {
      let loop = RunLoop.current
      let passes = AtomicInteger<Int>(0)
      let fired = AtomicInteger<Int>(0)
      let prepare = RunLoopObserver(activities: .beforeTimers) { _, _ in passes.increment(ordering: .relaxed) }
      loop.add(prepare, forMode: .default)
      let timer = RunLoopTimer(after: .milliseconds(5), interval: .milliseconds(5)) { timer in
        let count = fired.increment(ordering: .relaxed)
        if count == 1 { loop.stop() }
        if count == 10 { timer.invalidate() }
      }
      loop.add(timer, forMode: .default)

      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(fired.load(ordering: .relaxed) == 1)
      let passesAfterStop = passes.load(ordering: .relaxed)

      // UV_RUN_NOWAIT: one pass, the stop is not remembered.
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(passes.load(ordering: .relaxed) > passesAfterStop)

      // Runs until the timer invalidates itself and the mode has nothing left to wait for.
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fired.load(ordering: .relaxed) == 10)
      prepare.invalidate()
    }
  }

  @Test(
    "loop_stop_before_run: a stop while the loop is not running does not end a later run (Core Foundation's rule, unlike libuv)"
  )
  func stopBeforeRun() {
    TestThread.run {
      let loop = RunLoop.current
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
      loop.add(timer, forMode: .default)
      loop.stop()
      #expect(loop.run(mode: .default, timeout: .milliseconds(10)) == .timedOut)
      timer.invalidate()
    }
  }

  @Test("a stop from another thread ends a sleeping run at once")
  func stopFromAnotherThread() {
    let loopBox = Box<RunLoop?>(nil)
    let ready = Semaphore()
    let result = Box<RunLoopRunResult?>(nil)
    let loopThread = TestThread.spawn {
      let loop = RunLoop.current
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
      loop.add(timer, forMode: .default)
      loopBox.value = loop
      ready.signal()
      result.value = loop.run(mode: .default, timeout: .seconds(30))
      timer.invalidate()
    }
    ready.wait()
    waitUntil { loopBox.value!.isWaiting }
    loopBox.value!.stop()
    loopThread.join()
    #expect(result.value == .stopped)
  }
}

@Suite("libuv scenarios: timers", .timeLimit(.minutes(3)))
struct PeerLibuvTimerTests {
  @Test("timer: one-shot timers fire once each, a repeating one until it stops itself, a stopped one never; none early")
  func basicTimers() {
    TestThread.run {
      let loop = RunLoop.current
      let start = MonotonicInstant.now
      let onceFired = AtomicInteger<Int>(0)
      let early = AtomicInteger<Int>(0)
      for index in 0..<10 {
        let due = start + .milliseconds(3 * index)
        loop.add(
          RunLoopTimer(fireAt: due) { _ in
            onceFired.increment(ordering: .relaxed)
            if MonotonicInstant.now < due { early.increment(ordering: .relaxed) }
          }, forMode: .default)
      }
      let repeatFired = AtomicInteger<Int>(0)
      let repeating = RunLoopTimer(after: .milliseconds(5), interval: .milliseconds(5)) { timer in
        if repeatFired.increment(ordering: .relaxed) == 5 { timer.invalidate() }
      }
      loop.add(repeating, forMode: .default)
      let neverFired = AtomicBool(false)
      let never = RunLoopTimer(after: .milliseconds(5), interval: .milliseconds(5)) { _ in
        neverFired.store(true, ordering: .relaxed)
      }
      loop.add(never, forMode: .default)
      never.invalidate()
      #expect(!never.isValid)

      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(onceFired.load(ordering: .relaxed) == 10)
      #expect(repeatFired.load(ordering: .relaxed) == 5)
      #expect(!neverFired.load(ordering: .relaxed))
      #expect(early.load(ordering: .relaxed) == 0)
      #expect(MonotonicInstant.now - start >= .milliseconds(27))
    }
  }

  @Test("timer_order: timers due at the same instant fire in the order they were started; restarting reorders them")
  func equalFireDatesFireInStartOrder() {
    TestThread.run {
      let loop = RunLoop.current
      let order = Recorder<String>()
      let due = MonotonicInstant.now
      let first = RunLoopTimer(fireAt: due) { _ in order.append("first") }
      let second = RunLoopTimer(fireAt: due) { _ in order.append("second") }
      loop.add(first, forMode: .default)
      loop.add(second, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(order.snapshot == ["first", "second"])

      // Started again in the other order (libuv restarts them; here: re-armed and added).
      let later = MonotonicInstant.now
      second.rearm(fireAt: later) { _ in order.append("second") }
      first.rearm(fireAt: later) { _ in order.append("first") }
      loop.add(second, forMode: .default)
      loop.add(first, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(order.snapshot == ["first", "second", "second", "first"])

      // Re-armed while scheduled: the one re-armed last goes last.
      let fires = Recorder<String>()
      let a = RunLoopTimer(fireAt: .distantFuture) { _ in fires.append("a") }
      let b = RunLoopTimer(fireAt: .distantFuture) { _ in fires.append("b") }
      loop.add(a, forMode: .default)
      loop.add(b, forMode: .default)
      let same = MonotonicInstant.now
      b.setNextFireDate(same)
      a.setNextFireDate(same)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fires.snapshot == ["b", "a"])
    }
  }

  @Test("timer_start_twice: re-arming a scheduled one-shot timer before it fires makes it fire once")
  func startTwice() {
    TestThread.run {
      let loop = RunLoop.current
      let fired = AtomicInteger<Int>(0)
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in fired.increment(ordering: .relaxed) }
      loop.add(timer, forMode: .default)
      timer.setNextFireDate(.after(.milliseconds(2)))
      timer.setNextFireDate(.after(.milliseconds(4)))
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fired.load(ordering: .relaxed) == 1)
      #expect(!timer.isValid)
    }
  }

  @Test("timer_again: moving a repeating timer's next fire date restarts its period from there")
  func again() {
    TestThread.run {
      let loop = RunLoop.current
      let interval = Duration.milliseconds(5)
      let firings = Recorder<(scheduled: MonotonicInstant, at: MonotonicInstant)>()
      let restartedAt = Box<MonotonicInstant?>(nil)
      let timer = RunLoopTimer(after: interval, interval: interval) { timer in
        firings.append((timer.scheduledFireDate!, .now))
        if firings.count == 2 {
          // uv_timer_again: the next firing is a whole period from now.
          let restart = MonotonicInstant.after(interval)
          restartedAt.value = restart
          timer.setNextFireDate(restart)
        }
        if firings.count == 4 { timer.invalidate() }
      }
      loop.add(timer, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      let all = firings.snapshot
      #expect(all.count == 4)
      let restart = try! #require(restartedAt.value)
      #expect(all[2].scheduled == restart)
      #expect(all[2].at >= restart)
      // Back on a grid that starts at the restart.
      #expect(all[3].scheduled > restart)
      #expect(wholeNanoseconds(restart.duration(to: all[3].scheduled)) % 5_000_000 == 0)
    }
  }

  @Test("timer_no_double_call: a repeating timer that missed several periods fires once in a pass")
  func missedPeriodsFireOnce() {
    TestThread.run {
      let loop = RunLoop.current
      let fired = AtomicInteger<Int>(0)
      let interval = Duration.milliseconds(10)
      let start = MonotonicInstant.now - .milliseconds(55)
      let timer = RunLoopTimer(fireAt: start, interval: interval) { _ in fired.increment(ordering: .relaxed) }
      loop.add(timer, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(fired.load(ordering: .relaxed) == 1)
      let next = timer.nextFireDate
      #expect(next > start + .milliseconds(55))
      #expect(next <= .now + interval)
      #expect(wholeNanoseconds(start.duration(to: next)) % 10_000_000 == 0)
      timer.invalidate()
    }
  }

  @Test("timer started in its own callback with a zero timeout fires in the next pass, not again in the same one")
  func restartedInCallbackFiresInTheNextPass() {
    TestThread.run {
      let loop = RunLoop.current
      let fired = AtomicInteger<Int>(0)
      @Sendable func fire(_ timer: RunLoopTimer) {
        if fired.increment(ordering: .relaxed) < 3 { timer.rearm(fireAt: .now, fire) }
      }
      let timer = RunLoopTimer(fireAt: .now, fire)
      loop.add(timer, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(fired.load(ordering: .relaxed) == 1)
      #expect(timer.isValid)
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(fired.load(ordering: .relaxed) == 2)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fired.load(ordering: .relaxed) == 3)
      #expect(!timer.isValid)
    }
  }

  @Test("timer_run_once: a run of one pass fires a timer already due")
  func onePassFiresADueTimer() {
    TestThread.run {
      let loop = RunLoop.current
      let fired = AtomicInteger<Int>(0)
      loop.add(RunLoopTimer(fireAt: .now) { _ in fired.increment(ordering: .relaxed) }, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(fired.load(ordering: .relaxed) == 1)
      // Started again with a short timeout: a run that may wait fires it.
      loop.add(RunLoopTimer(after: .milliseconds(1)) { _ in fired.increment(ordering: .relaxed) }, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: false) == .finished)
      #expect(fired.load(ordering: .relaxed) == 2)
    }
  }

  @Test("a timer stopped or moved by another timer's callback in the same pass does not fire in that pass")
  func stoppedByAnotherCallbackDoesNotFire() {
    TestThread.run {
      let loop = RunLoop.current
      let order = Recorder<String>()
      let due = MonotonicInstant.now
      let box = Box<[RunLoopTimer]>([])
      let first = RunLoopTimer(fireAt: due) { _ in
        order.append("first")
        box.value[0].invalidate()
        box.value[1].setNextFireDate(.after(.seconds(3600)))
        loop.remove(box.value[2], forMode: .default)
      }
      let stopped = RunLoopTimer(fireAt: due) { _ in order.append("stopped") }
      let moved = RunLoopTimer(fireAt: due) { _ in order.append("moved") }
      let removed = RunLoopTimer(fireAt: due) { _ in order.append("removed") }
      box.value = [stopped, moved, removed]
      for timer in [first, stopped, moved, removed] { loop.add(timer, forMode: .default) }
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(order.snapshot == ["first"])
      #expect(loop.run(mode: .default, timeout: .milliseconds(5)) == .timedOut)
      #expect(order.snapshot == ["first"])
      moved.invalidate()
      removed.invalidate()
      box.value = []
    }
  }

  @Test("timer_huge_timeout: timers due in the far future never fire and do not keep a short timer from firing")
  func hugeTimeouts() {
    TestThread.run {
      let loop = RunLoop.current
      let hugeFired = AtomicInteger<Int>(0)
      var huge: [RunLoopTimer] = [
        RunLoopTimer(fireAt: .distantFuture) { _ in hugeFired.increment(ordering: .relaxed) },
        RunLoopTimer(after: .seconds(Int64.max)) { _ in hugeFired.increment(ordering: .relaxed) },
        RunLoopTimer(after: .seconds(Int64.max / 2), interval: .seconds(Int64.max)) { _ in
          hugeFired.increment(ordering: .relaxed)
        },
      ]
      huge.append(
        RunLoopTimer(seconds: 1e300, intervalSeconds: 1e300) { _ in hugeFired.increment(ordering: .relaxed) }!)
      for timer in huge { loop.add(timer, forMode: .default) }
      let hugeTimers = huge
      let tinyFired = AtomicInteger<Int>(0)
      loop.add(
        RunLoopTimer(after: .milliseconds(2)) { _ in
          tinyFired.increment(ordering: .relaxed)
          for timer in hugeTimers { timer.invalidate() }
        }, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(tinyFired.load(ordering: .relaxed) == 1)
      #expect(hugeFired.load(ordering: .relaxed) == 0)
    }
  }

  @Test("timer_huge_repeat: a timer with a huge repeat fires once while a tiny repeating timer keeps firing")
  func hugeRepeat() {
    TestThread.run {
      let loop = RunLoop.current
      let calls = Recorder<String>()
      let hugeRepeat = RunLoopTimer(after: .milliseconds(1), interval: .seconds(Int64.max)) { _ in calls.append("huge")
      }
      let tiny = RunLoopTimer(after: .milliseconds(2), interval: .milliseconds(2)) { timer in
        calls.append("tiny")
        if calls.count == 10 {
          timer.invalidate()
          hugeRepeat.invalidate()
        }
      }
      loop.add(hugeRepeat, forMode: .default)
      loop.add(tiny, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(calls.snapshot == ["huge"] + Array(repeating: "tiny", count: 9))
    }
  }

  @Test("timer_from_check: a due timer added by a before-waiting observer fires without waiting for the run's deadline")
  func timerAddedBeforeWaitingFires() {
    TestThread.run {
      let loop = RunLoop.current
      let far = RunLoopTimer(after: .seconds(3600)) { _ in }
      loop.add(far, forMode: .default)
      let fired = AtomicBool(false)
      let check = RunLoopObserver(activities: .beforeWaiting, repeats: false) { _, _ in
        loop.add(
          RunLoopTimer(after: .milliseconds(1)) { _ in
            fired.store(true, ordering: .relaxed)
            loop.stop()
          }, forMode: .default)
      }
      loop.add(check, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      #expect(fired.load(ordering: .relaxed))
      far.invalidate()
    }
  }
}

/// The embedding thread of libuv's test-embed.c: polls the run loop's descriptor each time
/// it is told to, and reports each time it became readable.
private final class EmbedPoller: @unchecked Sendable {
  // @unchecked: `closed` is an atomic; the semaphores and the descriptor are thread-safe.
  let descriptor: Int32
  let pollAgain = Semaphore()
  let readable = Semaphore()
  let closed = AtomicBool(false)
  /// Times a poll gave up (the descriptor never became readable within the limit).
  let gaveUp = AtomicInteger<Int>(0)

  init(descriptor: Int32) { self.descriptor = descriptor }

  func run() {
    while true {
      pollAgain.wait()
      if closed.load(ordering: .acquiring) { return }
      var watched = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
      // No timeout of the loop's own is needed (the descriptor includes its timerfd); the
      // limit only turns a lost wake-up into a failure instead of a hang.
      var result: Int32
      repeat { result = poll(&watched, 1, 10_000) } while result == -1 && errno == EINTR
      if result == 0 { gaveUp.increment(ordering: .relaxed) }
      readable.signal()
    }
  }
}

@Suite("libuv scenarios: embedding a loop in another's poll", .timeLimit(.minutes(3)))
struct PeerLibuvEmbedTests {
  /// Runs the loop of the calling thread the way libuv's external loop does: another thread
  /// polls its descriptor; each time it is readable, one `runDueWork()` here, until
  /// `isDone()`. `between` runs on this thread once, after the first call, while the poller
  /// may already be waiting. Returns the poller's give-ups.
  func runEmbedded(between: () -> Void = {}, isDone: () -> Bool) -> Int {
    let loop = RunLoop.current
    let poller = EmbedPoller(descriptor: loop.pollDescriptor)
    let pollerThread = TestThread.spawn { poller.run() }
    _ = loop.runDueWork()  // once, to give things a chance to set up
    poller.pollAgain.signal()
    between()
    var rounds = 0
    while !isDone() && rounds < 1_000 && poller.gaveUp.load(ordering: .relaxed) == 0 {
      poller.readable.wait()
      _ = loop.runDueWork()
      poller.pollAgain.signal()
      rounds += 1
    }
    // The poller may be polling again: the wake-up ends its poll, and it sees `closed`.
    poller.closed.store(true, ordering: .releasing)
    poller.pollAgain.signal()
    loop.wakeUp()
    pollerThread.join()
    return poller.gaveUp.load(ordering: .relaxed)
  }

  @Test("embed: a timer of the embedded loop fires through the foreign poll of its descriptor")
  func embeddedTimerFires() {
    TestThread.run {
      let loop = RunLoop.current
      // A source keeps the mode from being empty (libuv's dummy async).
      let dummy = RunLoopSource {}
      loop.add(dummy, forMode: .default)
      let fired = AtomicInteger<Int>(0)
      let due = MonotonicInstant.after(.milliseconds(25))
      let timer = RunLoopTimer(fireAt: due) { _ in fired.increment(ordering: .relaxed) }
      loop.add(timer, forMode: .default)
      let gaveUp = runEmbedded { fired.load(ordering: .relaxed) > 0 }
      #expect(gaveUp == 0)
      #expect(fired.load(ordering: .relaxed) == 1)
      #expect(MonotonicInstant.now >= due)
      dummy.invalidate()
    }
  }

  @Test(
    "embed_with_external_timer: a timer the loop's own thread adds while the descriptor is being polled still fires")
  func timerAddedByTheOwnerWhileParkedFires() {
    TestThread.run {
      let loop = RunLoop.current
      let dummy = RunLoopSource {}
      loop.add(dummy, forMode: .default)
      let fired = AtomicInteger<Int>(0)
      let gaveUp = runEmbedded(
        between: {
          // The external loop's timer callback, on the loop's own thread, between two calls.
          loop.add(
            RunLoopTimer(after: .milliseconds(25)) { _ in fired.increment(ordering: .relaxed) }, forMode: .default)
        },
        isDone: { fired.load(ordering: .relaxed) > 0 })
      #expect(gaveUp == 0)
      #expect(fired.load(ordering: .relaxed) == 1)
      dummy.invalidate()
    }
  }

  @Test("embed: a stop between two calls does nothing (no run is active) and leaves the descriptor unreadable")
  func aStopBetweenCallsDoesNothing() {
    TestThread.run {
      let loop = RunLoop.current
      let dummy = RunLoopSource {}
      loop.add(dummy, forMode: .default)
      _ = loop.runDueWork()
      TestThread.run { loop.stop() }
      var watched = pollfd(fd: loop.pollDescriptor, events: Int16(POLLIN), revents: 0)
      #expect(poll(&watched, 1, 20) == 0)
      #expect(loop.runDueWork().result == .timedOut)
      dummy.invalidate()
    }
  }

  @Test("embed: wake-ups from another thread make the descriptor readable each time, and each signalled source runs")
  func wakeUpsReachTheForeignPoll() {
    TestThread.run {
      let loop = RunLoop.current
      let handled = AtomicInteger<Int>(0)
      let source = RunLoopSource { handled.increment(ordering: .relaxed) }
      loop.add(source, forMode: .default)
      let rounds = 50
      let sender = Box<TestThread?>(nil)
      let gaveUp = runEmbedded(
        between: {
          sender.value = TestThread.spawn {
            for round in 1...rounds {
              source.signalAndWakeUp()
              // The next send once this one is handled: each must reach the poll.
              waitUntil { handled.load(ordering: .relaxed) >= round }
            }
          }
        },
        isDone: { handled.load(ordering: .relaxed) >= rounds })
      sender.value!.join()
      #expect(gaveUp == 0)
      #expect(handled.load(ordering: .relaxed) == rounds)
      source.invalidate()
    }
  }
}

@Suite("libuv scenarios: thread pool with several event loops", .timeLimit(.minutes(3)))
struct PeerLibuvThreadPoolLoopsTests {
  @Test(
    "threadpool_multiple_event_loops: work from several loop threads runs on the pool and each completion runs on its own loop's thread"
  )
  func completionsReturnToTheirOwnLoops() async throws {
    var configuration = ThreadPool.Configuration()
    configuration.maximumThreads = 4
    let pool = ThreadPool(name: "uv-loops", configuration: configuration)
    let loops = 8
    let jobsPerLoop = 4
    let wrongThread = AtomicInteger<Int>(0)
    let completed = AtomicInteger<Int>(0)
    let results = Recorder<RunLoopRunResult>()
    // The loop threads are plain threads; this task only polls for their end, so it holds no
    // cooperative thread that the pool's awaiting tasks need. Those tasks run on a group of
    // their own (a task executor), not on the global pool, so tests blocking pool threads
    // meanwhile cannot hold them up.
    let starters = try await RunLoopThreadGroup.start(threadCount: 2, name: "uv-starters")
    let threads = (0..<loops).map { _ in
      TestThread.spawn {
        let loop = RunLoop.current
        let me = Thread.current.id
        let keepAlive = RunLoopSource {}
        loop.add(keepAlive, forMode: .default)
        let done = AtomicInteger<Int>(0)
        for job in 0..<jobsPerLoop {
          Task(executorPreference: starters) {
            let value = try await pool.run { () -> Int in
              if Thread.current.id == me { wrongThread.increment(ordering: .relaxed) }
              return job * 2
            }
            loop.performAndWakeUp {
              if Thread.current.id != me || value != job * 2 { wrongThread.increment(ordering: .relaxed) }
              completed.increment(ordering: .relaxed)
              if done.increment(ordering: .relaxed) == jobsPerLoop { loop.stop() }
            }
          }
        }
        results.append(loop.run(mode: .default, timeout: .seconds(50)))
        keepAlive.invalidate()
      }
    }
    while results.count < loops { try? await Task.sleep(for: .milliseconds(2)) }
    for thread in threads { thread.join() }
    await pool.shutDown()
    await starters.shutDown()
    #expect(results.snapshot == Array(repeating: .stopped, count: loops))
    #expect(completed.load(ordering: .relaxed) == loops * jobsPerLoop)
    #expect(wrongThread.load(ordering: .relaxed) == 0)
  }
}
