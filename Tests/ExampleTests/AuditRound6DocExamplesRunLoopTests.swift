// The code examples of RunLoop's doc comments (and of its DocC articles), compiled and run:
// each test keeps its example's lines as the doc comment shows them, with the names the
// example leaves to the reader (`refresh()`, `drain(_:)`, `store(_:)`, ...) defined around it,
// and asserts what the surrounding text claims. Examples written for the main thread's loop
// run on a thread of their own here: a test runner's main thread never runs a run loop.
import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

@Suite("RunLoop doc-comment examples", .timeLimit(.minutes(3)))
struct AuditRound6DocExamplesRunLoopTests {
  @Test("RunLoop overview: a repeating timer invalidated after five ticks")
  func overviewTimer() throws {
    let worker = try Thread.spawn(name: "loop") { () -> Int in
      let runLoop = RunLoop.current  // one per thread, created on first use
      let ticks = AtomicInteger<Int>(0)
      let timer = RunLoopTimer(after: .milliseconds(10), interval: .milliseconds(10)) { timer in
        if ticks.increment(ordering: .relaxed) == 5 { timer.invalidate() }  // never early
      }
      runLoop.add(timer, forMode: .default)
      _ = runLoop.run(mode: .default, timeout: .seconds(5))  // .finished once the timer is gone
      return ticks.load(ordering: .relaxed)
    }
    #expect(worker.join() == 5)  // print(worker.join()): 5
  }

  @Test("Run loops article: serve a port until the run is stopped or finished")
  func articlePortLoop() throws {
    let port = Port()
    let handled = AtomicInteger<Int>(0)
    port.setHandler { _ in handled.increment(ordering: .relaxed) }
    let worker = try Thread.spawn(name: "port-loop") { () -> RunLoopRunResult? in
      var last: RunLoopRunResult?
      let runLoop = RunLoop.current
      runLoop.add(port, forMode: .default)
      while !Thread.current.isExitRequested {
        let result = runLoop.run(mode: .default, timeout: .seconds(1), returnAfterSourceHandled: true)
        last = result
        if result == .stopped || result == .finished { break }
      }
      return last
    }
    try port.send(PortMessage(msgid: 1), timeout: .seconds(1))
    waitUntil { handled.load(ordering: .relaxed) == 1 }
    port.invalidate()  // the mode has nothing left: the next run finishes
    worker.thread.requestExit()
    let last = worker.join()
    #expect(handled.load(ordering: .relaxed) == 1)
    #expect(last == .finished || last == .stopped || last == .handledSource || last == .timedOut)
  }

