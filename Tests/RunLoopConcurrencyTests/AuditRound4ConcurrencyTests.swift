import ProcessTestSupport
import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Round 4: bad input and hostile sequences for the RunLoopConcurrency module.
@Suite(.timeLimit(.minutes(3))) struct AuditRound4ConcurrencyTests {
  // MARK: Readiness: events of interest

  /// `readiness(of:events:)` with no event of interest (`[]`, or only `.hangUp`/`.error`,
  /// which are "reported, never requested") could never report anything: its source is
  /// enabled for no event, so every `next()` would wait until cancelled, even on a
  /// descriptor that has hung up. Like an empty `modes`, it is refused when the sequence is
  /// created (misuse), not left to hang.
  @Test(.runsExitTests) func readinessWithNoEventOfInterestStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      createReadinessOnAHungUpPipe(events: [])
    }
    if let result {
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("FileDescriptorReadiness"))
    }
  }

  /// The same for the events that are only ever reported, never requested.
  @Test(.runsExitTests) func readinessForOnlyHangUpOrErrorStopsTheProcess() async {
    await #expect(processExitsWith: .failure) { createReadinessOnAHungUpPipe(events: .hangUp) }
    await #expect(processExitsWith: .failure) { createReadinessOnAHungUpPipe(events: [.error, .hangUp]) }
  }

  /// A negative descriptor and a closed one ("one that is not open (`EBADF`)") stop the
  /// process when the sequence is created, with a message.
  @Test(.runsExitTests) func readinessOfAnInvalidDescriptorStopsTheProcess() async {
    let negative = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      let loop = LoopThread()
      let readiness = loop.runLoop.readiness(of: -1, events: .readable)
      withExtendedLifetime(readiness) {}
      exit(0)
    }
    if let negative { #expect(!negative.standardErrorContent.isEmpty) }
    let closed = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      // The loop first: its own descriptors must not take the closed number.
      let loop = LoopThread()
      var fds: [Int32] = [0, 0]
      _ = pipe(&fds)
      close(fds[0])
      close(fds[1])
      let readiness = loop.runLoop.readiness(of: fds[0], events: .readable)
      withExtendedLifetime(readiness) {}
      exit(0)
    }
    if let closed { #expect(!closed.standardErrorContent.isEmpty) }
  }

  /// With `.readable` plus the reported-only events the sequence works as with `.readable`.
  @Test func readinessWithReadableAndReportedOnlyEventsReportsAHangUp() async {
    let loop = LoopThread()
    let (readEnd, writeEnd) = makePipe()
    let readiness = loop.runLoop.readiness(of: readEnd, events: [.readable, .hangUp, .error])
    close(writeEnd)
    var iterator = readiness.makeAsyncIterator()
    #expect(await iterator.next()?.contains(.hangUp) == true)
    loop.stop()
    close(readEnd)
  }

  // MARK: Readiness: cancellation racing delivery (seeded)

  /// Waiters cancelled at random moments while a byte is written: nothing hangs, and once the
  /// byte is there a `next()` that is not cancelled reports the descriptor readable (the
  /// level is never lost). Seeded; about a second at most.
  @Test func readinessCancellationRacingDeliveryNeverLosesTheLevel() async {
    var generator = SeededGenerator(seed: 0xfd_2026)
    let loop = LoopThread()
    let (readEnd, writeEnd) = makePipe()
    let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
    let deadline = MonotonicInstant.after(.seconds(1))
    var rounds = 0
    var problems: [String] = []
    while !deadline.hasPassed && rounds < 200 {
      rounds += 1
      let waiter = Task { () -> FileDescriptorSource.Events? in
        var iterator = readiness.makeAsyncIterator()
        return await iterator.next()
      }
      let writeFirst = generator.next() % 2 == 0
      if writeFirst { writeByte(writeEnd) }
      if generator.next() % 3 != 0 { await Task.yield() }
      waiter.cancel()
      if !writeFirst { writeByte(writeEnd) }
      _ = await waiter.value
      // The byte is there: a fresh, uncancelled call must see it (maybe after a stale report).
      var iterator = readiness.makeAsyncIterator()
      var sawReadable = false
      for _ in 0..<3 {
        if let events = await iterator.next(), events.contains(.readable) {
          sawReadable = true
          break
        }
      }
      if !sawReadable { problems.append("round \(rounds): readable not reported") }
      var byte: UInt8 = 0
      if read(readEnd, &byte, 1) != 1 { problems.append("round \(rounds): no byte to read") }
    }
    #expect(problems == [])
    loop.stop()
    close(readEnd)
    close(writeEnd)
  }

  // MARK: Port messages: concurrent consumers cancelled at random (seeded)

  /// Two consumers that are cancelled and restarted at random while a sender sends: every
  /// message is received exactly once, and each consumer sees its messages in the order sent.
  @Test func portMessagesWithRandomlyCancelledConsumersLoseAndDuplicateNothing() async {
    var generator = SeededGenerator(seed: 0xb0_2026)
    let loop = LoopThread()
    // Room for every message: the sender never waits for the consumers, whose tasks a loaded
    // cooperative pool (the whole suite in parallel) may not run for seconds.
    let port = Port(capacity: 512)
    let messages = port.messages(on: loop.runLoop)
    let total = 300
    // Ten more than the loop below takes at most: its consumers never wait for a message
    // that is not sent.
    let sent = total + 10
    let sender = TestThread.spawn { for id in 0..<sent { sendMessage(id, to: port) } }
    var received: [Int32] = []
    var outOfOrder = 0
    while received.count < total {
      let batch = Int(generator.next() % 5) + 1
      let consumers = (0..<2).map { _ in
        Task { () -> [Int32] in
          var got: [Int32] = []
          var iterator = messages.makeAsyncIterator()
          while got.count < batch, let message = await iterator.next() { got.append(message.msgid) }
          return got
        }
      }
      if generator.next() % 2 == 0 { await Task.yield() }
      if generator.next() % 2 == 0 { consumers[Int(generator.next() % 2)].cancel() }
      if generator.next() % 4 == 0 { for consumer in consumers { consumer.cancel() } }
      for consumer in consumers {
        let got = await consumer.value
        if got != got.sorted() { outOfOrder += 1 }
        received.append(contentsOf: got)
      }
    }
    await sender.joined()
    // Everything not received yet is buffered in the sequence or still in the port.
    var iterator = messages.makeAsyncIterator()
    while received.count < sent, let message = await iterator.next() { received.append(message.msgid) }
    #expect(outOfOrder == 0)
    #expect(received.sorted() == (0..<Int32(sent)).map { $0 })
    loop.stop()
  }

  // MARK: performAndAwait: cancellation racing the block (seeded)

  /// Requests cancelled at random moments: the call returns the block's value exactly when
  /// the block ran, throws `.cancelled` exactly when it never ran (and never runs later), and
  /// never throws `.targetExited` while the loop runs.
  @Test func performAndAwaitOutcomesMatchWhetherTheBlockRan() async {
    var generator = SeededGenerator(seed: 0xa5_2026)
    let loop = LoopThread()
    let deadline = MonotonicInstant.after(.seconds(1))
    var flags: [AtomicBool] = []
    var outcomes: [String] = []
    while !deadline.hasPassed && flags.count < 400 {
      let ran = AtomicBool(false)
      let index = flags.count
      flags.append(ran)
      let task = Task { await performOutcome(on: loop.runLoop, index, ran) }
      switch generator.next() % 4 {
      case 0: task.cancel()
      case 1:
        await Task.yield()
        task.cancel()
      case 2:
        for _ in 0..<Int(generator.next() % 50) { await Task.yield() }
        task.cancel()
      default: break
      }
      outcomes.append(await task.value)
    }
    loop.onLoop {}  // a pass after every call: a withdrawn block would have run by now
    var mismatches: [String] = []
    for (index, outcome) in outcomes.enumerated() {
      let ran = flags[index].load(ordering: .acquiring)
      switch outcome {
      case "value" where ran, "cancelled" where !ran: break
      default: mismatches.append("request \(index): \(outcome), ran \(ran)")
      }
    }
    #expect(mismatches == [])
    loop.stop()
  }

  /// Requests racing the end of the loop's thread and cancellations: every call returns
  /// (none hangs), with the block's value exactly when the block ran, and `.cancelled` or
  /// `.targetExited` exactly when it never ran. Seeded, a few rounds.
  @Test func performAndAwaitRacingTheLoopsEndReturnsEveryCall() async {
    var generator = SeededGenerator(seed: 0xe7_2026)
    var mismatches: [String] = []
    for round in 0..<15 {
      let loop = LoopThread()
      let count = Int(generator.next() % 12) + 1
      let stopAt = Int(generator.next() % UInt64(count + 1))
      let flags = (0..<count).map { _ in AtomicBool(false) }
      var tasks: [Task<String, Never>] = []
      var stopper: Task<Void, Never>? = nil
      for index in 0..<count {
        if index == stopAt { stopper = Task { await offPool { loop.stop() } } }
        let ran = flags[index]
        tasks.append(
          Task { await performOutcome(on: loop.runLoop, index, ran) })
        if generator.next() % 4 == 0 { tasks[index].cancel() }
      }
      if stopper == nil { stopper = Task { await offPool { loop.stop() } } }
      await stopper?.value
      for index in 0..<count {
        let outcome = await tasks[index].value
        let ran = flags[index].load(ordering: .acquiring)
        switch outcome {
        case "value" where ran, "cancelled" where !ran, "targetExited" where !ran: break
        default: mismatches.append("round \(round) request \(index): \(outcome), ran \(ran)")
        }
      }
    }
    #expect(mismatches == [])
  }

  // MARK: RunLoopThreadGroup: shutdown racing tasks and sleeps (seeded)

  /// Tasks preferring the group, some sleeping (short, zero, negative and far-past delays),
  /// some cancelled, while the group shuts down at a random moment: every task finishes with
  /// its value ("No job is dropped"), and the shutdown returns.
  @Test func groupShutdownRacingSleepingTasksDropsNoJob() async throws {
    var generator = SeededGenerator(seed: 0x96_2026)
    for round in 0..<6 {
      let group = try await RunLoopThreadGroup.start(threadCount: Int(generator.next() % 3) + 1, name: "audit4-race")
      let count = Int(generator.next() % 16) + 1
      let shutdownAt = Int(generator.next() % UInt64(count + 1))
      var tasks: [Task<Int, Never>] = []
      var shutdown: Task<Void, Never>? = nil
      for index in 0..<count {
        if index == shutdownAt { shutdown = Task { await group.shutDown() } }
        let delay: Duration
        switch generator.next() % 5 {
        case 0: delay = .milliseconds(Int64(generator.next() % 20))
        case 1: delay = .zero
        case 2: delay = .seconds(-5)
        case 3: delay = .seconds(Int64.min / 4)
        default: delay = .nanoseconds(1)
        }
        let cancelIt = generator.next() % 4 == 0
        tasks.append(
          Task(executorPreference: group) {
            try? await Task.sleep(for: delay)
            await Task.yield()
            return index + round * 100
          })
        if cancelIt { tasks[index].cancel() }
      }
      if shutdown == nil { shutdown = Task { await group.shutDown() } }
      for index in 0..<count {
        let value = await tasks[index].value
        #expect(value == index + round * 100)
      }
      await shutdown?.value
      #expect(group.isShutDown)
    }
  }

  // MARK: JoinableThread.value from a cancelled task

  /// "Cancellation of the awaiting task does not end the wait": a task cancelled before it
  /// even calls `value()` still gets the thread's result, many times over.
  @Test func aThreadsValueIsDeliveredToAnAlreadyCancelledTask() async throws {
    for round in 0..<20 {
      let release = Latch(count: 1)
      let worker = try Thread.spawn(name: "value-cancelled") { () throws(Never) -> Int in
        release.wait()
        return round
      }
      var handle = Optional(consume worker)
      let value = await Task { () -> Int in
        withUnsafeCurrentTask { $0?.cancel() }
        release.countDown()
        return await handle.take()!.value()
      }.value
      #expect(value == round)
    }
  }

  // MARK: RunLoopExecutor with duplicate modes

  /// Modes named twice (`[.default, .default]`, a private mode twice, and `.common` with the
  /// `.default` it contains): each job still runs exactly once, on the loop's thread, and the
  /// executor shuts down.
  @Test(arguments: [
    [RunLoopMode.default, .default], [RunLoopMode("audit4-twice"), RunLoopMode("audit4-twice")], [.common, .default],
  ])
  func anExecutorWithDuplicateModesRunsEachJobOnce(_ modes: [RunLoopMode]) async {
    let loop = LoopThread()
    if modes.contains(RunLoopMode("audit4-twice")) {
      // The loop runs only the default mode: run the private one nested from there until done.
      let counter = DuplicateModeCounter(loop: loop, modes: modes)
      let ran = counter.ranCount
      let stop = AtomicBool(false)
      loop.runLoop.perform {
        while !stop.load(ordering: .acquiring) {
          _ = RunLoop.current.run(mode: RunLoopMode("audit4-twice"), before: .after(.milliseconds(20)))
        }
      }
      for _ in 0..<50 { await counter.bump() }
      #expect(ran.load(ordering: .acquiring) == 50)
      #expect(await counter.value == 50)
      await counter.executor.shutDown()
      stop.store(true, ordering: .releasing)
    } else {
      let counter = DuplicateModeCounter(loop: loop, modes: modes)
      for _ in 0..<50 { await counter.bump() }
      #expect(counter.ranCount.load(ordering: .acquiring) == 50)
      #expect(await counter.value == 50)
      await counter.executor.shutDown()
    }
    #expect(DuplicateModeCounter.wrongThread.load(ordering: .acquiring) == 0)
    loop.stop()
  }

  // MARK: RunLoopThreadGroup: bad counts and names

  /// `threadCount` below 1 stops the process with a message naming the misuse, for the most
  /// negative count too.
  @Test(.runsExitTests) func aGroupWithIntMinThreadsStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      _ = try? await RunLoopThreadGroup.start(threadCount: Int.min, name: "audit4")
      exit(0)
    }
    if let result {
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("RunLoopThreadGroup"))
    }
  }

  /// A group whose threads are `finishBeforeExit` would make `exit()` wait for ever: its
  /// run-loop threads run until the group is shut down, as a pool's idle workers wait for
  /// work (which ``ThreadPool`` refuses for that reason). Refused at creation (misuse, with a
  /// message naming the setting), not left to hang the process's exit.
  @Test(.runsExitTests) func aGroupOfFinishBeforeExitThreadsIsRefused() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(10)
      var configuration = ThreadConfiguration()
      configuration.finishBeforeExit = true
      let group = try? await RunLoopThreadGroup.start(
        threadCount: 1, name: "audit4-critical", configuration: configuration)
      withExtendedLifetime(group) {}
      exit(0)
    }
    if let result {
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(text.contains("RunLoopThreadGroup misuse") && text.contains("finishBeforeExit"), "\(text)")
    }
  }

  /// A group name that is empty, very long, or holds a NUL: the threads start, keep their
  /// full names `"<name>-<i>"`, and the group runs tasks and shuts down.
  @Test(arguments: ["", String(repeating: "long-group-", count: 500), "nul\u{0}group"])
  func oddGroupNamesStartAndRunTasks(_ name: String) async throws {
    let group = try await RunLoopThreadGroup.start(threadCount: 2, name: name)
    #expect(group.threads.map(\.name) == ["\(name)-0", "\(name)-1"])
    let value = await Task(executorPreference: group) { 6 * 7 }.value
    #expect(value == 42)
    await group.shutDown()
    #expect(group.isShutDown)
  }
}

