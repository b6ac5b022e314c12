import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

/// Serves a local port whose handler serves the same port again (misuse), in this process.
private func round4ServeFromTheOwnHandler() {
  let name = uniquePortName("round4-reentrant-serve")
  let slot = Box<MessagePort?>(nil)
  guard
    let port = try? MessagePort.local(
      name: name,
      handler: { _ in
        _ = try? slot.value?.serve(before: .distantPast)
        return nil
      })
  else { return }
  slot.value = port
  guard let remote = try? MessagePort.remote(name: name) else { return }
  _ = try? remote.send(msgid: 1, sendTimeout: .seconds(5), receiveTimeout: .zero, replyMode: .oneWay)
  _ = try? port.serve(before: .after(.seconds(5)))
}

/// Audit round 4: hostile sequences in the RunLoop module: changes made from inside the
/// callbacks they affect, calls after invalidation, extreme limits on waits that must not
/// overflow or hang.
@Suite("Audit round 4: RunLoop hostile sequences", .timeLimit(.minutes(3)))
struct AuditRound4RunLoopHostileSequenceTests {
  /// "Zero or less makes the timer one-shot: it is invalidated after its next firing", also
  /// when set (to the most negative Duration) from the timer's own callback.
  @Test func anIntervalMadeNegativeInTheCallbackEndsTheTimerAfterThisFiring() {
    let fired = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      let timer = RunLoopTimer(fireAt: .distantPast, interval: .nanoseconds(1)) { timer in
        _ = fired.fetchAdd(1, ordering: .relaxed)
        timer.interval = Duration(attoseconds: .min)
      }
      loop.add(timer, forMode: .default)
      _ = loop.run(mode: .default, timeout: .zero)
      #expect(!timer.isValid)
      #expect(!timer.isRepeating)
      _ = loop.run(mode: .default, timeout: .zero)
    }
    #expect(fired.load(ordering: .relaxed) == 1)
  }

  /// A repeating timer that has not fired yet keeps its first fire date when its interval
  /// changes, to the largest Duration too (no overflow).
  @Test func aLargestIntervalSetBeforeTheFirstFiringKeepsTheFirstDate() {
    let first = MonotonicInstant.now.advanced(by: .seconds(100))
    let timer = RunLoopTimer(fireAt: first, interval: .seconds(1)) { _ in }
    TestThread.run {
      RunLoop.current.add(timer, forMode: .default)
      timer.interval = Duration(attoseconds: .max)
      #expect(timer.nextFireDate == first)
      #expect(timer.isRepeating)
      // Half the interval caps the tolerance: the largest tolerance is kept whole.
      timer.tolerance = .seconds(Int64.max)
      #expect(timer.tolerance == .seconds(Int64.max))
      timer.invalidate()
    }
  }

  /// A waiting perform request with a deadline already passed (and the most negative
  /// timeout) on a loop that is not running times out at once and is withdrawn: the block
  /// never runs when the loop runs later.
  @Test func aWaitingRequestWithAPastDeadlineIsWithdrawn() throws {
    let ran = AtomicInteger<Int>(0)
    let loopReady = Semaphore(value: 0)
    let go = Semaphore(value: 0)
    let target = Box<RunLoop?>(nil)
    let thread = TestThread.spawn {
      target.value = RunLoop.current
      loopReady.signal()
      _ = go.wait(timeout: .seconds(30))
      let loop = RunLoop.current
      loop.add(RunLoopSource(perform: {}), forMode: .default)
      for _ in 0..<3 { _ = loop.run(mode: .default, timeout: .zero) }
    }
    _ = loopReady.wait(timeout: .seconds(30))
    let loop = try #require(target.value)
    for attempt in 0..<2 {
      let error = #expect(throws: PerformError.self) {
        if attempt == 0 {
          try loop.performAndWait(inModes: [.default], before: .distantPast) { _ = ran.fetchAdd(1, ordering: .relaxed) }
        } else {
          try loop.performAndWait(inModes: [.default], timeout: Duration(attoseconds: .min)) {
            _ = ran.fetchAdd(1, ordering: .relaxed)
          }
        }
      }
      #expect(error == .timedOut)
    }
    go.signal()
    thread.join()
    #expect(ran.load(ordering: .relaxed) == 0)
  }

  /// A port's readiness descriptor asked for only after the port was invalidated is readable
  /// ("readable exactly while a message or the invalidation waits").
  @Test func aReadinessDescriptorMadeAfterInvalidationIsReadable() throws {
    let port = Port()
    _ = port.invalidate()
    let descriptor = try port.readinessDescriptor()
    var watched = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
    #expect(poll(&watched, 1, 0) == 1)
    // And it stays so: nothing takes the invalidation away.
    #expect(throws: PortError.self) { _ = try port.tryReceive() }
    watched.revents = 0
    #expect(poll(&watched, 1, 0) == 1)
  }

  /// Serving with deadlines at the extremes: a deadline already passed returns 0 at once;
  /// the largest timeout waits, and an invalidation from another thread ends it with
  /// `becameInvalid` (no overflow computing the wait).
  @Test func servingWithExtremeDeadlines() throws {
    let port = try MessagePort.local(name: uniquePortName("round4-serve-extremes")) { _ in nil }
    #expect(try port.serve(before: .distantPast) == 0)
    #expect(try port.serve(timeout: .seconds(Int64.min)) == 0)
    let outcome = Box<PortStatus?>(nil)
    let started = Semaphore(value: 0)
    let server = TestThread.spawn {
      started.signal()
      do throws(PortError) {
        _ = try port.serve(timeout: Duration(attoseconds: .max))
      } catch {
        outcome.value = error.status
      }
    }
    _ = started.wait(timeout: .seconds(30))
    port.invalidate()
    server.join()
    #expect(outcome.value == .becameInvalid)
  }

  /// A remote lookup with the most negative and the largest connect timeouts reaches a live,
  /// idle port (the timeout only bounds waiting for a saturated listener); a request with
  /// the most negative receive timeout fails with `receiveTimeout` (or, when the reply had
  /// already arrived by the time the passed deadline was checked, as a slow sanitizer run
  /// allows, returns that reply) and leaves the port usable: the next request gets its own
  /// reply, never the late one.
  @Test func extremeTimeoutsOnANamedPort() throws {
    let name = uniquePortName("round4-timeouts")
    let port = try MessagePort.local(name: name) { message in [UInt8(truncatingIfNeeded: message.msgid)] }
    let server = portsServeInBackground(port)
    defer {
      port.invalidate()
      precondition(pthread_join(server, nil) == 0)
    }
    let remote = try MessagePort.remote(name: name, connectTimeout: .seconds(Int64.min))
    #expect(try MessagePort.remote(name: name, connectTimeout: Duration(attoseconds: .max)) == remote)
    do throws(PortError) {
      let reply = try remote.send(
        msgid: 1, sendTimeout: .seconds(10), receiveTimeout: Duration(attoseconds: .min), replyMode: .awaitReply)
      #expect(reply == [1], "a reply returned despite the passed deadline must be this request's")
    } catch {
      #expect(error.status == .receiveTimeout)
    }
    #expect(remote.isValid)
    #expect(
      try remote.send(msgid: 2, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply) == [2])
  }

  /// The longest valid name (64 bytes) registers, is found, and carries a request.
  @Test func theLongestNameWorksEndToEnd() throws {
    let stem = uniquePortName("round4-long")
    let name = stem + String(repeating: "n", count: 64 - stem.utf8.count)
    #expect(name.utf8.count == 64)
    let port = try MessagePort.local(name: name) { _ in [42] }
    let server = portsServeInBackground(port)
    defer {
      port.invalidate()
      precondition(pthread_join(server, nil) == 0)
    }
    #expect(MessagePort.registered(name: name) == port)
    let remote = try MessagePort.remote(name: name)
    #expect(
      try remote.send(msgid: 0, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply) == [42]
    )
  }

  /// A local port's invalidation handler that registers the same name again: the new port
  /// is registered and reachable (the old port's files were removed before the handler,
  /// not after, so they do not take the new port's socket with them).
  @Test func aNameRegisteredAgainFromTheInvalidationHandlerIsReachable() throws {
    let name = uniquePortName("round4-reregister")
    let old = try MessagePort.local(name: name) { _ in [1] }
    let replacement = Box<MessagePort?>(nil)
    let failure = Box<PortError?>(nil)
    old.setInvalidationHandler { _ in
      do throws(PortError) {
        replacement.value = try MessagePort.local(name: name) { _ in [2] }
      } catch {
        failure.value = error
      }
    }
    old.invalidate()
    #expect(failure.value == nil)
    let port = try #require(replacement.value)
    #expect(port != old)
    #expect(port.isValid)
    #expect(MessagePort.registered(name: name) == port)
    let server = portsServeInBackground(port)
    defer {
      port.invalidate()
      precondition(pthread_join(server, nil) == 0)
    }
    let remote = try MessagePort.remote(name: name)
    #expect(
      try remote.send(msgid: 0, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply) == [2])
  }

  /// A message port scheduled in a run loop and invalidated by its own handler while a
  /// request from another thread waits: the requester's wait ends with `becameInvalid`, not
  /// a hang, and the loop leaves the port.
  @Test func aPortInvalidatedByItsOwnHandlerInARunLoopEndsTheRequest() throws {
    let name = uniquePortName("round4-self-invalidate")
    let outcome = Box<PortStatus?>(nil)
    let registered = Semaphore(value: 0)
    let done = AtomicInteger<Int>(0)
    let server = TestThread.spawn {
      do throws(PortError) {
        let slot = Box<MessagePort?>(nil)
        let port = try MessagePort.local(name: name) { _ in
          slot.value?.invalidate()
          return [1]
        }
        slot.value = port
        let loop = RunLoop.current
        loop.add(port, forMode: .default)
        loop.add(RunLoopSource(perform: {}), forMode: .default)
        registered.signal()
        let limit = MonotonicInstant.after(.seconds(20))
        while port.isValid && !limit.hasPassed { _ = loop.run(mode: .default, timeout: .milliseconds(50)) }
        while done.load(ordering: .acquiring) == 0 && !limit.hasPassed {
          _ = loop.run(mode: .default, timeout: .milliseconds(10))
        }
        slot.value = nil
      } catch {
        registered.signal()
      }
    }
    _ = registered.wait(timeout: .seconds(30))
    do throws(PortError) {
      let remote = try MessagePort.remote(name: name)
      _ = try remote.send(msgid: 1, sendTimeout: .seconds(10), receiveTimeout: .seconds(20), replyMode: .awaitReply)
    } catch {
      outcome.value = error.status
    }
    done.store(1, ordering: .releasing)
    server.join()
    #expect(outcome.value == .becameInvalid)
  }

  /// A port handler that removes its port from the mode and adds it back, then replaces
  /// itself: every queued message is still delivered once, in order, the later ones to the
  /// new handler.
  @Test func aPortReAddedAndGivenANewHandlerFromItsHandlerLosesNoMessage() throws {
    let port = Port()
    let delivered = Recorder<String>()
    for msgid in Int32(1)...4 { try port.send(PortMessage(msgid: msgid), before: .distantPast) }
    TestThread.run {
      let loop = RunLoop.current
      port.setHandler { message in
        delivered.append("first \(message.msgid)")
        loop.remove(port, forMode: .default)
        #expect(loop.add(port, forMode: .default))
        port.setHandler { delivered.append("second \($0.msgid)") }
      }
      loop.add(port, forMode: .default)
      loop.add(RunLoopSource(perform: {}), forMode: .default)
      for _ in 0..<6 where port.pendingMessageCount > 0 { _ = loop.run(mode: .default, timeout: .zero) }
      loop.remove(port, forMode: .default)
    }
    #expect(delivered.snapshot == ["first 1", "second 2", "second 3", "second 4"])
    _ = port.invalidate()
  }

  /// A source whose schedule callback invalidates it: its cancel callback runs once for the
  /// mode it entered, and no mode keeps it; one whose cancel callback adds it back on a
  /// removal is in the mode again, scheduled twice, cancelled once.
  @Test func sourceCallbacksThatUndoTheirOwnChange() {
    let counts = Recorder<String>()
    TestThread.run {
      let loop = RunLoop.current
      let slot = Box<RunLoopSource?>(nil)
      slot.value = RunLoopSource(
        schedule: { _, _ in
          counts.append("schedule")
          slot.value?.invalidate()
        },
        cancel: { _, _ in counts.append("cancel") }, perform: {})
      let source = slot.value!
      _ = loop.add(source, forMode: .default)
      #expect(!source.isValid)
      #expect(!loop.contains(source, inMode: .default))
      #expect(loop.run(mode: .default, timeout: .zero) == .finished)
      slot.value = nil
      #expect(counts.snapshot == ["schedule", "cancel"])
      let counts = Recorder<String>()
      let again = Box<RunLoopSource?>(nil)
      again.value = RunLoopSource(
        schedule: { _, _ in counts.append("schedule") },
        cancel: { loop, mode in
          counts.append("cancel")
          if let source = again.value, source.isValid, counts.count < 4 { loop.add(source, forMode: mode) }
        }, perform: {})
      loop.add(again.value!, forMode: .default)
      loop.remove(again.value!, forMode: .default)
      #expect(loop.contains(again.value!, inMode: .default))
      #expect(counts.snapshot == ["schedule", "cancel", "schedule"])
      again.value = nil
    }
  }

  /// A handler that invalidates its own port while answering a request: "every connected
  /// sender's pending request ends with becameInvalid, even while the port's handler is busy
  /// (its reply is then discarded)". The same whether the request travels over the socket
  /// (another thread serves the port) or is answered on the calling thread (the port is
  /// scheduled only in this thread's run loop).
  @Test func aReplyFromAHandlerThatInvalidatedItsPortIsDiscardedWhicheverThreadServes() throws {
    // Over the socket.
    let name = uniquePortName("round4-invalidating-handler")
    let slot = Box<MessagePort?>(nil)
    let port = try MessagePort.local(name: name) { _ in
      slot.value?.invalidate()
      return [1]
    }
    slot.value = port
    let server = portsServeInBackground(port)
    let remote = try MessagePort.remote(name: name)
    let overSocket = #expect(throws: PortError.self) {
      try remote.send(msgid: 1, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
    }
    precondition(pthread_join(server, nil) == 0)
    slot.value = nil
    #expect(overSocket?.status == .becameInvalid)
    #expect(!remote.isValid)
    // On the calling thread.
    let localName = uniquePortName("round4-invalidating-handler-local")
    let outcome = Box<Result<[UInt8]?, PortError>?>(nil)
    TestThread.run {
      do throws(PortError) {
        let localSlot = Box<MessagePort?>(nil)
        let local = try MessagePort.local(name: localName) { _ in
          localSlot.value?.invalidate()
          return [1]
        }
        localSlot.value = local
        RunLoop.current.add(local, forMode: .default)
        let remote = try MessagePort.remote(name: localName)
        let invalidations = AtomicInteger<Int>(0)
        remote.setInvalidationHandler { _ in _ = invalidations.fetchAdd(1, ordering: .relaxed) }
        do throws(PortError) {
          outcome.value = .success(
            try remote.send(msgid: 1, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply))
        } catch {
          outcome.value = .failure(error)
        }
        // As over the socket: the remote port found its peer gone.
        #expect(!remote.isValid)
        #expect(invalidations.load(ordering: .relaxed) == 1)
        localSlot.value = nil
      } catch {
        outcome.value = .failure(error)
      }
    }
    switch outcome.value {
    case .success(let reply):
      Issue.record("the reply \(String(describing: reply)) of a handler that invalidated its port was returned")
    case .failure(let error):
      #expect(error.status == .becameInvalid)
    case nil:
      Issue.record("no outcome")
    }
  }

  /// A remote port whose peer was invalidated, with the name then registered again by a
  /// new local port scheduled in the calling thread's run loop: a request on the old remote
  /// port must not be answered by the new port's handler (the remote port is connected to
  /// the old port, which is gone): it fails with `becameInvalid`, as it does when another
  /// thread serves the new port.
  @Test func aStaleRemotePortIsNotAnsweredByANewPortOfTheSameName() throws {
    let name = uniquePortName("round4-stale-remote")
    let outcome = Box<Result<[UInt8]?, PortError>?>(nil)
    TestThread.run {
      do throws(PortError) {
        let old = try MessagePort.local(name: name) { _ in [1] }
        let remote = try MessagePort.remote(name: name)
        old.invalidate()
        let replacement = try MessagePort.local(name: name) { _ in [2] }
        RunLoop.current.add(replacement, forMode: .default)
        do throws(PortError) {
          outcome.value = .success(
            try remote.send(msgid: 1, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply))
        } catch {
          outcome.value = .failure(error)
        }
        replacement.invalidate()
      } catch {
        outcome.value = .failure(error)
      }
    }
    switch outcome.value {
    case .success(let reply):
      Issue.record("the stale remote port got the reply \(String(describing: reply)) from the new port's handler")
    case .failure(let error):
      #expect(error.status == .becameInvalid)
    case nil:
      Issue.record("no outcome")
    }
  }

  /// Server limits at their largest (no overflow adding to them or computing deadlines):
  /// the port serves as usual.
  @Test func theLargestServerLimitsServe() throws {
    let name = uniquePortName("round4-largest-limits")
    let limits = MessagePort.ServerLimits(
      maximumPeers: .max, maximumBufferedBytesPerPeer: .max, maximumBufferedBytesTotal: .max,
      slowPeerTimeout: Duration(attoseconds: .max))
    let port = try MessagePort.local(name: name, limits: limits) { message in [UInt8(truncatingIfNeeded: message.msgid)]
    }
    let server = portsServeInBackground(port)
    defer {
      port.invalidate()
      precondition(pthread_join(server, nil) == 0)
    }
    let remote = try MessagePort.remote(name: name)
    for msgid in Int32(1)...3 {
      #expect(
        try remote.send(
          msgid: msgid, data: [UInt8](repeating: 1, count: 1 << 20), sendTimeout: .seconds(10),
          receiveTimeout: .seconds(10), replyMode: .awaitReply) == [UInt8(msgid)])
    }
  }

  /// Threads racing on one timer while its loop fires it: re-dating, re-tuning and
  /// invalidating it from other threads (run under ThreadSanitizer in CI). Once
  /// `invalidate()` returned on any thread, the block is released (at the latest when a
  /// firing in progress returns) and never runs again.
  @Test func threadsRacingOnAFiringTimer() throws {
    let worker = try RunLoopThread.start(name: "round4-timer-race")
    let released = AtomicInteger<Int>(0)
    let fires = AtomicInteger<Int>(0)
    for round in 0..<20 {
      let timer = RunLoopTimer(fireAt: .distantPast, interval: .microseconds(50)) {
        [probe = Round4HostileProbe { _ = released.fetchAdd(1, ordering: .relaxed) }] _ in
        withExtendedLifetime(probe) { _ = fires.fetchAdd(1, ordering: .relaxed) }
      }
      worker.runLoop.add(timer, forMode: .default)
      runThreads(3) { index in
        for step in 0..<200 {
          switch index {
          case 0: timer.setNextFireDate(step % 2 == 0 ? .distantPast : .after(.microseconds(10)))
          case 1: timer.interval = .microseconds(Int64(20 + step % 5))
          default: timer.tolerance = .microseconds(Int64(step % 7))
          }
        }
      }
      timer.invalidate()
      // A firing that began before the invalidation may still be running: its end is the
      // latest point the block goes.
      try worker.runLoop.performAndWait(inModes: [.default], timeout: .seconds(10)) {}
      #expect(released.load(ordering: .relaxed) == round + 1)
      let settled = fires.load(ordering: .relaxed)
      for _ in 0..<3 { try worker.runLoop.performAndWait(inModes: [.default], timeout: .seconds(10)) {} }
      #expect(fires.load(ordering: .relaxed) == settled, "the timer fired after its invalidation")
    }
    worker.stop()
  }

  /// "An observer added during a pass is seen from the next notification point on": one
  /// added by a before-timers observer is not called for that before-timers point, but is
  /// for the same pass's before-sources point.
  @Test func anObserverAddedDuringANotificationIsSeenFromTheNextPoint() {
    let calls = Recorder<String>()
    TestThread.run {
      let loop = RunLoop.current
      let added = RunLoopObserver(activities: [.beforeTimers, .beforeSources], order: 10) { _, activity in
        calls.append(activity == .beforeTimers ? "added: timers" : "added: sources")
      }
      let adder = RunLoopObserver(activities: .beforeTimers, repeats: false, order: 0) { _, _ in
        calls.append("adder")
        loop.add(added, forMode: .default)
      }
      loop.add(adder, forMode: .default)
      loop.add(RunLoopSource(perform: {}), forMode: .default)
      _ = loop.run(mode: .default, timeout: .zero)
      #expect(calls.snapshot == ["adder", "added: sources"])
      added.invalidate()
    }
  }

  /// A waiting request whose deadline passes while its block runs "is waited for, and
  /// counts as run": the call returns normally, after the block ended. (Under load the
  /// block may start only after the deadline: then the request was withdrawn and the block
  /// must never run.)
  @Test func aRequestWhoseDeadlinePassesWhileItRunsIsWaitedFor() throws {
    let worker = try RunLoopThread.start(name: "round4-started-request")
    let started = AtomicInteger<Int>(0)
    let finished = AtomicInteger<Int>(0)
    let deadline = MonotonicInstant.after(.milliseconds(40))
    var threw = false
    do {
      try worker.runLoop.performAndWait(inModes: [.default], before: deadline) {
        started.store(1, ordering: .releasing)
        // Still running when the caller's deadline passes (well under the stall limit).
        let until = deadline.advanced(by: .milliseconds(30))
        while !until.hasPassed { sched_yield() }
        finished.store(1, ordering: .releasing)
      }
    } catch {
      threw = true
      #expect(error == .timedOut)
    }
    let finishedAtReturn = finished.load(ordering: .acquiring)
    try worker.runLoop.performAndWait(inModes: [.default], timeout: .seconds(10)) {}
    worker.stop()
    if threw {
      #expect(started.load(ordering: .acquiring) == 0, "a withdrawn request ran")
    } else {
      #expect(finishedAtReturn == 1, "the call returned while its block still ran")
    }
  }

  /// A port handler that sends to its own port for every message: a pass delivers the
  /// messages queued when it began, not those its handler adds, so the pass (and a run with
  /// a zero timeout) ends; the rest wait for the next pass.
  @Test func aHandlerFeedingItsOwnPortDoesNotKeepThePassGoing() throws {
    let port = Port(capacity: 64)
    let delivered = AtomicInteger<Int>(0)
    port.setHandler { message in
      _ = delivered.fetchAdd(1, ordering: .relaxed)
      try? port.send(PortMessage(msgid: message.msgid + 1), before: .distantPast)
    }
    for _ in 0..<3 { try port.send(PortMessage(msgid: 0), before: .distantPast) }
    TestThread.run {
      let loop = RunLoop.current
      loop.add(port, forMode: .default)
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(delivered.load(ordering: .relaxed) == 3)
      #expect(port.pendingMessageCount == 3)
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(delivered.load(ordering: .relaxed) == 6)
      loop.remove(port, forMode: .default)
    }
    _ = port.invalidate()
  }

  /// A handler that serves its own port again re-enters a serving pass: misuse, stopped
  /// with a message that says so (not one about two threads, which would send the reader
  /// looking for a second thread).
  @Test(.runsExitTests) func servingAPortFromItsOwnHandlerIsMisuseNamedAsSuch() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      round4ServeFromTheOwnHandler()
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("own handler"), "\(stderr)")
  }

  /// A run-loop thread with an empty name, and with a long one holding a NUL and multi-byte
  /// characters: it starts, serves requests, and reports the name as given.
  @Test func runLoopThreadsWithOddNamesStartAndServe() throws {
    for name in ["", "round4-\u{0}-caf\u{e9}-\u{1F600}-" + String(repeating: "n", count: 200)] {
      let worker = try RunLoopThread.start(name: name)
      let ran = AtomicInteger<Int>(0)
      try worker.runLoop.performAndWait(timeout: .seconds(10)) { _ = ran.fetchAdd(1, ordering: .relaxed) }
      #expect(ran.load(ordering: .relaxed) == 1)
      #expect(worker.thread.name == name)
      worker.stop()
    }
  }
}

/// Runs `action` when released.
private final class Round4HostileProbe: Sendable {
  let action: @Sendable () -> Void
  init(_ action: @escaping @Sendable () -> Void) { self.action = action }
  deinit { action() }
}
