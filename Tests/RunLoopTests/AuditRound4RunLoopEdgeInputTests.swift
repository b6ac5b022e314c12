import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

/// Runs `action` when released.
private final class Round4Probe: Sendable {
  let action: @Sendable () -> Void
  init(_ action: @escaping @Sendable () -> Void) { self.action = action }
  deinit { action() }
}

/// Adds a source for `descriptor` to the calling thread's run loop.
private func round4AddSource(for descriptor: Int32) {
  let source = FileDescriptorSource(descriptor: descriptor) { _, _ in }
  _ = RunLoop.current.add(source, forMode: .default)
}

/// Watches the calling thread's loop's own poll descriptor from that loop (never allowed).
private func round4WatchOwnPollDescriptor() {
  let loop = RunLoop.current
  let source = FileDescriptorSource(descriptor: loop.pollDescriptor) { _, _ in }
  _ = loop.add(source, forMode: .default)
}

/// Audit round 4: the RunLoop module at bad inputs (extreme durations and instants, empty
/// and odd names, duplicate modes, invalid descriptors, extreme message ids and sizes) and
/// hostile sequences (calls from inside the callbacks they affect, calls after
/// invalidation).
@Suite("Audit round 4: RunLoop edge inputs", .timeLimit(.minutes(3)))
struct AuditRound4RunLoopEdgeInputTests {
  // MARK: Running

  /// "A zero or negative timeout makes exactly one pass", down to the most negative
  /// Duration (no overflow computing the deadline).
  @Test func theMostNegativeTimeoutsMakeOnePass() {
    let outcome = Box<[RunLoopRunResult]>([])
    TestThread.run {
      let loop = RunLoop.current
      let source = RunLoopSource(perform: {})
      loop.add(source, forMode: .default)
      var results: [RunLoopRunResult] = []
      for timeout in [
        Duration.seconds(Int64.min), .nanoseconds(Int64.min), Duration(attoseconds: Int128(Int64.min) << 40),
      ] {
        results.append(loop.run(mode: .default, timeout: timeout))
      }
      results.append(loop.run(mode: .default, before: .distantPast))
      source.invalidate()
      outcome.value = results
    }
    #expect(outcome.value == [.timedOut, .timedOut, .timedOut, .timedOut])
  }

  /// Modes are named by any string: the empty name and a name with a NUL byte are modes of
  /// their own, distinct from every other (no truncation at the NUL).
  @Test func emptyAndNULNamedModesAreDistinctModes() {
    let fired = Recorder<String>()
    TestThread.run {
      let loop = RunLoop.current
      let empty = RunLoopMode("")
      let withNUL = RunLoopMode("a\u{0}b")
      let plain = RunLoopMode("a")
      let first = RunLoopSource(perform: { fired.append("empty") })
      let second = RunLoopSource(perform: { fired.append("nul") })
      loop.add(first, forMode: empty)
      loop.add(second, forMode: withNUL)
      first.signal()
      second.signal()
      #expect(loop.run(mode: plain, timeout: .zero) == .finished)
      #expect(loop.run(mode: withNUL, timeout: .zero) == .timedOut)
      #expect(loop.run(mode: empty, timeout: .zero) == .timedOut)
      #expect(loop.allModes.isSuperset(of: [empty, withNUL]))
      #expect(!loop.allModes.contains(plain))
      first.invalidate()
      second.invalidate()
    }
    #expect(fired.snapshot == ["nul", "empty"])
  }

