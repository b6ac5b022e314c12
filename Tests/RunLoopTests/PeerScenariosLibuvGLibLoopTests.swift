import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

// More of libuv's loop tests (test-poll.c, test-idle.c, test-ref.c, test-loop-alive.c,
// test-loop-stop.c, test-loop-handles.c, test-run-nowait.c, test-run-once.c, test-timer.c,
// test-async.c, test-embed.c, test-close-order.c) and GLib's (glib/tests/mainloop.c,
// timeout.c), translated to RunLoop; the scenarios PeerScenariosLibuvTests.swift already
// covers are not repeated. Mapping: `uv_poll_t` / `g_unix_fd_add` is a
// `FileDescriptorSource`; an idle handle / idle source is a `RunLoopSource` that signals
// itself again from its callback; a `GSource` priority is a `RunLoopSource` order (lower
// first); `g_source_remove` from its own callback is `invalidate()` there;
// `g_main_context_iteration(ctx, FALSE)` / `UV_RUN_NOWAIT` is a run with a zero timeout;
// `g_main_context_wakeup` is `wakeUp()`; `g_source_set_ready_time` is `setNextFireDate(_:)`;
// `uv_loop_alive` / an unreferenced handle is a run returning `finished`.

/// A socket pair whose ends close on deinit (unless closed before).
private final class SocketPair: @unchecked Sendable {
  let first: Int32
  let second: Int32
  private let closedFirst = AtomicInteger<Int>(0)
  private let closedSecond = AtomicInteger<Int>(0)
  init() {
    var ends: [Int32] = [-1, -1]
    precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &ends) == 0)
    for end in ends { precondition(fcntl(end, F_SETFL, O_NONBLOCK) == 0) }
    first = ends[0]
    second = ends[1]
  }
  func closeSecond() {
    if closedSecond.exchange(1, ordering: .relaxed) == 0 { precondition(close(second) == 0) }
  }
  func closeFirst() {
    if closedFirst.exchange(1, ordering: .relaxed) == 0 { precondition(close(first) == 0) }
  }
  deinit {
    closeFirst()
    closeSecond()
  }
}

@Suite("libuv/GLib scenarios: descriptor readiness", .timeLimit(.minutes(3)))
struct PeerLibuvGLibPollTests {
  @Test("poll: a watched socket reports readable with the peer's data, then hang-up when the peer closes")
  func readableThenHangUp() {
    TestThread.run {
      let loop = RunLoop.current
      let pair = SocketPair()
      let events = Recorder<FileDescriptorSource.Events>()
      let received = Box<Int>(0)
      let source = FileDescriptorSource(descriptor: pair.first, events: .readable) { source, ready in
        events.append(ready)
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { read(pair.first, $0.baseAddress!, 64) }
        if count > 0 { received.value += count }
        // libuv's poll test closes the handle on EOF / UV_DISCONNECT.
        if count == 0 || ready.contains(.hangUp) {
          source.invalidate()
          pair.closeFirst()
        }
      }
      loop.add(source, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut, "nothing readable yet")
      #expect(events.count == 0)
      var bytes: [UInt8] = [1, 2, 3]
      #expect(write(pair.second, &bytes, 3) == 3)
      #expect(loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(received.value == 3)
      #expect(events.snapshot.first.map { $0.contains(.readable) } == true)
      pair.closeSecond()
      // The hang-up is reported; the handler invalidates the source and the mode empties.
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(events.snapshot.last.map { $0.contains(.hangUp) || $0.contains(.readable) } == true)
      #expect(!source.isValid)
    }
  }