/// In an exit test's child: creates a readiness sequence for `events` on a pipe whose write
/// end is closed (a sequence interested in `.readable` would report its hang-up at once),
/// then exits with status 0.
private func createReadinessOnAHungUpPipe(events: FileDescriptorSource.Events) -> Never {
  alarm(20)
  var fds: [Int32] = [0, 0]
  _ = pipe(&fds)
  close(fds[1])
  let loop = LoopThread()
  let readiness = loop.runLoop.readiness(of: fds[0], events: events)
  withExtendedLifetime(readiness) {}
  exit(0)
}

/// An actor on a `RunLoopExecutor` with the given modes, counting the jobs it ran.
private actor DuplicateModeCounter {
  static let wrongThread = AtomicInteger<Int>(0)
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  nonisolated let ranCount = AtomicInteger<Int>(0)
  private let thread: Thread
  private(set) var value = 0

  init(loop: LoopThread, modes: [RunLoopMode]) {
    executor = RunLoopExecutor(runLoop: loop.runLoop, modes: modes)
    thread = loop.thread
  }

  func bump() {
    if Thread.current !== thread { _ = DuplicateModeCounter.wrongThread.increment(ordering: .relaxed) }
    _ = ranCount.increment(ordering: .relaxed)
    value += 1
  }
}

/// Awaits a block on `runLoop` that marks `ran` and returns `index`; names the outcome:
/// "value", "cancelled", "targetExited", or what went wrong.
private func performOutcome(on runLoop: RunLoop, _ index: Int, _ ran: AtomicBool) async -> String {
  do throws(AwaitedPerformError<Never>) {
    let value = try await runLoop.performAndAwait { () -> Int in
      ran.store(true, ordering: .releasing)
      return index
    }
    return value == index ? "value" : "wrong"
  } catch {
    if case .cancelled = error { return "cancelled" }
    if case .targetExited = error { return "targetExited" }
    return "\(error)"
  }
}