  /// A block queued for duplicate modes (and for `.common` plus a common mode) is one
  /// request: it runs once.
  @Test func aBlockForDuplicateModesRunsOnce() {
    let runs = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      loop.perform(inModes: [.default, .default, .common, .default]) { _ = runs.fetchAdd(1, ordering: .relaxed) }
      for _ in 0..<3 { _ = loop.run(mode: .default, timeout: .zero) }
    }
    #expect(runs.load(ordering: .relaxed) == 1)
  }

  /// A delayed perform for duplicate modes runs once too.
  @Test func aDelayedPerformForDuplicateModesRunsOnce() {
    let runs = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      let request = loop.perform(afterDelay: .zero, inModes: [.default, .common, .default]) {
        _ = runs.fetchAdd(1, ordering: .relaxed)
      }
      for _ in 0..<3 { _ = loop.run(mode: .default, timeout: .zero) }
      #expect(!request.isPending)
    }
    #expect(runs.load(ordering: .relaxed) == 1)
  }

  /// `perform(afterDelay:)` with the largest delays: pending, due at `.distantFuture`,
  /// never run, and cancel releases its block at once.
  @Test func aDelayedPerformWithTheLargestDelayWaitsAndCancels() {
    let released = AtomicInteger<Int>(0)
    let ran = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      for delay in [Duration.seconds(Int64.max), Duration(attoseconds: .max)] {
        let probe = Round4Probe { _ = released.fetchAdd(1, ordering: .relaxed) }
        let request = loop.perform(afterDelay: delay, inModes: [.default]) {
          withExtendedLifetime(probe) { _ = ran.fetchAdd(1, ordering: .relaxed) }
        }
        #expect(request.isPending)
        #expect(request.fireDate == .distantFuture)
        #expect(loop.run(mode: .default, timeout: .milliseconds(5)) == .timedOut)
        request.cancel()
        #expect(!request.isPending)
      }
      #expect(released.load(ordering: .relaxed) == 2)
    }
    #expect(ran.load(ordering: .relaxed) == 0)
  }

  // MARK: Timers

  /// A timer at `.distantFuture` with the largest tolerance never fires and does not make
  /// the loop spin or trap computing its wake-up instant; `nextTimerFireDate` reports it.
  @Test func aTimerAtTheDistantFutureWithTheLargestToleranceWaits() {
    let fired = AtomicInteger<Int>(0)
    let passes = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      let timer = RunLoopTimer(fireAt: .distantFuture, tolerance: Duration(attoseconds: .max)) { _ in
        _ = fired.fetchAdd(1, ordering: .relaxed)
      }
      let observer = RunLoopObserver(activities: .beforeWaiting) { _, _ in _ = passes.fetchAdd(1, ordering: .relaxed) }
      loop.add(observer, forMode: .default)
      loop.add(timer, forMode: .default)
      #expect(timer.tolerance == Duration(attoseconds: .max))
      #expect(loop.nextTimerFireDate(inMode: .default) == .distantFuture)
      #expect(loop.run(mode: .default, timeout: .milliseconds(30)) == .timedOut)
      timer.invalidate()
      observer.invalidate()
    }
    #expect(fired.load(ordering: .relaxed) == 0)
    // One sleep, not a spin: a few passes at most.
    #expect(passes.load(ordering: .relaxed) <= 5)
  }

  /// "A negative tolerance is treated as zero", down to the most negative Duration, in the
  /// initializer and the setter.
  @Test func theMostNegativeToleranceReadsAsZero() {
    let timer = RunLoopTimer(fireAt: .distantFuture, tolerance: Duration(attoseconds: .min)) { _ in }
    #expect(timer.tolerance == .zero)
    timer.tolerance = .seconds(5)
    timer.tolerance = .seconds(Int64.min)
    #expect(timer.tolerance == .zero)
    let repeating = RunLoopTimer(fireAt: .distantFuture, interval: .seconds(2), tolerance: .seconds(Int64.max)) { _ in }
    // Capped at half the interval.
    #expect(repeating.tolerance == .seconds(1))
  }

  /// The most negative interval makes a one-shot timer (invalidated after its firing).
  @Test func theMostNegativeIntervalMakesAOneShotTimer() {
    let fired = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      let timer = RunLoopTimer(fireAt: .distantPast, interval: Duration(attoseconds: .min)) { _ in
        _ = fired.fetchAdd(1, ordering: .relaxed)
      }
      #expect(!timer.isRepeating)
      loop.add(timer, forMode: .default)
      _ = loop.run(mode: .default, timeout: .zero)
      #expect(!timer.isValid)
    }
    #expect(fired.load(ordering: .relaxed) == 1)
  }

  /// A repeating timer first due at `.distantPast` with the smallest interval fires once per
  /// pass (a late timer fires once and keeps its grid) and its next fire date is after now,
  /// with no overflow computing the grid from `.distantPast`.
  @Test func aNanosecondTimerFromTheDistantPastFiresOncePerPass() {
    let fired = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      let timer = RunLoopTimer(fireAt: .distantPast, interval: .nanoseconds(1)) { _ in
        _ = fired.fetchAdd(1, ordering: .relaxed)
      }
      loop.add(timer, forMode: .default)
      for _ in 0..<3 {
        let before = MonotonicInstant.now
        _ = loop.run(mode: .default, timeout: .zero)
        #expect(timer.nextFireDate > before)
      }
      #expect(timer.scheduledFireDate != nil)
      timer.invalidate()
    }
    #expect(fired.load(ordering: .relaxed) == 3)
  }

  /// From its own callback, a repeating timer's `setNextFireDate(.distantPast)` is earlier
  /// than the instant it was due at: ignored, the timer goes to its next grid point. A
  /// `.distantFuture` date is later: honoured, the timer waits (valid) until then.
  @Test func extremeDatesSetFromTheOwnCallbackFollowTheCoreFoundationRule() {
    let outcome = Box<(MonotonicInstant, MonotonicInstant, MonotonicInstant, Bool)?>(nil)
    TestThread.run {
      let loop = RunLoop.current
      let due = MonotonicInstant.now - .milliseconds(1)
      let early = RunLoopTimer(fireAt: due, interval: .seconds(60)) { timer in timer.setNextFireDate(.distantPast) }
      let late = RunLoopTimer(fireAt: due, interval: .seconds(60)) { timer in timer.setNextFireDate(.distantFuture) }
      loop.add(early, forMode: .default)
      loop.add(late, forMode: .default)
      _ = loop.run(mode: .default, timeout: .zero)
      outcome.value = (due, early.nextFireDate, late.nextFireDate, late.isValid)
      early.invalidate()
      late.invalidate()
    }
    guard let (due, early, late, lateValid) = outcome.value else { return }
    #expect(early == due.advanced(by: .seconds(60)))
    #expect(late == .distantFuture)
    #expect(lateValid)
  }

  /// A timer invalidated and re-armed from its own callback, then added to its loop again
  /// from that callback, fires again at the next pass (libuv: `uv_timer_stop` then
  /// `uv_timer_start` from the callback).
  @Test func aTimerInvalidatedAndRearmedFromItsCallbackFiresAgain() {
    let fired = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      let timer = RunLoopTimer(fireAt: .distantPast) { timer in
        _ = fired.fetchAdd(1, ordering: .relaxed)
        timer.invalidate()
        timer.rearm(fireAt: .distantPast) { _ in _ = fired.fetchAdd(10, ordering: .relaxed) }
        #expect(loop.add(timer, forMode: .default))
      }
      loop.add(timer, forMode: .default)
      _ = loop.run(mode: .default, timeout: .zero)
      #expect(timer.isValid)
      _ = loop.run(mode: .default, timeout: .zero)
      #expect(!timer.isValid)
    }
    #expect(fired.load(ordering: .relaxed) == 11)
  }

  /// A timer whose callback moves it to a run loop of another thread: removed from every
  /// mode here, added there, it fires there, not here again.
  @Test func aTimerMovedToAnotherLoopFromItsCallbackFiresThere() throws {
    let worker = try RunLoopThread.start()
    let fired = Recorder<String>()
    let target = worker.runLoop
    TestThread.run {
      let loop = RunLoop.current
      let timer = RunLoopTimer(fireAt: .distantPast, interval: .milliseconds(1)) { timer in
        let here = RunLoop.current === target ? "worker" : "test"
        fired.append(here)
        if here == "test" {
          loop.remove(timer, forMode: .default)
          #expect(target.add(timer, forMode: .default))
        } else {
          timer.invalidate()
        }
      }
      loop.add(timer, forMode: .default)
      _ = loop.run(mode: .default, timeout: .zero)
      waitUntil { !timer.isValid }
      _ = loop.run(mode: .default, timeout: .zero)
    }
    worker.stop()
    #expect(fired.snapshot == ["test", "worker"])
  }

  // MARK: Sources and observers

  /// A source whose handler invalidates itself and signals a second source that the same
  /// handler then invalidates: neither fires again, and the loop finishes (empty).
  @Test func sourcesInvalidatedFromAHandlerDoNotFireAndTheModeEnds() {
    let fired = Recorder<String>()
    TestThread.run {
      let loop = RunLoop.current
      let second = RunLoopSource(perform: { fired.append("second") })
      let first = Box<RunLoopSource?>(nil)
      first.value = RunLoopSource(perform: {
        fired.append("first")
        second.signal()
        second.invalidate()
        first.value?.invalidate()
        first.value?.signal()
      })
      loop.add(first.value!, forMode: .default)
      loop.add(second, forMode: .default)
      first.value!.signal()
      #expect(loop.run(mode: .default, timeout: .seconds(2)) == .finished)
      first.value = nil
    }
    #expect(fired.snapshot == ["first"])
  }

  /// An observer that invalidates itself in its first callout is not called again, and a
  /// non-repeating observer is called once, even when the run nests.
  @Test func anObserverInvalidatedInItsCalloutIsNotCalledAgain() {
    let calls = AtomicInteger<Int>(0)
    let oneShotCalls = AtomicInteger<Int>(0)
    TestThread.run {
      let loop = RunLoop.current
      let observer = RunLoopObserver(activities: .allActivities) { observer, _ in
        _ = calls.fetchAdd(1, ordering: .relaxed)
        observer.invalidate()
      }
      let oneShot = RunLoopObserver(activities: .beforeTimers, repeats: false) { _, _ in
        _ = oneShotCalls.fetchAdd(1, ordering: .relaxed)
        _ = loop.run(mode: .default, timeout: .zero)
      }
      let source = RunLoopSource(perform: {})
      loop.add(source, forMode: .default)
      loop.add(observer, forMode: .default)
      loop.add(oneShot, forMode: .default)
      for _ in 0..<3 { _ = loop.run(mode: .default, timeout: .zero) }
      #expect(!observer.isValid)
      #expect(!oneShot.isValid)
      source.invalidate()
    }
    #expect(calls.load(ordering: .relaxed) == 1)
    #expect(oneShotCalls.load(ordering: .relaxed) == 1)
  }

  // MARK: In-process ports

  /// Message ids at both extremes and an empty payload travel unchanged through a port,
  /// by `receive` and by a run-loop handler.
  @Test func extremeMessageIdsAndEmptyPayloadsTravelUnchanged() throws {
    let port = Port(capacity: 4)
    for msgid in [Int32.min, Int32.max, 0, -1] {
      try port.send(PortMessage(msgid: msgid), before: .distantPast)
    }
    var received: [Int32] = []
    for _ in 0..<4 {
      let message = try port.receive(before: .distantPast)
      #expect(message.payload.isEmpty)
      received.append(message.msgid)
    }
    #expect(received == [Int32.min, Int32.max, 0, -1])
    let delivered = Recorder<Int32>()
    TestThread.run {
      let loop = RunLoop.current
      port.setHandler { delivered.append($0.msgid) }
      loop.add(port, forMode: .default)
      try? port.send(PortMessage(msgid: .min), before: .distantPast)
      try? port.send(PortMessage(msgid: .max), before: .distantPast)
      _ = loop.run(mode: .default, timeout: .zero)
      loop.remove(port, forMode: .default)
    }
    #expect(delivered.snapshot == [.min, .max])
    _ = port.invalidate()
  }

  /// Deadlines at the extremes: a full port with a `.distantPast` deadline (and the most
  /// negative timeout) fails at once with `sendTimeout`; an empty one's receive with those
  /// fails at once with `receiveTimeout`.
  @Test func extremePastDeadlinesFailAtOnce() throws {
    let port = Port(capacity: 1)
    try port.send(PortMessage(msgid: 1), timeout: .seconds(Int64.min))
    for attempt in 0..<2 {
      let error = #expect(throws: PortError.self) {
        if attempt == 0 {
          try port.send(PortMessage(msgid: 2), before: .distantPast)
        } else {
          try port.send(PortMessage(msgid: 2), timeout: Duration(attoseconds: .min))
        }
      }
      #expect(error?.status == .sendTimeout)
    }
    _ = try port.receive(timeout: .zero)
    for attempt in 0..<2 {
      let error = #expect(throws: PortError.self) {
        if attempt == 0 {
          _ = try port.receive(before: .distantPast)
        } else {
          _ = try port.receive(timeout: Duration(attoseconds: .min))
        }
      }
      #expect(error?.status == .receiveTimeout)
    }
    _ = port.invalidate()
  }

  /// A port invalidated by its own handler while several messages wait: the handler is not
  /// called again, the rest are dropped, and later sends throw `invalid`.
  @Test func aPortInvalidatedByItsHandlerDeliversNoMore() throws {
    let port = Port()
    let delivered = Recorder<Int32>()
    let invalidations = AtomicInteger<Int>(0)
    port.setInvalidationHandler { _ in _ = invalidations.fetchAdd(1, ordering: .relaxed) }
    port.setHandler { message in
      delivered.append(message.msgid)
      _ = port.invalidate()
      _ = port.invalidate()
    }
    for msgid in Int32(1)...3 { try port.send(PortMessage(msgid: msgid), before: .distantPast) }
    TestThread.run {
      let loop = RunLoop.current
      loop.add(port, forMode: .default)
      loop.add(RunLoopSource(perform: {}), forMode: .default)
      for _ in 0..<3 { _ = loop.run(mode: .default, timeout: .zero) }
      #expect(!loop.contains(port, inMode: .default))
    }
    #expect(delivered.snapshot == [1])
    #expect(invalidations.load(ordering: .relaxed) == 1)
    let error = #expect(throws: PortError.self) { try port.send(PortMessage(msgid: 4), before: .distantPast) }
    #expect(error?.status == .invalid)
  }

  // MARK: Named message ports

  /// Message ids at both extremes and an empty payload travel unchanged through a named
  /// port (the wire format's 32-bit field), one way and as requests.
  @Test func extremeMessageIdsTravelThroughANamedPort() throws {
    let name = uniquePortName("round4-msgid")
    let seen = Recorder<Int32>()
    let port = try MessagePort.local(name: name) { message in
      seen.append(message.msgid)
      return message.payload.isEmpty ? withUnsafeBytes(of: message.msgid.littleEndian) { Array($0) } : nil
    }
    let server = portsServeInBackground(port)
    defer {
      port.invalidate()
      precondition(pthread_join(server, nil) == 0)
    }
    let remote = try MessagePort.remote(name: name)
    for msgid in [Int32.min, Int32.max] {
      let reply = try remote.send(
        msgid: msgid, data: [], sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
      #expect(reply == withUnsafeBytes(of: msgid.littleEndian) { Array($0) })
      try remote.send(msgid: msgid, sendTimeout: .seconds(10), receiveTimeout: .zero, replyMode: .oneWay)
    }
    waitUntil { seen.count == 4 }
    #expect(seen.snapshot == [.min, .min, .max, .max])
  }

  /// A malformed reply port name on a send is refused before anything is sent, with
  /// `invalid`, and the remote port stays usable; an over-limit payload is refused with
  /// `transportError` (payloadTooLarge) and also leaves the port usable.
  @Test func refusedOutgoingMessagesLeaveTheRemotePortUsable() throws {
    let name = uniquePortName("round4-refused")
    let seen = Recorder<Int32>()
    let port = try MessagePort.local(name: name) { message in
      seen.append(message.msgid)
      return [1]
    }
    let server = portsServeInBackground(port)
    defer {
      port.invalidate()
      precondition(pthread_join(server, nil) == 0)
    }
    let remote = try MessagePort.remote(name: name)
    for bad in ["", "a/b", "a\u{0}b", String(repeating: "r", count: 65), ".dot", "caf\u{e9}"] {
      let error = #expect(throws: PortError.self) {
        try remote.send(
          msgid: 1, replyPortName: bad, sendTimeout: .seconds(5), receiveTimeout: .seconds(5), replyMode: .awaitReply)
      }
      #expect(error?.status == .invalid, "reply port name \(bad.debugDescription)")
    }
    let tooLarge = #expect(throws: PortError.self) {
      try remote.send(
        msgid: 2, data: [UInt8](repeating: 0, count: (1 << 20) + 1), sendTimeout: .seconds(5),
        receiveTimeout: .seconds(5), replyMode: .awaitReply)
    }
    #expect(tooLarge?.status == .transportError)
    #expect(tooLarge?.reason == .payloadTooLarge)
    #expect(remote.isValid)
    // The largest payload and the longest reply name go through.
    let reply = try remote.send(
      msgid: 3, data: [UInt8](repeating: 9, count: 1 << 20), replyPortName: String(repeating: "r", count: 64),
      sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
    #expect(reply == [1])
    #expect(seen.snapshot == [3])
  }

  /// A handler's reply over the 1 MiB payload limit: the requester gets a typed error
  /// (never a crash or a hang), and the same request answered on the calling thread (the
  /// port served only by this thread's run loop) is held to the same limit, so a request
  /// does not succeed or fail depending on which thread serves the port.
  @Test func anOversizedReplyIsATypedErrorWhicheverThreadServes() throws {
    let big = [UInt8](repeating: 5, count: (1 << 20) + 1)
    // Served by another thread: over the socket (also a reply far over the limit, beyond
    // what the server buffers for a peer).
    let name = uniquePortName("round4-big-reply")
    let huge = [UInt8](repeating: 6, count: 16 << 20)
    let port = try MessagePort.local(name: name) { message in message.msgid == 1 ? big : huge }
    let server = portsServeInBackground(port)
    var remoteError: PortError? = nil
    for msgid in Int32(1)...2 {
      let remote = try MessagePort.remote(name: name)
      let error = #expect(throws: PortError.self) {
        try remote.send(msgid: msgid, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
      }
      #expect(error?.status == .transportError, "reply \(msgid): \(String(describing: error))")
      #expect(!remote.isValid)
      remoteError = error
    }
    port.invalidate()
    precondition(pthread_join(server, nil) == 0)
    // Served by this thread's run loop only: answered on the calling thread.
    let localName = uniquePortName("round4-big-reply-local")
    let localOutcome = Box<Result<Int, PortError>?>(nil)
    TestThread.run {
      do throws(PortError) {
        let local = try MessagePort.local(name: localName) { _ in big }
        RunLoop.current.add(local, forMode: .default)
        let remote = try MessagePort.remote(name: localName)
        do throws(PortError) {
          let reply = try remote.send(
            msgid: 1, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
          localOutcome.value = .success(reply?.count ?? 0)
        } catch {
          localOutcome.value = .failure(error)
        }
        local.invalidate()
      } catch {
        localOutcome.value = .failure(error)
      }
    }
    switch localOutcome.value {
    case .success(let count):
      let overSocket = String(describing: remoteError)
      Issue.record("a reply of \(count) bytes was returned on the calling thread; over the socket: \(overSocket)")
    case .failure(let error):
      #expect(error.status == .transportError)
      #expect(error.reason == .payloadTooLarge)
    case nil:
      Issue.record("no outcome")
    }
  }

  // MARK: Descriptor sources

  /// A source for a negative or never-opened descriptor number is misuse when added: the
  /// process stops with a message naming the descriptor, not a silent `false` or a crash
  /// without a message.
  @Test(.runsExitTests) func addingASourceForAnInvalidDescriptorNamesIt() async {
    let results = [
      await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        alarm(20)
        round4AddSource(for: -1)
      },
      await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        alarm(20)
        round4AddSource(for: Int32.min)
      },
      await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        alarm(20)
        round4AddSource(for: Int32.max)
      },
    ]
    for (result, descriptor) in zip(results, [Int32(-1), Int32.min, Int32.max]) {
      let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
      #expect(stderr.contains("\(descriptor)"), "\(stderr)")
    }
  }

  /// Adding the loop's own `pollDescriptor` to the loop ("never add it to the loop's own
  /// epoll set") is refused by the kernel (`EINVAL`): misuse, stopped with a message naming
  /// the descriptor.
  @Test(.runsExitTests) func watchingTheLoopsOwnPollDescriptorIsMisuse() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      round4WatchOwnPollDescriptor()
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("cannot be watched"), "\(stderr)")
  }

  /// A descriptor source's enable/disable with no events, or with only the report-only
  /// events (`.error`, `.hangUp`), requests nothing: the source is disabled, and enabling
  /// `.readable` again works.
  @Test func reportOnlyEventsAreNeverRequested() {
    var ends: [Int32] = [0, 0]
    #expect(pipe(&ends) == 0)
    defer {
      close(ends[0])
      close(ends[1])
    }
    let calls = AtomicInteger<Int>(0)
    let source = FileDescriptorSource(descriptor: ends[0], events: [.error, .hangUp]) { _, _ in
      _ = calls.fetchAdd(1, ordering: .relaxed)
    }
    #expect(source.enabledEvents == [])
    source.enable([.error, .hangUp])
    #expect(source.enabledEvents == [])
    source.enable(FileDescriptorSource.Events(rawValue: .max))
    #expect(source.enabledEvents == [.readable, .writable])
    source.disable(FileDescriptorSource.Events(rawValue: .max))
    #expect(source.enabledEvents == [])
    source.enable(.readable)
    #expect(source.enabledEvents == .readable)
    let readFD = ends[0]
    let writeFD = ends[1]
    TestThread.run {
      let loop = RunLoop.current
      loop.add(source, forMode: .default)
      var byte: UInt8 = 1
      _ = write(writeFD, &byte, 1)
      _ = loop.run(mode: .default, timeout: .zero)
      source.invalidate()
      _ = read(readFD, &byte, 1)
    }
    #expect(calls.load(ordering: .relaxed) == 1)
  }

  // MARK: Embedding

  /// `runDueWork` in a mode that does not exist creates nothing and answers `finished`,
  /// as a run in such a mode does ("running a mode that does not exist creates nothing");
  /// a timer then added to that mode still makes the handed-over descriptor readable when it
  /// is due, and the next call fires it.
  @Test func dueWorkInAnUnknownModeFinishesAndCreatesNothing() {
    let outcome = Box<(RunLoopDueWorkResult, Bool, Bool, Int)?>(nil)
    TestThread.run {
      let loop = RunLoop.current
      let mode = RunLoopMode("round4-unknown")
      let result = loop.runDueWork(mode: mode)
      let created = loop.allModes.contains(mode)
      let fired = AtomicInteger<Int>(0)
      let timer = RunLoopTimer(after: .milliseconds(5)) { _ in _ = fired.fetchAdd(1, ordering: .relaxed) }
      loop.add(timer, forMode: mode)
      var watched = pollfd(fd: loop.pollDescriptor, events: Int16(POLLIN), revents: 0)
      var count: Int32
      repeat { count = poll(&watched, 1, 5_000) } while count < 0 && errno == EINTR
      _ = loop.runDueWork(mode: mode)
      outcome.value = (result, created, count > 0, fired.load(ordering: .relaxed))
      timer.invalidate()
    }
    #expect(outcome.value?.0.result == .finished)
    #expect(outcome.value?.1 == false)
    #expect(outcome.value?.2 == true)
    #expect(outcome.value?.3 == 1)
  }

  // MARK: Run-loop threads

  /// A run-loop thread runs until `stop()`, so one that is `finishBeforeExit` would make
  /// `exit()` wait for ever (as a pool's idle workers, which `ThreadPool` refuses for that
  /// reason): refused at start (misuse, with a message naming the setting), not left to hang
  /// the process's exit.
  @Test(.runsExitTests) func aFinishBeforeExitRunLoopThreadIsRefused() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(10)
      blocking {
        var configuration = ThreadConfiguration()
        configuration.finishBeforeExit = true
        let thread = try? RunLoopThread.start(name: "audit4-critical", configuration: configuration)
        withExtendedLifetime(thread) {}
      }
      exit(0)
    }
    if let result {
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(text.contains("RunLoopThread") && text.contains("finishBeforeExit"), "\(text)")
    }
  }
}