  @Test("poll: a pipe's write end reports an error once the read end is closed")
  func writeEndReportsErrorAfterReaderCloses() {
    TestThread.run {
      let loop = RunLoop.current
      var ends: [Int32] = [-1, -1]
      #expect(pipe(&ends) == 0)
      let seen = Recorder<FileDescriptorSource.Events>()
      let source = FileDescriptorSource(descriptor: ends[1], events: .writable) { source, ready in
        seen.append(ready)
        if ready.contains(.error) { source.invalidate() }
      }
      // Writable at once: the first pass reports it.
      loop.add(source, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(seen.snapshot.first == .writable)
      #expect(close(ends[0]) == 0)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(seen.snapshot.last.map { $0.contains(.error) } == true)
      #expect(close(ends[1]) == 0)
    }
  }

  @Test("g_unix_fd_add: a writable descriptor fires; removed from its callback, the loop has nothing left")
  func writableSourceRemovedFromItsCallback() {
    TestThread.run {
      let loop = RunLoop.current
      let pair = SocketPair()
      let calls = AtomicInteger<Int>(0)
      let source = FileDescriptorSource(descriptor: pair.first, events: .writable) { source, ready in
        calls.increment(ordering: .relaxed)
        #expect(ready.contains(.writable))
        source.invalidate()
      }
      loop.add(source, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(calls.load(ordering: .relaxed) == 1)
    }
  }

  @Test("poll_duplex: a source watching both directions gets readable and writable together; disabling one stops it")
  func duplexThenDisable() {
    TestThread.run {
      let loop = RunLoop.current
      let pair = SocketPair()
      let seen = Recorder<FileDescriptorSource.Events>()
      let source = FileDescriptorSource(descriptor: pair.first, events: [.readable, .writable]) { _, ready in
        seen.append(ready)
      }
      var byte: UInt8 = 7
      #expect(write(pair.second, &byte, 1) == 1)
      loop.add(source, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(seen.snapshot.first == [.readable, .writable])
      // Drain and stop caring about writability: nothing is reported any more.
      #expect(read(pair.first, &byte, 1) == 1)
      source.disable(.writable)
      let before = seen.count
      for _ in 0..<5 { #expect(loop.run(mode: .default, timeout: .milliseconds(2)) == .timedOut) }
      #expect(seen.count == before, "neither readable nor (disabled) writable")
      // Enabled again: reported again.
      source.enable(.writable)
      #expect(loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(seen.snapshot.last == .writable)
      source.invalidate()
    }
  }

  @Test(
    "poll_nested_epoll: an epoll descriptor (another loop's, handed to its poll descriptor) is watched and reported")
  func nestedEpollDescriptor() {
    let innerBox = Box<RunLoop?>(nil)
    let parked = Semaphore()
    let finish = Semaphore()
    let inner = TestThread.spawn {
      let loop = RunLoop.current
      let keepAlive = RunLoopTimer(fireAt: .distantFuture) { _ in }
      loop.add(keepAlive, forMode: .default)
      _ = loop.runDueWork()
      innerBox.value = loop
      parked.signal()
      finish.wait()
      keepAlive.invalidate()
    }
    parked.wait()
    let innerLoop = innerBox.value!
    TestThread.run {
      let loop = RunLoop.current
      let calls = AtomicInteger<Int>(0)
      let source = FileDescriptorSource(descriptor: innerLoop.pollDescriptor, events: .readable) { source, ready in
        #expect(ready.contains(.readable))
        calls.increment(ordering: .relaxed)
        // Level-triggered and not ours to drain: stop watching.
        source.disable(.readable)
      }
      loop.add(source, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .milliseconds(5)) == .timedOut)
      #expect(calls.load(ordering: .relaxed) == 0)
      innerLoop.wakeUp()
      #expect(loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(calls.load(ordering: .relaxed) == 1)
      source.invalidate()
    }
    innerBox.value = nil
    finish.signal()
    inner.join()
  }

  @Test(
    "poll: a ready descriptor source invalidated by another source's callback in the same pass does not fire")
  func closedByAnEarlierCallbackOfThePass() {
    TestThread.run {
      let loop = RunLoop.current
      let first = PortsPipe()
      let second = PortsPipe()
      let fired = Recorder<Int>()
      let secondSource = Box<FileDescriptorSource?>(nil)
      let one = FileDescriptorSource(descriptor: first.readEnd, events: .readable) { _, _ in
        fired.append(1)
        _ = first.readAll()
        secondSource.value?.invalidate()
      }
      let two = FileDescriptorSource(descriptor: second.readEnd, events: .readable) { _, _ in
        fired.append(2)
        _ = second.readAll()
      }
      secondSource.value = two
      loop.add(one, forMode: .default)
      loop.add(two, forMode: .default)
      first.write(1)
      second.write(1)
      let giveUp = MonotonicInstant.after(.seconds(30))
      while fired.count == 0 && !giveUp.hasPassed { _ = loop.run(mode: .default, timeout: .milliseconds(10)) }
      for _ in 0..<3 { _ = loop.run(mode: .default, timeout: .milliseconds(1)) }
      #expect(fired.snapshot == [1])
      one.invalidate()
    }
  }
}

@Suite("libuv/GLib scenarios: idle, liveness and one-pass runs", .timeLimit(.minutes(3)))
struct PeerLibuvGLibLivenessTests {
  @Test("idle_starvation: a source that is always ready does not keep a timer from firing")
  func alwaysReadySourceDoesNotStarveTimers() {
    TestThread.run {
      let loop = RunLoop.current
      let idleCalls = AtomicInteger<Int>(0)
      let idleBox = Box<RunLoopSource?>(nil)
      let idle = RunLoopSource {
        idleCalls.increment(ordering: .relaxed)
        idleBox.value?.signal()
      }
      idleBox.value = idle
      let timerFired = AtomicInteger<Int>(0)
      let start = MonotonicInstant.now
      let timer = RunLoopTimer(after: .milliseconds(20)) { _ in
        timerFired.increment(ordering: .relaxed)
        idle.invalidate()
      }
      loop.add(idle, forMode: .default)
      loop.add(timer, forMode: .default)
      idle.signal()
      // Both handles close in the timer's callback: the loop has nothing left.
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(MonotonicInstant.now - start >= .milliseconds(20))
      #expect(timerFired.load(ordering: .relaxed) == 1)
      #expect(idleCalls.load(ordering: .relaxed) > 1)
      idleBox.value = nil
    }
  }

  @Test("idle: an idle callback runs once per pass while a run with returnAfterSourceHandled returns after each")
  func idleRunOnce() {
    TestThread.run {
      let loop = RunLoop.current
      let calls = AtomicInteger<Int>(0)
      let idleBox = Box<RunLoopSource?>(nil)
      let idle = RunLoopSource {
        calls.increment(ordering: .relaxed)
        idleBox.value?.signal()
      }
      idleBox.value = idle
      loop.add(idle, forMode: .default)
      idle.signal()
      // UV_RUN_ONCE with an active idle handle: one callback per run.
      for round in 1...5 {
        #expect(loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
        #expect(calls.load(ordering: .relaxed) == round)
      }
      idle.invalidate()
      idleBox.value = nil
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
    }
  }

  @Test("loop_alive / ref: a loop with only observers, or nothing, is not alive: the run returns finished at once")
  func observersDoNotKeepTheLoopAlive() {
    TestThread.run {
      let loop = RunLoop.current
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      let notified = AtomicInteger<Int>(0)
      // libuv: a prepare/check handle that is unreferenced; here observers never keep a mode
      // alive (RunLoopObserver's doc comment), and no entry or exit is notified.
      let observer = RunLoopObserver(activities: .allActivities) { _, _ in notified.increment(ordering: .relaxed) }
      loop.add(observer, forMode: .default)
      let start = MonotonicInstant.now
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(MonotonicInstant.now - start < .seconds(10))
      #expect(notified.load(ordering: .relaxed) == 0)
      // A one-shot timer keeps it alive until it fired (uv_loop_alive true, then false).
      let fired = AtomicInteger<Int>(0)
      loop.add(RunLoopTimer(after: .milliseconds(1)) { _ in fired.increment(ordering: .relaxed) }, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fired.load(ordering: .relaxed) == 1)
      #expect(notified.load(ordering: .relaxed) > 0)
      #expect(loop.run(mode: .default, timeout: .zero) == .finished)
      observer.invalidate()
    }
  }

  @Test("run_nowait: a zero-timeout run does not wait for a pending timer and does not fire it")
  func runNowaitDoesNotWait() {
    TestThread.run {
      let loop = RunLoop.current
      let fired = AtomicInteger<Int>(0)
      let timer = RunLoopTimer(after: .seconds(100)) { _ in fired.increment(ordering: .relaxed) }
      loop.add(timer, forMode: .default)
      let start = MonotonicInstant.now
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(loop.run(mode: .default, timeout: .seconds(-5)) == .timedOut)
      #expect(loop.run(mode: .default, before: .distantPast) == .timedOut)
      #expect(MonotonicInstant.now - start < .seconds(10))
      #expect(fired.load(ordering: .relaxed) == 0)
      timer.invalidate()
    }
  }

  @Test("mainloop basic: g_main_context_iteration(FALSE) dispatches what is ready, in priority order, and never blocks")
  func iterationMayNotBlock() {
    TestThread.run {
      let loop = RunLoop.current
      let order = Recorder<String>()
      let low = RunLoopSource(order: 100) { order.append("low") }
      let high = RunLoopSource(order: -100) { order.append("high") }
      let normal = RunLoopSource(order: 0) { order.append("default") }
      loop.add(low, forMode: .default)
      loop.add(normal, forMode: .default)
      loop.add(high, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut, "nothing ready: returns at once")
      #expect(order.count == 0)
      low.signal()
      normal.signal()
      high.signal()
      // One source per iteration (GLib dispatches the highest priority first).
      #expect(loop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
      #expect(order.snapshot == ["high"])
      // An ordinary pass dispatches the rest, lower order first.
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(order.snapshot == ["high", "default", "low"])
      for source in [low, normal, high] { source.invalidate() }
    }
  }
}

@Suite("libuv/GLib scenarios: removal, recursion and cross-thread changes", .timeLimit(.minutes(3)))
struct PeerLibuvGLibRecursionTests {
  @Test("mainloop: a source removed from its own callback never fires again; signals after are ignored")
  func sourceRemovedInItsOwnCallback() {
    TestThread.run {
      let loop = RunLoop.current
      let calls = AtomicInteger<Int>(0)
      let box = Box<RunLoopSource?>(nil)
      let source = RunLoopSource {
        calls.increment(ordering: .relaxed)
        box.value?.invalidate()
        // Signalling the removed source from its own callback has no effect.
        box.value?.signal()
      }
      box.value = source
      let keepAlive = RunLoopTimer(fireAt: .distantFuture) { _ in }
      loop.add(keepAlive, forMode: .default)
      loop.add(source, forMode: .default)
      source.signal()
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      source.signal()
      #expect(loop.run(mode: .default, timeout: .milliseconds(5)) == .timedOut)
      #expect(calls.load(ordering: .relaxed) == 1)
      #expect(!source.isValid && !source.isSignalled)
      keepAlive.invalidate()
      box.value = nil
    }
  }

  @Test("recursion: a timer callback runs the loop nested; other timers fire inside it, the running one does not")
  func nestedRunFromATimer() {
    TestThread.run {
      let loop = RunLoop.current
      let log = Recorder<String>()
      let depth = Box<Int>(0)
      let outer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(1)) { timer in
        log.append("outer")
        if depth.value > 0 { return }
        depth.value += 1
        // g_main_context_iteration inside a dispatch: runs until the inner timer stops it.
        let nested = loop.run(mode: .default, timeout: .seconds(30))
        log.append("nested:\(nested)")
        depth.value -= 1
        timer.invalidate()
      }
      let inner = RunLoopTimer(after: .milliseconds(10)) { _ in
        log.append("inner")
        loop.stop()
      }
      loop.add(outer, forMode: .default)
      loop.add(inner, forMode: .default)
      // The stop ended only the nested run; the outer run goes on until the mode is empty.
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(log.snapshot == ["outer", "inner", "nested:stopped"])
    }
  }

  @Test("g_main_context_wakeup: a wake-up from another thread makes a sleeping loop re-check and see new work")
  func wakeUpFromAnotherThreadSeesWork() {
    let loopBox = Box<RunLoop?>(nil)
    let ready = Semaphore()
    let ran = Semaphore()
    let result = Box<RunLoopRunResult?>(nil)
    let elapsed = Box<Duration>(.zero)
    let worker = TestThread.spawn {
      let loop = RunLoop.current
      let keepAlive = RunLoopTimer(fireAt: .distantFuture) { _ in }
      loop.add(keepAlive, forMode: .default)
      loopBox.value = loop
      ready.signal()
      let start = MonotonicInstant.now
      result.value = loop.run(mode: .default, timeout: .seconds(30))
      elapsed.value = MonotonicInstant.now - start
      keepAlive.invalidate()
    }
    ready.wait()
    let loop = loopBox.value!
    // Wait until it sleeps, so the wake-up is not dropped (a wake-up while not running is).
    waitUntil { loop.isWaiting }
    // Work that does not wake by itself, then g_main_context_wakeup.
    loop.perform(inModes: [.default]) {
      ran.signal()
      RunLoop.current.stop()
    }
    loop.wakeUp()
    ran.wait()
    worker.join()
    #expect(result.value == .stopped)
    #expect(elapsed.value < .seconds(20))
  }

  @Test("ready_time: moving a far timer to now from another thread fires it while the loop sleeps")
  func readyTimeFromAnotherThread() {
    let timerBox = Box<RunLoopTimer?>(nil)
    let loopBox = Box<RunLoop?>(nil)
    let ready = Semaphore()
    let result = Box<RunLoopRunResult?>(nil)
    let fired = AtomicInteger<Int>(0)
    let worker = TestThread.spawn {
      let loop = RunLoop.current
      let timer = RunLoopTimer(fireAt: .distantFuture) { _ in
        fired.increment(ordering: .relaxed)
        RunLoop.current.stop()
      }
      loop.add(timer, forMode: .default)
      // A second far timer keeps the mode alive once the one-shot timer is gone.
      let keepAlive = RunLoopTimer(fireAt: .distantFuture - .nanoseconds(1)) { _ in }
      loop.add(keepAlive, forMode: .default)
      timerBox.value = timer
      loopBox.value = loop
      ready.signal()
      result.value = loop.run(mode: .default, timeout: .seconds(30))
      keepAlive.invalidate()
    }
    ready.wait()
    waitUntil { loopBox.value!.isWaiting }
    let start = MonotonicInstant.now
    timerBox.value!.setNextFireDate(.now)
    worker.join()
    #expect(result.value == .stopped)
    #expect(fired.load(ordering: .relaxed) == 1)
    #expect(MonotonicInstant.now - start < .seconds(20))
  }

  @Test("timeout: a run with a huge timeout is not an expired one; it waits for the work")
  func hugeRunTimeout() {
    let sourceBox = Box<RunLoopSource?>(nil)
    let loopBox = Box<RunLoop?>(nil)
    let ready = Semaphore()
    let results = Recorder<RunLoopRunResult>()
    let worker = TestThread.spawn {
      let loop = RunLoop.current
      let source = RunLoopSource {}
      loop.add(source, forMode: .default)
      sourceBox.value = source
      loopBox.value = loop
      ready.signal()
      for timeout in [Duration.seconds(Int64.max), .seconds(Int64.max / 1_000_000_000), .nanoseconds(Int64.max)] {
        results.append(loop.run(mode: .default, timeout: timeout, returnAfterSourceHandled: true))
      }
      results.append(
        loop.run(mode: .default, before: .distantFuture - .nanoseconds(1), returnAfterSourceHandled: true))
      source.invalidate()
    }
    ready.wait()
    // Each run sleeps until signalled (a run that saw its deadline as passed would return
    // timedOut at once).
    for round in 1...4 {
      waitUntil { results.count == round - 1 && loopBox.value!.isWaiting }
      sourceBox.value!.signalAndWakeUp()
    }
    worker.join()
    #expect(results.snapshot == [.handledSource, .handledSource, .handledSource, .handledSource])
  }

  @Test("timeout: a timer due near the end of the clock does not fire, nor keep an earlier timer from firing")
  func timerNearTheEndOfTheClock() {
    TestThread.run {
      let loop = RunLoop.current
      let farFired = AtomicInteger<Int>(0)
      let far = RunLoopTimer(fireAt: .distantFuture - .nanoseconds(1), tolerance: .seconds(5)) { _ in
        farFired.increment(ordering: .relaxed)
      }
      let nearFired = AtomicInteger<Int>(0)
      let near = RunLoopTimer(after: .milliseconds(2)) { _ in nearFired.increment(ordering: .relaxed) }
      loop.add(far, forMode: .default)
      loop.add(near, forMode: .default)
      let start = MonotonicInstant.now
      #expect(loop.run(mode: .default, timeout: .milliseconds(30)) == .timedOut)
      #expect(MonotonicInstant.now - start >= .milliseconds(30))
      #expect(nearFired.load(ordering: .relaxed) == 1)
      #expect(farFired.load(ordering: .relaxed) == 0)
      far.invalidate()
    }
  }
}

@Suite("libuv/GLib scenarios: descriptors across modes and nested runs", .timeLimit(.minutes(3)))
struct PeerLibuvGLibDescriptorModeTests {
  @Test("recursion with a descriptor: a handler that runs the loop nested is not re-entered for the same readiness")
  func descriptorHandlerIsNotReentered() {
    TestThread.run {
      let loop = RunLoop.current
      let pipe = PortsPipe()
      let depth = Box<Int>(0)
      let maxDepth = Box<Int>(0)
      let calls = AtomicInteger<Int>(0)
      let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
        calls.increment(ordering: .relaxed)
        depth.value += 1
        maxDepth.value = max(maxDepth.value, depth.value)
        // Still readable (not drained): GLib blocks a source while it is dispatched.
        if depth.value == 1 { _ = loop.run(mode: .default, timeout: .milliseconds(20)) }
        _ = pipe.readAll()
        depth.value -= 1
      }
      loop.add(source, forMode: .default)
      pipe.write(1)
      #expect(loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(maxDepth.value == 1)
      #expect(calls.load(ordering: .relaxed) == 1)
      // Drained: nothing more.
      #expect(loop.run(mode: .default, timeout: .milliseconds(5)) == .timedOut)
      #expect(calls.load(ordering: .relaxed) == 1)
      source.invalidate()
    }
  }

  @Test("a ready descriptor source removed from its mode and added back still fires once its mode runs")
  func removedAndAddedBackStillFires() {
    TestThread.run {
      let loop = RunLoop.current
      let other: RunLoopMode = "peer-glib.other"
      let pipe = PortsPipe()
      let calls = Recorder<RunLoopMode?>()
      let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
        calls.append(loop.currentMode)
        _ = pipe.readAll()
      }
      loop.add(source, forMode: .default)
      let keepAlive = RunLoopTimer(fireAt: .distantFuture) { _ in }
      loop.add(keepAlive, forMode: other)
      pipe.write(1)
      // Reported while the other mode runs (the readiness waits for the default mode).
      for _ in 0..<3 { _ = loop.run(mode: other, timeout: .milliseconds(2)) }
      #expect(calls.count == 0)
      loop.remove(source, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .milliseconds(5)) == .finished, "nothing left in the default mode")
      #expect(calls.count == 0)
      loop.add(source, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(calls.snapshot == [.default])
      source.invalidate()
      keepAlive.invalidate()
    }
  }