  @Test("RunLoopMode: a timer in the common modes fires in a mode added to them")
  func commonModeTimer() throws {
    let worker = try Thread.spawn(name: "modes") { () -> RunLoopRunResult in
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .milliseconds(5)) { _ in }
      let tracking: RunLoopMode = "tracking"
      runLoop.addCommonMode(tracking)
      runLoop.add(timer, forMode: .common)  // fires in .default and in tracking
      return runLoop.run(mode: tracking, timeout: .seconds(5))
    }
    #expect(worker.join() == .finished)
  }

  @Test("RunLoopTimer: a repeating timer in the common modes")
  func repeatingCommonTimer() throws {
    let worker = try Thread.spawn(name: "refresh") { () -> Int in
      let refreshed = AtomicInteger<Int>(0)
      let timerRef = LockedValue<RunLoopTimer?>(nil)
      @Sendable func refresh() {
        if refreshed.increment(ordering: .relaxed) == 2 { timerRef.withLock { $0 }?.invalidate() }
      }
      let timer = RunLoopTimer(after: .milliseconds(100), interval: .milliseconds(300)) { _ in
        refresh()
      }
      timerRef.withLock { $0 = timer }
      RunLoop.current.add(timer, forMode: .common)
      _ = RunLoop.current.run(mode: .default, timeout: .seconds(10))
      return refreshed.load(ordering: .relaxed)
    }
    #expect(worker.join() == 2)
  }

  @Test("Perform requests: publish, wait at most a second, coalesce delayed redraws")
  func performRequests() throws {
    final class Model: Sendable {
      let results = LockedValue([Int]())
      let flushes = AtomicInteger<Int>(0)
      let redraws = AtomicInteger<Int>(0)
      func update(_ result: Int) { results.withLock { $0.append(result) } }
      func flush() { flushes.increment(ordering: .relaxed) }
      func redraw() { redraws.increment(ordering: .relaxed) }
    }
    let model = Model()
    let cache = model
    let view = model
    let result = 7
    let worker = try RunLoopThread.start(name: "perform-requests")
    // On a worker thread: publish a result on the main thread and go on.
    worker.runLoop.performAndWakeUp { model.update(result) }  // the doc uses RunLoop.main

    // Ask the worker to do something, waiting at most a second.
    try worker.runLoop.performAndWait(timeout: .seconds(1)) { cache.flush() }

    // Coalesce: only the last request within 100 ms runs.
    try worker.runLoop.performAndWait {
      var pendingRedraw: DelayedPerform?
      for _ in 0..<3 {
        pendingRedraw?.cancel()
        pendingRedraw = RunLoop.current.perform(afterDelay: .milliseconds(100)) { view.redraw() }
      }
    }
    waitUntil { model.redraws.load(ordering: .relaxed) >= 1 }
    worker.stop()
    #expect(model.results.withLock { $0 } == [7])
    #expect(model.flushes.load(ordering: .relaxed) == 1)
    #expect(model.redraws.load(ordering: .relaxed) == 1)
  }

  @Test("MessagePort: a named server answers ping with pong")
  func messagePortPingPong() throws {
    let name = "audit6.doc.example.\(getpid())"
    // Process or thread A:
    let server = try MessagePort.local(name: name) { message in
      message.msgid == 1 ? Array("pong".utf8) : nil
    }
    let running = AtomicBool(true)
    let serving = TestThread.spawn {
      do {
        while running.load(ordering: .relaxed) { _ = try server.serve(before: .after(.milliseconds(50))) }
      } catch {
        Issue.record("serve: \(error)")
      }
    }
    // Process or thread B:
    let remote = try MessagePort.remote(name: name)
    let reply = try remote.send(
      msgid: 1, data: Array("ping".utf8),
      sendTimeout: .seconds(1), receiveTimeout: .seconds(1),
      replyMode: .awaitReply)
    running.store(false, ordering: .relaxed)
    serving.join()
    remote.invalidate()
    server.invalidate()
    #expect(reply == Array("pong".utf8))
  }

  @Test("RunLoopMetrics: a window between two snapshots, printed")
  func metricsWindow() throws {
    let worker = try RunLoopThread.start(name: "metrics")
    let runLoop = worker.runLoop
    runLoop.metricsEnabled = true
    let before = runLoop.metrics
    try runLoop.performAndWait(timeout: .seconds(1)) {}
    // The block is counted once it has returned, which may be just after `performAndWait`
    // (woken by the block) returns: look again until it is (a second at most).
    let giveUp = MonotonicInstant.after(.seconds(1))
    while runLoop.metrics.changes(since: before).blocksRun == 0 && !giveUp.hasPassed { Thread.yield() }
    // ... a second later, from any thread:
    let window = runLoop.metrics.changes(since: before)
    let printed = "\(window)"  // print(window)
    worker.stop()
    #expect(window.blocksRun >= 1)
    #expect(printed.hasPrefix("passes "))
    #expect(printed.contains(", utilization "))
  }

  @Test("FileDescriptorSource: drain a socket, invalidate and close on hang-up")
  func descriptorSourceDrainAndHangUp() throws {
    var pair: [Int32] = [0, 0]
    #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
    let socket = pair[0]
    let drained = AtomicInteger<Int>(0)
    let closed = AtomicBool(false)
    @Sendable func drain(_ descriptor: Int32) {
      var buffer = [UInt8](repeating: 0, count: 64)
      let count = read(descriptor, &buffer, buffer.count)
      if count > 0 { drained.add(count, ordering: .relaxed) }
    }
    @Sendable func close(_ descriptor: Int32) {
      Glibc.close(descriptor)
      closed.store(true, ordering: .relaxed)
    }
    let worker = try Thread.spawn(name: "descriptor") {
      let source = FileDescriptorSource(descriptor: socket, events: .readable) { source, events in
        if events.contains(.readable) { drain(socket) }
        if events.contains(.hangUp) {
          source.invalidate()
          close(socket)
        }
      }
      RunLoop.current.add(source, forMode: .default)
      while !closed.load(ordering: .relaxed) { _ = RunLoop.current.run(mode: .default, timeout: .seconds(5)) }
      withExtendedLifetime(source) {}
    }
    #expect(write(pair[1], "hello", 5) == 5)
    Glibc.close(pair[1])
    worker.join()
    #expect(drained.load(ordering: .relaxed) == 5)
    #expect(closed.load(ordering: .relaxed))
  }

  @Test("Embedding: a foreign poll loop runs the loop's due work")
  func embeddingPollLoop() throws {
    let worker = try Thread.spawn(name: "foreign") { () -> (fired: Int, pollTimedOut: Bool) in
      let fired = AtomicInteger<Int>(0)
      let loop = RunLoop.current  // the doc uses RunLoop.main
      let timer = RunLoopTimer(after: .milliseconds(5)) { _ in fired.increment(ordering: .relaxed) }
      loop.add(timer, forMode: .default)
      var running: Bool { fired.load(ordering: .relaxed) == 0 }
      var pollTimedOut = false
      var watched = pollfd(fd: loop.pollDescriptor, events: Int16(POLLIN), revents: 0)
      _ = loop.runDueWork()  // once first: hands the loop to the descriptor
      while running {
        // The doc waits with -1 ("no timeout needed"): bounded here, so a hang fails the test.
        if poll(&watched, 1, 3000) == 0 {
          pollTimedOut = true
          break
        }
        if watched.revents != 0 { _ = loop.runDueWork() }
      }
      return (fired.load(ordering: .relaxed), pollTimedOut)
    }
    let outcome = worker.join()
    #expect(!outcome.pollTimedOut, "the descriptor never became readable for the timer")
    #expect(outcome.fired == 1)
  }

  @Test("spinsBeforeSleeping: switched off from another thread")
  func spinsBeforeSleepingOff() throws {
    let worker = try RunLoopThread.start(name: "no-spin")
    worker.runLoop.spinsBeforeSleeping = false
    #expect(!worker.runLoop.spinsBeforeSleeping)
    worker.stop()
  }

  @Test("RunLoop: a one-shot timer; the run finishes once it fired")
  func oneShotTimerFinishes() throws {
    let worker = try Thread.spawn(name: "one-shot") { () -> RunLoopRunResult in
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .milliseconds(100)) { _ in print("fired") }
      runLoop.add(timer, forMode: .default)
      let result = runLoop.run(mode: .default, timeout: .seconds(1))  // .finished once it fired
      return result
    }
    #expect(worker.join() == .finished)
  }

  @Test("RunLoopObserver: every activity of a run, printed")
  func observerSeesActivities() throws {
    let worker = try Thread.spawn(name: "observer") { () -> [RunLoopActivity] in
      let seen = LockedValue([RunLoopActivity]())
      let observer = RunLoopObserver(activities: .allActivities) { _, activity in
        seen.withLock { $0.append(activity) }  // print("run loop:", activity)
      }
      RunLoop.current.add(observer, forMode: .default)
      RunLoop.current.add(RunLoopTimer(after: .milliseconds(1)) { _ in }, forMode: .default)
      _ = RunLoop.current.run(mode: .default, timeout: .seconds(1))
      return seen.withLock { $0 }
    }
    let seen = worker.join()
    #expect(seen.first == .entry)
    #expect(seen.last == .exit)
  }

  @Test("RunLoopSource: commands enqueued and signalled from another thread")
  func customSourceCommands() throws {
    let commands = LockedValue([Int]())
    let done = LockedValue([Int]())
    func enqueue(_ command: Int) { commands.withLock { $0.append(command) } }
    @Sendable func drainCommands() {
      let taken = commands.withLock { queue in
        defer { queue.removeAll() }
        return queue
      }
      done.withLock { $0 += taken }
    }
    let source = RunLoopSource(order: 0, perform: { drainCommands() })
    let worker = try RunLoopThread.start(name: "commands")
    try worker.runLoop.performAndWait(timeout: .seconds(1)) {
      RunLoop.current.add(source, forMode: .default)
    }
    let command = 5
    // another thread:
    enqueue(command)
    source.signalAndWakeUp()
    waitUntil { done.withLock { $0 } == [5] }
    source.invalidate()
    worker.stop()
  }

  @Test("RunLoopThread: performAndWait, performAndWakeUp, stop")
  func runLoopThreadExample() throws {
    let log = LockedValue([String]())
    @Sendable func openFiles() { log.withLock { $0.append("open") } }
    @Sendable func flush() { log.withLock { $0.append("flush") } }
    let worker = try RunLoopThread.start(name: "io")
    try worker.runLoop.performAndWait { openFiles() }
    worker.runLoop.performAndWakeUp { flush() }
    worker.stop()  // ends the loop and joins the thread
    #expect(log.withLock { $0 }.first == "open")
  }

  @Test("RunLoopTimer(seconds:intervalSeconds:): nil for a delay that is not a number")
  func timerFromSeconds() throws {
    enum ConfigurationError: Error { case invalidDelay }
    @Sendable func tick() {}
    func make(_ userDelay: Double) throws -> RunLoopTimer {
      guard let timer = RunLoopTimer(seconds: userDelay, intervalSeconds: 0.3, { _ in tick() }) else {
        throw ConfigurationError.invalidDelay
      }
      return timer
    }
    #expect(throws: ConfigurationError.self) { try make(.nan) }
    let timer = try make(0.1)
    #expect(timer.interval == .milliseconds(300))
  }

  @Test("Port: a check-in message with a reply port, by handler or by receive")
  func portCheckIn() throws {
    let stored = LockedValue<Port?>(nil)
    @Sendable func store(_ port: Port?) { stored.withLock { $0 = port } }
    let mainPort = Port()
    // worker thread:
    let workerPort = Port()
    try mainPort.send(PortMessage(msgid: 100, replyPort: .port(workerPort)), timeout: .seconds(1))
    // ...or without one:
    let checkIn = try mainPort.receive(before: .after(.seconds(1)))
    #expect(checkIn.replyPort?.port === workerPort)

    let received = Latch(count: 1)
    let loop = try Thread.spawn(name: "check-in") {
      // main thread, with a run loop:
      mainPort.setHandler { message in
        if message.msgid == 100 { store(message.replyPort?.port) }  // Listing 3-13
        received.countDown()
      }
      RunLoop.current.add(mainPort, forMode: .default)
      _ = RunLoop.current.run(mode: .default, timeout: .seconds(5), returnAfterSourceHandled: true)
    }
    // PortMessage's example: the same check-in, built first.
    let checkInAgain = PortMessage(msgid: 100, replyPort: .port(workerPort))
    try mainPort.send(checkInAgain, timeout: .seconds(1))
    received.wait()
    loop.join()
    #expect(stored.withLock { $0 } === workerPort)
  }

  @Test("PortError: a send that times out on a full queue is told apart by its status")
  func portErrorSendTimeout() {
    let port = Port(capacity: 1)
    let message = PortMessage(msgid: 1)
    var timedOut = false
    do {
      try port.send(message, timeout: .milliseconds(50))
      try port.send(message, timeout: .milliseconds(50))
    } catch let error where error.status == .sendTimeout {
      // the receiver is not keeping up; drop or retry later
      timedOut = true
    } catch {}
    #expect(timedOut)
  }

  @Test("PortError.reason: a refused peer is told apart by its reason")
  func portErrorReasonCompiles() {
    var refused = false
    var other: PortError?
    do {
      _ = try MessagePort.remote(name: "audit6.doc.example.absent.\(getpid())", connectTimeout: .milliseconds(50))
    } catch let error where error.reason == .peerRefused {
      refused = true
    } catch {
      other = error
    }
    // No server has this name: the lookup fails, and not because a peer was refused.
    #expect(!refused)
    #expect(other != nil)
  }

  @Test("MonotonicInstant's rule: a port reports a timeout as a status, a perform request as timedOut")
  func timeoutsAsTheRuleSays() throws {
    let port = Port()
    do {
      _ = try port.receive(timeout: .zero)
      Issue.record("an empty port returned a message")
    } catch {
      #expect(error.status == .receiveTimeout)
    }
    let full = Port(capacity: 1)
    try full.send(PortMessage(msgid: 1), timeout: .zero)
    do {
      try full.send(PortMessage(msgid: 2), timeout: .zero)
      Issue.record("a full port took a second message")
    } catch {
      #expect(error.status == .sendTimeout)
    }

    // A loop whose thread is alive but not running: the request times out.
    let release = Latch(count: 1)
    let created = Latch(count: 1)
    let idle = LockedValue<RunLoop?>(nil)
    let owner = TestThread.spawn {
      idle.withLock { $0 = RunLoop.current }
      created.countDown()
      release.wait()
    }
    created.wait()
    let loop = idle.withLock { $0 }!
    do {
      try loop.performAndWait(timeout: .milliseconds(10)) {}
      Issue.record("a loop that never ran ran the request")
    } catch {
      #expect(error == .timedOut)
    }
    release.countDown()
    owner.join()
  }

}