  @Test("embed: a descriptor ready in a mode other than the embedded one does not keep the poll descriptor readable")
  func embeddedOtherModeReadinessDoesNotSpin() {
    TestThread.run {
      let loop = RunLoop.current
      let other: RunLoopMode = "peer-glib.embed-other"
      let pipe = PortsPipe()
      let calls = Recorder<RunLoopMode?>()
      let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
        calls.append(loop.currentMode)
        _ = pipe.readAll()
      }
      loop.add(source, forMode: other)
      let keepAlive = RunLoopTimer(fireAt: .distantFuture) { _ in }
      loop.add(keepAlive, forMode: .default)
      _ = loop.runDueWork()
      pipe.write(1)
      var watched = pollfd(fd: loop.pollDescriptor, events: Int16(POLLIN), revents: 0)
      #expect(poll(&watched, 1, 10_000) == 1, "the ready descriptor makes the poll descriptor readable")
      _ = loop.runDueWork()
      #expect(calls.count == 0, "not in the embedded mode")
      watched.revents = 0
      #expect(poll(&watched, 1, 20) == 0, "and the foreign loop does not spin on it")
      // The mode it is in fires it.
      #expect(loop.run(mode: other, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(calls.snapshot == [other])
      source.invalidate()
      keepAlive.invalidate()
    }
  }

  @Test("loop_stop before run: a stop while the loop is not running is dropped (RunLoop's doc), the next run works")
  func stopBeforeRunIsDropped() {
    TestThread.run {
      let loop = RunLoop.current
      let fired = AtomicInteger<Int>(0)
      let timer = RunLoopTimer(after: .milliseconds(2)) { _ in fired.increment(ordering: .relaxed) }
      loop.add(timer, forMode: .default)
      // libuv remembers a uv_stop made before uv_run; Core Foundation, and RunLoop, do not.
      loop.stop()
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(fired.load(ordering: .relaxed) == 1)
    }
  }

  @Test("timeout.c: timers scheduled far ahead (21475 s, 2^31 ms, 2^32 s) keep their exact fire dates")
  func largeTimeoutsKeepTheirFireDates() {
    for delay in [Duration.seconds(21475), .milliseconds(Int64(Int32.max) + 1), .seconds(Int64(UInt32.max) + 1)] {
      let before = MonotonicInstant.now
      let timer = RunLoopTimer(after: delay, interval: delay) { _ in }
      let after = MonotonicInstant.now
      #expect(timer.nextFireDate >= before + delay && timer.nextFireDate <= after + delay)
      #expect(timer.interval == delay)
    }
  }
}

@Suite("libuv/GLib scenarios: handles closed while the loop waits", .timeLimit(.minutes(3)))
struct PeerLibuvGLibClosingTests {
  @Test("unref_in_prepare_cb: the only item removed by a before-waiting observer ends the run instead of a sleep")
  func lastItemRemovedBeforeWaiting() {
    TestThread.run {
      let loop = RunLoop.current
      let pipe = PortsPipe()
      let timer = RunLoopTimer(fireAt: .distantFuture) { _ in }
      let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in }
      for (index, removeTimer) in [true, false].enumerated() {
        if removeTimer { loop.add(timer, forMode: .default) } else { loop.add(source, forMode: .default) }
        let prepared = AtomicInteger<Int>(0)
        let prepare = RunLoopObserver(activities: .beforeWaiting) { _, _ in
          prepared.increment(ordering: .relaxed)
          if removeTimer { timer.invalidate() } else { source.invalidate() }
        }
        loop.add(prepare, forMode: .default)
        let start = MonotonicInstant.now
        #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished, "round \(index)")
        #expect(MonotonicInstant.now - start < .seconds(20))
        #expect(prepared.load(ordering: .relaxed) == 1)
        prepare.invalidate()
      }
    }
  }

  @Test("poll close from another thread: a sleeping run whose only descriptor source is invalidated returns finished")
  func descriptorSourceInvalidatedByAnotherThread() {
    let sourceBox = Box<FileDescriptorSource?>(nil)
    let loopBox = Box<RunLoop?>(nil)
    let ready = Semaphore()
    let result = Box<RunLoopRunResult?>(nil)
    let pipe = PortsPipe()
    let worker = TestThread.spawn {
      let loop = RunLoop.current
      let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in }
      loop.add(source, forMode: .default)
      sourceBox.value = source
      loopBox.value = loop
      ready.signal()
      result.value = loop.run(mode: .default, timeout: .seconds(30))
    }
    ready.wait()
    waitUntil { loopBox.value!.isWaiting }
    let start = MonotonicInstant.now
    sourceBox.value!.invalidate()
    worker.join()
    #expect(result.value == .finished)
    #expect(MonotonicInstant.now - start < .seconds(20))
    sourceBox.value = nil
  }

  @Test("async close: a source closed in its callback while other threads keep sending ends the run, none fires after")
  func asyncClosedWhileSending() {
    let rounds = isRunningUnderSanitizer ? 5 : 30
    for _ in 0..<rounds {
      let sourceBox = Box<RunLoopSource?>(nil)
      let ready = Semaphore()
      let callbacks = AtomicInteger<Int>(0)
      let afterClose = AtomicInteger<Int>(0)
      let closed = AtomicInteger<Int>(0)
      let result = Box<RunLoopRunResult?>(nil)
      let done = AtomicInteger<Int>(0)
      let loopThread = TestThread.spawn {
        let loop = RunLoop.current
        let box = Box<RunLoopSource?>(nil)
        let source = RunLoopSource {
          if closed.load(ordering: .relaxed) != 0 { afterClose.increment(ordering: .relaxed) }
          if callbacks.increment(ordering: .relaxed) >= 3 {
            closed.store(1, ordering: .relaxed)
            box.value?.invalidate()
          }
        }
        box.value = source
        loop.add(source, forMode: .default)
        sourceBox.value = source
        ready.signal()
        result.value = loop.run(mode: .default, timeout: .seconds(30))
        box.value = nil
      }
      ready.wait()
      let source = sourceBox.value!
      runThreads(3) { _ in
        while done.load(ordering: .relaxed) == 0 {
          source.signalAndWakeUp()
          if closed.load(ordering: .relaxed) != 0 { break }
        }
      }
      done.store(1, ordering: .relaxed)
      loopThread.join()
      #expect(result.value == .finished)
      #expect(afterClose.load(ordering: .relaxed) == 0)
      sourceBox.value = nil
    }
  }

  @Test("g_main_loop_is_running: the current mode is set inside callbacks, nil outside a run")
  func currentModeInsideAndOutside() {
    TestThread.run {
      let loop = RunLoop.current
      let other: RunLoopMode = "peer-glib.running"
      #expect(loop.currentMode == nil)
      let seen = Recorder<RunLoopMode?>()
      let timer = RunLoopTimer(after: .zero) { _ in
        seen.append(loop.currentMode)
        _ = loop.run(mode: other, timeout: .zero)
        seen.append(loop.currentMode)
      }
      let nestedTimer = RunLoopTimer(after: .zero) { _ in seen.append(loop.currentMode) }
      loop.add(timer, forMode: .default)
      loop.add(nestedTimer, forMode: other)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(seen.snapshot == [.default, other, .default])
      #expect(loop.currentMode == nil)
    }
  }
}

@Suite("libuv/GLib scenarios: periodic timers, dropped handles, prepare/check", .timeLimit(.minutes(3)))
struct PeerLibuvGLibPeriodicTests {
  @Test("test_timeouts: repeating timers of 10, 25 and 33 ms over 105 ms never fire ahead of their grid")
  func periodicTimersNeverRunAhead() {
    TestThread.run {
      let loop = RunLoop.current
      let counts = Box<[Int]>([0, 0, 0])
      let start = MonotonicInstant.now
      var timers: [RunLoopTimer] = []
      for (index, period) in [10, 25, 33].enumerated() {
        let timer = RunLoopTimer(fireAt: start + .milliseconds(period), interval: .milliseconds(period)) { timer in
          counts.update { $0[index] += 1 }
          // Never before its grid point: the k-th firing is not before k periods.
          #expect(MonotonicInstant.now >= start + .milliseconds(period * counts.value[index]))
          #expect(timer.scheduledFireDate! >= start + .milliseconds(period * counts.value[index]))
        }
        loop.add(timer, forMode: .default)
        timers.append(timer)
      }
      let end = RunLoopTimer(fireAt: start + .milliseconds(105)) { _ in loop.stop() }
      loop.add(end, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      let elapsed = MonotonicInstant.now - start
      let final = counts.value
      // GLib expects exactly 10, 4 and 3 on an idle machine. A late loop fires a timer that
      // missed periods once, and may fire one more due in the pass that stops, so the bound
      // is the grid points passed by the end of the run (10, 4 and 3 when it ends in time).
      for (index, period) in [10, 25, 33].enumerated() {
        let gridPoints = Int(elapsed / .milliseconds(period))
        #expect(final[index] >= 1 && final[index] <= gridPoints, "\(final) after \(elapsed)")
      }
      for timer in timers { timer.invalidate() }
    }
  }

  @Test("unref_while_pending: a ready descriptor source released before its mode runs never calls its handler")
  func releasedWhileReadyNeverFires() {
    TestThread.run {
      let loop = RunLoop.current
      let other: RunLoopMode = "peer-glib.pending"
      let pipe = PortsPipe()
      let calls = AtomicInteger<Int>(0)
      var source: FileDescriptorSource? = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
        calls.increment(ordering: .relaxed)
      }
      loop.add(source!, forMode: .default)
      let keepAlive = RunLoopTimer(fireAt: .distantFuture) { _ in }
      loop.add(keepAlive, forMode: other)
      pipe.write(1)
      // Reported (and pending) while the other mode runs.
      for _ in 0..<3 { _ = loop.run(mode: other, timeout: .milliseconds(2)) }
      #expect(calls.load(ordering: .relaxed) == 0)
      source = nil
      #expect(loop.run(mode: .default, timeout: .milliseconds(5)) == .finished)
      #expect(calls.load(ordering: .relaxed) == 0)
      keepAlive.invalidate()
    }
  }

  @Test(
    "g_unix_fd_add fire-and-forget: a run loop does not keep a descriptor source alive (FileDescriptorSource's doc)")
  func unreferencedDescriptorSourceIsInvalidated() {
    TestThread.run {
      let loop = RunLoop.current
      let pipe = PortsPipe()
      pipe.write(1)
      let calls = AtomicInteger<Int>(0)
      // GLib's context owns an fd source (and CF's run-loop source retains its
      // CFFileDescriptor); here the caller's reference is the only one, and it ends with
      // this statement.
      loop.add(
        FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
          calls.increment(ordering: .relaxed)
        }, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(calls.load(ordering: .relaxed) == 0)
    }
  }

  @Test("loop_handles: prepare and check run around every sleep; while an idle source fires the loop does not sleep")
  func prepareAndCheckAroundSleeps() {
    TestThread.run {
      let loop = RunLoop.current
      let log = Recorder<String>()
      let prepare = RunLoopObserver(activities: .beforeWaiting) { _, _ in log.append("prepare") }
      let check = RunLoopObserver(activities: .afterWaiting) { _, _ in log.append("check") }
      loop.add(prepare, forMode: .default)
      loop.add(check, forMode: .default)
      let idleCalls = Box<Int>(0)
      let idleBox = Box<RunLoopSource?>(nil)
      let idle = RunLoopSource {
        idleCalls.value += 1
        log.append("idle")
        if idleCalls.value < 5 { idleBox.value?.signal() }
      }
      idleBox.value = idle
      loop.add(idle, forMode: .default)
      idle.signal()
      let ticks = Box<Int>(0)
      let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(2)) { timer in
        log.append("timer")
        ticks.value += 1
        if ticks.value == 3 { timer.invalidate() }
      }
      loop.add(timer, forMode: .default)
      // The idle source keeps the mode alive; stop once the timer is done.
      let stopper = RunLoopObserver(activities: .beforeWaiting, order: 1) { _, _ in
        if ticks.value == 3 { loop.stop() }
      }
      loop.add(stopper, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .seconds(30)) == .stopped)
      let entries = log.snapshot
      // The five idle callbacks run in consecutive passes with no sleep between them
      // (RunLoop's doc: before-waiting is skipped when a source fired).
      let idles = entries.enumerated().filter { $0.element == "idle" }.map(\.offset)
      #expect(idles.count == 5)
      if let first = idles.first, let last = idles.last {
        #expect(!entries[first...last].contains("prepare"), "\(entries)")
      }
      // Every check follows a prepare (one sleep each), and they alternate.
      let sleeps = entries.filter { $0 == "prepare" || $0 == "check" }
      for (index, entry) in sleeps.enumerated() {
        #expect(entry == (index % 2 == 0 ? "prepare" : "check"), "\(sleeps)")
      }
      #expect(entries.filter { $0 == "timer" }.count == 3)
      for item in [prepare, check, stopper] { item.invalidate() }
      idle.invalidate()
      idleBox.value = nil
    }
  }
}

@Suite("libuv/GLib scenarios: nested dispatch and invoke", .timeLimit(.minutes(3)))
struct PeerLibuvGLibNestedDispatchTests {
  @Test(
    "recursion: descriptors ready in one pass; the first handler's nested run fires the second, which then fires once")
  func nestedRunFiresTheOtherReadyDescriptorOnce() {
    TestThread.run {
      let loop = RunLoop.current
      let first = PortsPipe()
      let second = PortsPipe()
      let log = Recorder<String>()
      let one = FileDescriptorSource(descriptor: first.readEnd, events: .readable) { _, _ in
        log.append("first")
        _ = first.readAll()
        let nested = loop.run(mode: .default, timeout: .seconds(30), returnAfterSourceHandled: true)
        log.append("nested:\(nested)")
      }
      let two = FileDescriptorSource(descriptor: second.readEnd, events: .readable) { _, _ in
        log.append("second")
        _ = second.readAll()
      }
      loop.add(one, forMode: .default)
      loop.add(two, forMode: .default)
      first.write(1)
      second.write(1)
      let giveUp = MonotonicInstant.after(.seconds(30))
      while log.count < 3 && !giveUp.hasPassed { _ = loop.run(mode: .default, timeout: .milliseconds(10)) }
      for _ in 0..<3 { _ = loop.run(mode: .default, timeout: .milliseconds(1)) }
      #expect(log.snapshot == ["first", "second", "nested:handledSource"])
      one.invalidate()
      two.invalidate()
    }
  }

  @Test("invoke: g_main_context_invoke on the owner thread runs at once; from another thread it runs on the owner")
  func invokeRunsOnTheOwner() throws {
    TestThread.run {
      let loop = RunLoop.current
      let ran = Box<Bool>(false)
      // Not running, no items: waiting on the caller's own loop runs the block at once.
      try? loop.performAndWait { ran.value = true }
      #expect(ran.value)
    }
    let worker = try RunLoopThread.start(name: "peer-glib-invoke")
    let threadID = Box<UInt64?>(nil)
    try worker.performAndWait { threadID.value = Thread.current.id }
    #expect(threadID.value == worker.thread.id)
    #expect(threadID.value != Thread.current.id)
    worker.stop()
  }
}

@Suite("libuv/GLib scenarios: cross-thread ping-pong and close order", .timeLimit(.minutes(3)))
struct PeerLibuvGLibPingPongTests {
  @Test(
    "async ping-pong: two loops hand a token back and forth with signalAndWakeUp; no hand-off is lost",
    arguments: [false, true])
  func pingPong(withObserver: Bool) {
    let rounds = isRunningUnderSanitizer ? 2_000 : 20_000
    let sources = Box<[RunLoopSource?]>([nil, nil])
    let loops = Box<[RunLoop?]>([nil, nil])
    let registered = Latch(count: 2)
    let go = Semaphore()
    let hits = [AtomicInteger<Int>(0), AtomicInteger<Int>(0)]
    let results = Box<[RunLoopRunResult?]>([nil, nil])
    let threads = (0..<2).map { side in
      TestThread.spawn {
        let loop = RunLoop.current
        let source = RunLoopSource {
          let count = hits[side].increment(ordering: .relaxed)
          if count >= rounds {
            RunLoop.current.stop()
            // Side 0 served first, so its last hand-off gives side 1 its last round.
            if side == 1 { return }
          }
          sources.value[1 - side]!.signalAndWakeUp()
        }
        loop.add(source, forMode: .default)
        // An observer takes the loop off the hand-off path (the general pass instead).
        let observer = RunLoopObserver(activities: .beforeWaiting) { _, _ in }
        if withObserver { loop.add(observer, forMode: .default) }
        sources.update { $0[side] = source }
        loops.update { $0[side] = loop }
        registered.countDown()
        if side == 0 { go.wait() }
        let result = loop.run(mode: .default, timeout: .seconds(50))
        results.update { $0[side] = result }
        source.invalidate()
        observer.invalidate()
      }
    }
    registered.wait()
    go.signal()
    // Side 0 serves first.
    sources.value[0]!.signalAndWakeUp()
    for thread in threads { thread.join() }
    #expect(hits[0].load(ordering: .relaxed) == rounds)
    #expect(hits[1].load(ordering: .relaxed) == rounds)
    #expect(results.value == [.stopped, .stopped])
    sources.value = [nil, nil]
    loops.value = [nil, nil]
  }

  @Test("close_order: cancel callbacks run in the order the sources are closed, once per mode, on the closing thread")
  func cancelCallbacksInCloseOrder() {
    TestThread.run {
      let loop = RunLoop.current
      let other: RunLoopMode = "peer-glib.close-order"
      let log = Recorder<String>()
      let me = Thread.current.id
      func make(_ name: String) -> RunLoopSource {
        RunLoopSource(cancel: { _, mode in
          #expect(Thread.current.id == me)
          log.append("\(name):\(mode == .default ? "default" : "other")")
        }) {}
      }
      let a = make("a")
      let b = make("b")
      let c = make("c")
      for source in [a, b, c] {
        loop.add(source, forMode: .default)
        loop.add(source, forMode: other)
      }
      c.invalidate()
      a.invalidate()
      loop.remove(b, forMode: other)
      b.invalidate()
      let entries = log.snapshot
      #expect(entries.count == 6)
      #expect(entries.map { $0.prefix(1) } == ["c", "c", "a", "a", "b", "b"])
      #expect(Set(entries) == ["a:default", "a:other", "b:default", "b:other", "c:default", "c:other"])
      #expect(entries[4] == "b:other", "removed first, then invalidated from the mode it was still in")
      #expect(loop.run(mode: .default, timeout: .zero) == .finished)
    }
  }
}

@Suite("libuv/GLib scenarios: timers changed from another thread", .timeLimit(.minutes(3)))
struct PeerLibuvGLibTimerChangeTests {
  /// Runs a loop on a new thread with `timer` in its default mode until the timer's callback
  /// stops it; once the loop sleeps (after `firstFirings` firings), `change` runs on this
  /// thread. Returns how long the loop took to stop after the change, and the run's result.
  private func runAndChange(
    _ makeTimer: @escaping @Sendable (AtomicInteger<Int>) -> RunLoopTimer, firstFirings: Int,
    _ change: (RunLoopTimer) -> Void
  ) -> (Duration, RunLoopRunResult?) {
    let timerBox = Box<RunLoopTimer?>(nil)
    let loopBox = Box<RunLoop?>(nil)
    let fired = AtomicInteger<Int>(0)
    let ready = Semaphore()
    let result = Box<RunLoopRunResult?>(nil)
    let worker = TestThread.spawn {
      let loop = RunLoop.current
      let timer = makeTimer(fired)
      loop.add(timer, forMode: .default)
      timerBox.value = timer
      loopBox.value = loop
      ready.signal()
      result.value = loop.run(mode: .default, timeout: .seconds(40))
      timer.invalidate()
    }
    ready.wait()
    waitUntil { fired.load(ordering: .relaxed) >= firstFirings && loopBox.value!.isWaiting }
    let start = MonotonicInstant.now
    change(timerBox.value!)
    worker.join()
    let elapsed = MonotonicInstant.now - start
    timerBox.value = nil
    loopBox.value = nil
    return (elapsed, result.value)
  }

  @Test("a repeating timer's interval shortened from another thread while the loop sleeps re-plans its next firing")
  func intervalShortenedWhileSleeping() {
    let (elapsed, result) = runAndChange(
      { fired in
        RunLoopTimer(after: .milliseconds(1), interval: .seconds(30)) { _ in
          if fired.increment(ordering: .relaxed) == 2 { RunLoop.current.stop() }
        }
      }, firstFirings: 1
    ) { timer in timer.interval = .milliseconds(1) }
    #expect(result == .stopped)
    #expect(elapsed < .seconds(20))
  }

  @Test("a timer's tolerance reduced from another thread while the loop sleeps in its window fires it at once")
  func toleranceReducedWhileSleeping() {
    let (elapsed, result) = runAndChange(
      { fired in
        RunLoopTimer(after: .milliseconds(1), tolerance: .seconds(30)) { _ in
          fired.increment(ordering: .relaxed)
          RunLoop.current.stop()
        }
      }, firstFirings: 0
    ) { timer in timer.tolerance = .zero }
    #expect(result == .stopped)
    #expect(elapsed < .seconds(20))
  }
}

@Suite("libuv/GLib scenarios: descriptor misuse", .timeLimit(.minutes(3)))
struct PeerLibuvGLibDescriptorMisuseTests {
  @Test(
    "poll_multiple_handles: a second source for a descriptor the loop already watches stops the process (FileDescriptorSource's doc)",
    .runsExitTests
  )
  func secondSourceForAWatchedDescriptor() async {
    // libuv lets two poll handles share a descriptor; the toolkit documents this as misuse
    // (`EEXIST`: use one source with both events).
    await #expect(processExitsWith: .failure) {
      var ends: [Int32] = [-1, -1]
      precondition(pipe(&ends) == 0)
      let first = FileDescriptorSource(descriptor: ends[0]) { _, _ in }
      let second = FileDescriptorSource(descriptor: ends[0], events: .readable) { _, _ in }
      RunLoop.current.add(first, forMode: .default)
      RunLoop.current.add(second, forMode: .default)
    }
  }
}
