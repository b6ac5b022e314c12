import ProcessTestSupport
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

/// Round 6: cancellation and shutdown at random moments. Seeded property tests of the async
/// bridges and executors: whatever the moment a task is cancelled, a sequence ends or an
/// executor shuts down, nothing is lost, nothing runs or arrives twice, and nothing hangs.
/// Each test prints nothing on success and names its seed in every failure.
@Suite("Audit round 6: cancellation and shutdown at random moments", .timeLimit(.minutes(3)))
struct AuditRound6CancellationPropertyTests {
  // MARK: Port messages

  /// Three threads send to a small port (so they wait for room) while consumer tasks, one
  /// to three at a time, each take a few messages and are cancelled at random moments and
  /// replaced: every message is received exactly once, each consumer sees each sender's
  /// messages in the order sent, and so does each round of consumers after the one before
  /// ("Messages are returned in the order they were sent"; a
  /// message that reached no waiter "stays in the sequence for the next `next()` call").
  @Test func messagesFromSeveralSendersToCancelledAndReplacedConsumersArriveOnceInEachSendersOrder() async throws {
    let seed: UInt64 = 0x63_0001
    var generator = SeededGenerator(seed: seed)
    let loop = LoopThread(name: "audit6-port")
    // The consumers run on threads of their own: the senders wait for room in the port, and
    // the shared cooperative pool may be held by other tests' blocking calls for longer than
    // a send may wait (seen under ThreadSanitizer with the whole suite running).
    let consumerThreads = try await RunLoopThreadGroup.start(threadCount: 2, name: "audit6-consumers")
    let port = Port(capacity: 16)
    let messages = port.messages(on: loop.runLoop)
    let senderCount = 3
    let perSender = isRunningUnderSanitizer ? 80 : 200
    let total = senderCount * perSender
    let senders = (0..<senderCount).map { sender in
      TestThread.spawn(name: "audit6-sender") {
        for index in 0..<perSender { precondition(send(sender * 10_000 + index, to: port), "port invalid") }
      }
    }
    var received: [Int32] = []
    var lastReceived = [Int32](repeating: -1, count: senderCount)
    var problems: [String] = []
    var round = 0
    while received.count < total {
      round += 1
      // Never more wanted than will still arrive, so no consumer waits for ever.
      var wanted = total - received.count
      var consumers: [Task<[Int32], Never>] = []
      for _ in 0..<(generator.below(3) + 1) where wanted > 0 {
        let batch = min(generator.below(6) + 1, wanted)
        wanted -= batch
        consumers.append(
          Task(executorPreference: consumerThreads) {
            var got: [Int32] = []
            var iterator = messages.makeAsyncIterator()
            while got.count < batch, let message = await iterator.next() { got.append(message.msgid) }
            return got
          })
      }
      for _ in 0..<generator.below(4) { await Task.yield() }
      for consumer in consumers where generator.below(3) == 0 { consumer.cancel() }
      var newest = lastReceived
      for consumer in consumers {
        let got = await consumer.value
        for sender in 0..<senderCount {
          let mine = got.filter { Int($0) / 10_000 == sender }
          if mine != mine.sorted() { problems.append("round \(round): sender \(sender) out of order: \(mine)") }
          // The rounds follow one another: each takes messages sent after the last round's.
          if let first = mine.first, first <= lastReceived[sender] {
            problems.append("round \(round): sender \(sender)'s \(first) after \(lastReceived[sender])")
          }
          newest[sender] = max(newest[sender], mine.last ?? -1)
        }
        received.append(contentsOf: got)
      }
      lastReceived = newest
    }
    for sender in senders { await sender.joined() }
    let expected = (0..<senderCount).flatMap { sender in (0..<perSender).map { Int32(sender * 10_000 + $0) } }
    #expect(problems == [], "seed \(seed)")
    #expect(received.sorted() == expected.sorted(), "seed \(seed): lost or duplicated messages")
    #expect(port.pendingMessageCount == 0, "seed \(seed)")
    await consumerThreads.shutDown()
    loop.stop()
  }

  /// The port is invalidated at a random moment while a thread sends and one to three
  /// consumers iterate: every consumer's loop ends; the messages received are the first ones
  /// sent, each once, in order (those still queued in the port at the invalidation are
  /// dropped, those taken from it are returned); and once a consumer has seen the end, the
  /// sequence holds nothing more ("ends once the port is invalidated and the messages
  /// already taken from it are returned": no message taken before the end comes after it).
  @Test func anInvalidationAtARandomMomentEndsEveryConsumerAfterEveryTakenMessage() async {
    let seed: UInt64 = 0x63_0002
    var generator = SeededGenerator(seed: seed)
    let loop = LoopThread(name: "audit6-invalidate")
    let rounds = isRunningUnderSanitizer ? 150 : 400
    var problems: [String] = []
    for round in 0..<rounds {
      let port = Port(capacity: 256)
      let messages = port.messages(on: loop.runLoop)
      let count = generator.below(40) + 1
      let streaming = generator.below(3) == 0
      // Streaming: the messages wait in the port first, so the loop hands them over back to
      // back once the consumers wait, and the invalidation comes while it does.
      if streaming { for index in 0..<count { precondition(send(index, to: port), "port invalid") } }
      let consumers = (0...generator.below(3)).map { _ in
        Task { () -> [Int32] in
          var got: [Int32] = []
          for await message in messages { got.append(message.msgid) }
          return got
        }
      }
      let invalidateAfter = generator.below(count + 1)
      let senderInvalidates = !streaming && generator.below(2) == 0
      let sender = TestThread.spawn(name: "audit6-sender") {
        if streaming {
          // Once the loop has taken some of them, at a random point of the stream.
          let spins = MonotonicInstant.after(.seconds(5))
          while port.pendingMessageCount > count - invalidateAfter && !spins.hasPassed { sched_yield() }
          port.invalidate()
          return
        }
        for index in 0..<count {
          if senderInvalidates && index == invalidateAfter { port.invalidate() }
          if !send(index, to: port) { return }
        }
        if senderInvalidates { port.invalidate() }
      }
      if !streaming && !senderInvalidates {
        for _ in 0..<generator.below(8) { await Task.yield() }
        port.invalidate()
      }
      await sender.joined()
      var all: [Int32] = []
      for (index, consumer) in consumers.enumerated() {
        let got = await consumer.value
        if got != got.sorted() { problems.append("round \(round) consumer \(index): out of order \(got)") }
        all.append(contentsOf: got)
      }
      all.sort()
      if all != (0..<Int32(all.count)).map({ $0 }) {
        problems.append("round \(round): received \(all), not the first messages sent, once each")
      }
      // Every consumer saw the end: nothing may be left for a later call.
      let late = await Task { () -> PortMessage? in
        var iterator = messages.makeAsyncIterator()
        return await iterator.next()
      }.value
      if let late { problems.append("round \(round): message \(late.msgid) returned after the sequence ended") }
    }
    #expect(problems == [], "seed \(seed)")
    loop.stop()
  }

  /// The moment the seeded test above meets only on a loaded machine, made certain: the
  /// loop's thread has taken a message from the port when another thread invalidates it.
  /// The waiting consumer must get that message before the end ("ends once the port is
  /// invalidated and the messages already taken from it are returned"), not see the end
  /// first and leave the message to a later call.
  @Test func aMessageTakenJustBeforeTheInvalidationIsReturnedBeforeTheSequenceEnds() async {
    let loop = LoopThread(name: "audit6-taken")
    let port = Port()
    let ended = AtomicBool(false)
    let invalidator = Box<TestThread?>(nil)
    // Once, on the loop's thread, with the message taken: invalidates the port elsewhere and
    // gives the end every chance to come first (until the consumer has ended, or 100 ms:
    // the end must not come, and the loop's thread is held well below a stall).
    port.link.messageTakenForTesting = { [port] in
      guard invalidator.value == nil else { return }
      invalidator.value = TestThread.spawn(name: "audit6-invalidator") { port.invalidate() }
      let giveUp = MonotonicInstant.after(.milliseconds(100))
      while !ended.load(ordering: .acquiring) && !giveUp.hasPassed { sched_yield() }
    }
    let messages = port.messages(on: loop.runLoop)
    let consumer = Task { () -> [Int32] in
      var got: [Int32] = []
      for await message in messages { got.append(message.msgid) }
      ended.store(true, ordering: .releasing)
      return got
    }
    sendMessage(7, to: port)
    let got = await consumer.value
    await invalidator.value?.joined()
    let late = await Task { () -> PortMessage? in
      var iterator = messages.makeAsyncIterator()
      return await iterator.next()
    }.value
    #expect(got == [7], "the consumer saw the end before the message taken from the port")
    #expect(late == nil, "a message came after the end")
    loop.stop()
    // After the join, which orders the loop thread's reads before it; ends the cycle
    // port → hook → port.
    port.link.messageTakenForTesting = nil
  }

  // MARK: Descriptor readiness

  /// One to three tasks await a pipe's readiness while a byte is written at a random moment
  /// and some of them are cancelled at random: each task that is not cancelled gets a report
  /// with `.readable` (the level is reported to each waiter in turn, never lost); a
  /// cancelled one returns nil or a report. Then the sequence is released, and nothing (no
  /// waiter, continuation or callback) keeps it alive.
  ///
  /// Each round watches a pipe of its own: a sequence whose last reference a finished task
  /// drops is released on that task's thread, maybe after the test saw the task's value,
  /// and its source stops watching the descriptor only when its deinit has run, which no
  /// weak reference shows (it reads nil from the deinit's start).
  @Test func readinessWaitersCancelledAtRandomLoseNoLevelAndTheReleasedSequenceIsGone() async {
    let seed: UInt64 = 0x63_0003
    var generator = SeededGenerator(seed: seed)
    let loop = LoopThread(name: "audit6-readiness")
    let rounds = isRunningUnderSanitizer ? 40 : 100
    var problems: [String] = []
    var pipes: [(Int32, Int32)] = []
    let gone = WeakReadinessReference()
    for round in 0..<rounds {
      let (readEnd, writeEnd) = makePipe()
      pipes.append((readEnd, writeEnd))
      problems += await readinessRound(
        round, loop: loop, readEnd: readEnd, writeEnd: writeEnd, generator: &generator, gone: gone)
      // The round's sequence, iterators and tasks are released: nothing else may keep it. (A
      // finished task's closure, which captured it, is released by the thread that ran the
      // task, maybe just after the test saw its value: that is waited for, a leak is not.)
      let giveUp = MonotonicInstant.after(.seconds(10))
      while gone.value != nil && !giveUp.hasPassed { await Task.yield() }
      if gone.value != nil { problems.append("round \(round): the released sequence is still alive") }
    }
    #expect(problems == [], "seed \(seed)")
    loop.stop()
    for (readEnd, writeEnd) in pipes {
      close(readEnd)
      close(writeEnd)
    }
  }

  /// "Release it first": a sequence whose every reference the caller has dropped, right
  /// after one of its `next()` calls returned, is released then, so a new sequence for the
  /// same port, or the same descriptor, may be created at once, many times over. (In an exit
  /// test: the misuse check, were the old sequence still alive, stops the process.)
  @Test(.runsExitTests) func aSequenceReleasedRightAfterItsNextReturnedMakesRoomForANewOneAtOnce() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      let loop = LoopThread(name: "audit6-again")
      let port = Port()
      let (readEnd, writeEnd) = makePipe()
      writeByte(writeEnd)  // always readable: every `next()` returns at once
      for round in 0..<300 {
        do {
          let messages = port.messages(on: loop.runLoop)
          sendMessage(round, to: port)
          var iterator = messages.makeAsyncIterator()
          let message = await iterator.next()
          precondition(message?.msgid == Int32(round), "round \(round): message lost")
        }
        do {
          let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
          var iterator = readiness.makeAsyncIterator()
          let events = await iterator.next()
          precondition(events?.contains(.readable) == true, "round \(round): not readable")
        }
      }
      loop.stop()
      exit(0)
    }
  }

  // MARK: JoinableThread.value

  /// `await thread.value()` in tasks cancelled at random moments (before the call, while
  /// the thread runs, after it ended), for threads that return or throw at once or later:
  /// every call returns the thread's own result, after its exit handlers ran ("Cancellation
  /// of the awaiting task does not end the wait").
  @Test func awaitingAThreadsValueCancelledAtRandomMomentsAlwaysReturnsItsResult() async throws {
    struct Refused: Error, Equatable { let round: Int }
    let seed: UInt64 = 0x63_0004
    var generator = SeededGenerator(seed: seed)
    let rounds = isRunningUnderSanitizer ? 60 : 150
    var problems: [String] = []
    for round in 0..<rounds {
      let release = Latch(count: 1)
      let exitHandlerRan = AtomicBool(false)
      let waits = generator.below(2) == 0
      let throwsError = generator.below(3) == 0
      let worker = try Thread.spawn(name: "audit6-value") { () throws(Refused) -> Int in
        Thread.current.onExit { exitHandlerRan.store(true, ordering: .releasing) }
        if waits { release.wait() }
        if throwsError { throw Refused(round: round) }
        return round
      }
      let cancelBefore = generator.below(4) == 0
      var handle = Optional(consume worker)
      let call = Task { () -> (Result<Int, Refused>, Bool) in
        if cancelBefore { withUnsafeCurrentTask { $0?.cancel() } }
        do throws(Refused) {
          let value = try await handle.take()!.value()
          return (.success(value), exitHandlerRan.load(ordering: .acquiring))
        } catch {
          return (.failure(error), exitHandlerRan.load(ordering: .acquiring))
        }
      }
      for _ in 0..<generator.below(4) { await Task.yield() }
      let cancelFirst = generator.below(2) == 0
      if cancelFirst { call.cancel() }
      release.countDown()
      if !cancelFirst && generator.below(2) == 0 { call.cancel() }
      let (outcome, handlersRan) = await call.value
      let expected: Result<Int, Refused> = throwsError ? .failure(Refused(round: round)) : .success(round)
      if outcome != expected { problems.append("round \(round): \(outcome), expected \(expected)") }
      if !handlersRan { problems.append("round \(round): returned before the thread's exit handlers ran") }
    }
    #expect(problems == [], "seed \(seed)")
  }

  // MARK: performAndAwait

  /// Typed-throwing blocks awaited on a loop whose thread is stopped at a random moment,
  /// their tasks cancelled at random: every call returns (none hangs); each block runs at most
  /// once; the call returns its value or its error exactly when it ran, and `.cancelled` or
  /// `.targetExited` exactly when it never ran (checked after the thread ended, so "never
  /// runs" is final); `.targetExited` only after the stop began.
  @Test func awaitedBlocksRacingTheLoopsEndAndCancellationRunAtMostOnceAndReportWhetherTheyRan() async {
    let seed: UInt64 = 0x63_0005
    var generator = SeededGenerator(seed: seed)
    let rounds = isRunningUnderSanitizer ? 12 : 30
    var problems: [String] = []
    for round in 0..<rounds {
      let loop = LoopThread(name: "audit6-perform")
      let count = generator.below(16) + 1
      let stopAt = generator.below(count + 1)
      let runs = (0..<count).map { _ in AtomicInteger<Int>(0) }
      let stopping = AtomicBool(false)
      var calls: [Task<AwaitedOutcome, Never>] = []
      var stopper: Task<Void, Never>? = nil
      for index in 0..<count {
        if index == stopAt {
          stopper = Task {
            await offPool {
              stopping.store(true, ordering: .releasing)
              loop.stop()
            }
          }
        }
        let fails = generator.below(3) == 0
        calls.append(
          Task {
            await awaitedOutcome(on: loop.runLoop, index: index, fails: fails, runs: runs[index], stopping: stopping)
          })
        switch generator.below(4) {
        case 0: calls[index].cancel()
        case 1:
          await Task.yield()
          calls[index].cancel()
        default: break
        }
      }
      if stopper == nil {
        stopper = Task {
          await offPool {
            stopping.store(true, ordering: .releasing)
            loop.stop()
          }
        }
      }
      await stopper?.value
      for index in 0..<count {
        let outcome = await calls[index].value
        let ran = runs[index].load(ordering: .acquiring)
        switch outcome {
        case .value where ran == 1, .failed where ran == 1, .cancelled where ran == 0: break
        case .targetExitedAfterStop where ran == 0: break
        default: problems.append("round \(round) call \(index): \(outcome), ran \(ran) times")
        }
      }
    }
    #expect(problems == [], "seed \(seed)")
  }

  // MARK: RunLoopExecutor shutdown

  /// Chains of jobs on an actor pinned to a loop, each link queueing the next from its job
  /// (as a task of a random priority), while the executor is shut down at a random moment,
  /// blocking or awaited: the shutdown returns only after every link of every chain ran,
  /// each exactly once, on the loop's thread ("including jobs those jobs enqueue meanwhile").
  @Test func anExecutorShutDownAtARandomMomentRunsEveryChainedJobExactlyOnce() async {
    let seed: UInt64 = 0x63_0006
    var generator = SeededGenerator(seed: seed)
    let rounds = isRunningUnderSanitizer ? 10 : 25
    var problems: [String] = []
    for round in 0..<rounds {
      let loop = LoopThread(name: "audit6-shutdown")
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      let chains = (0..<(generator.below(5) + 1)).map { _ in generator.below(40) }
      let ledger = ChainLedger(lengths: chains)
      let actor = ChainLinks(executor: executor, ledger: ledger, thread: loop.thread)
      for (chain, length) in chains.enumerated() {
        let priorities = (0...length).map { _ in chainPriorities[generator.below(chainPriorities.count)] }
        await actor.link(chain: chain, step: 0, of: length, priorities: priorities)
      }
      for _ in 0..<generator.below(6) { await Task.yield() }
      if generator.below(2) == 0 {
        await offPool { executor.shutDown() }
      } else {
        await executor.shutDown()
      }
      let report = ledger.problems()
      if !report.isEmpty { problems.append("round \(round) (chains \(chains)): \(report)") }
      if executor.queuedJobCount != 0 { problems.append("round \(round): jobs queued after the shutdown") }
      loop.stop()
    }
    #expect(problems == [], "seed \(seed)")
  }

  // MARK: Task.sleep cancelled at random moments

  /// Sleeps in an actor pinned to a loop and in tasks preferring a group, of random lengths
  /// (some far too long to end by themselves), cancelled at random moments: a sleep that
  /// returns normally was never early; one that throws throws `CancellationError`, only in
  /// a cancelled task, and a long one cancelled ends long before its deadline; the actor's
  /// sleeps resume on the loop's thread, the group's on one of its threads.
  @Test func sleepsCancelledAtRandomMomentsEndPromptlyWithCancellationAndOtherwiseNeverEarly() async throws {
    let seed: UInt64 = 0x63_0007
    var generator = SeededGenerator(seed: seed)
    let loop = LoopThread(name: "audit6-sleep")
    let sleeper = Sleeper(executor: RunLoopExecutor(runLoop: loop.runLoop), thread: loop.thread)
    let group = try await RunLoopThreadGroup.start(threadCount: 2, name: "audit6-sleep")
    let groupThreads = group.threads
    let count = isRunningUnderSanitizer ? 24 : 60
    var tasks: [(task: Task<SleepOutcome, Never>, duration: Duration, cancelled: Bool)] = []
    for index in 0..<count {
      let long = generator.below(3) == 0
      let duration: Duration = long ? .seconds(20) : .milliseconds(Int64(generator.below(15)))
      let onGroup = index % 2 == 1
      let task: Task<SleepOutcome, Never>
      if onGroup {
        task = Task(executorPreference: group) {
          let outcome = await timedSleep(duration)
          return SleepOutcome(
            elapsed: outcome.elapsed, error: outcome.error,
            rightThread: groupThreads.contains { $0 === Thread.current })
        }
      } else {
        task = Task { await sleeper.sleep(duration) }
      }
      // Every long sleep is cancelled (the test would wait for it otherwise).
      let cancelIt = long || generator.below(3) == 0
      tasks.append((task, duration, cancelIt))
      if cancelIt && generator.below(2) == 0 { task.cancel() }
      for _ in 0..<generator.below(3) { await Task.yield() }
    }
    for entry in tasks where entry.cancelled { entry.task.cancel() }
    var problems: [String] = []
    for (index, entry) in tasks.enumerated() {
      let outcome = await entry.task.value
      if !outcome.rightThread { problems.append("sleep \(index) resumed on the wrong thread") }
      switch outcome.error {
      case nil:
        if outcome.elapsed < entry.duration {
          problems.append("sleep \(index) of \(entry.duration) ended early, after \(outcome.elapsed)")
        }
      case let error?:
        if !(error is CancellationError) { problems.append("sleep \(index) threw \(error)") }
        if !entry.cancelled { problems.append("sleep \(index) threw though its task was not cancelled") }
        if entry.duration >= .seconds(20) && outcome.elapsed >= .seconds(10) {
          problems.append("cancelled sleep \(index) ended only after \(outcome.elapsed)")
        }
      }
    }
    #expect(problems == [], "seed \(seed)")
    await sleeper.executor.shutDown()
    await group.shutDown()
    loop.stop()
  }

  // MARK: RunLoopThreadGroup shutdown racing enqueues

  /// Three plain threads create tasks preferring a group (each yielding a few times, so its
  /// jobs come and go across the shutdown) while the group is shut down at a random moment:
  /// every task's body runs to its end exactly once, on a group thread or (once its thread is
  /// closed) elsewhere ("No job is dropped"), and the shutdown returns with the group shut down.
  @Test func aGroupShutDownRacingTasksCreatedOnSeveralThreadsRunsEveryTaskOnce() async throws {
    let seed: UInt64 = 0x63_0008
    var generator = SeededGenerator(seed: seed)
    let rounds = isRunningUnderSanitizer ? 6 : 15
    var problems: [String] = []
    for round in 0..<rounds {
      let group = try await RunLoopThreadGroup.start(threadCount: generator.below(3) + 1, name: "audit6-race")
      let perThread = generator.below(30) + 1
      let yields = (0..<(3 * perThread)).map { _ in generator.below(4) }
      let runs = (0..<(3 * perThread)).map { _ in AtomicInteger<Int>(0) }
      let tasks = Recorder<Task<Void, Never>>()
      let started = AtomicInteger<Int>(0)
      let shutDownAfter = generator.below(3 * perThread + 1)
      let creators = (0..<3).map { thread in
        TestThread.spawn(name: "audit6-creator") {
          for local in 0..<perThread {
            let index = thread * perThread + local
            let yieldCount = yields[index]
            tasks.append(
              Task(executorPreference: group) {
                for _ in 0..<yieldCount { await Task.yield() }
                runs[index].increment(ordering: .relaxed)
              })
            started.increment(ordering: .relaxed)
          }
        }
      }
      while started.load(ordering: .relaxed) < shutDownAfter { await Task.yield() }
      await group.shutDown()
      for creator in creators { await creator.joined() }
      for task in tasks.snapshot { await task.value }
      for (index, count) in runs.enumerated() where count.load(ordering: .relaxed) != 1 {
        problems.append("round \(round) task \(index): ran \(count.load(ordering: .relaxed)) times")
      }
      if !group.isShutDown { problems.append("round \(round): not shut down") }
    }
    #expect(problems == [], "seed \(seed)")
  }
}

// MARK: - Helpers

/// Sends a message with `id`, waiting for room; false once the port is invalid.
private func send(_ id: Int, to port: Port) -> Bool {
  do {
    try port.send(PortMessage(msgid: Int32(id)), timeout: .seconds(30))
    return true
  } catch {
    if error.status == .invalid || error.status == .becameInvalid { return false }
    fatalError("send: \(error)")
  }
}

/// One round of the readiness property: a new sequence for `readEnd` (recorded weakly in
/// `gone`), waiters cancelled at random, a byte written at a random moment and read back.
/// Returns the problems found; everything the round made is released when it returns.
private func readinessRound(
  _ round: Int, loop: LoopThread, readEnd: Int32, writeEnd: Int32, generator: inout SeededGenerator,
  gone: WeakReadinessReference
) async -> [String] {
  var problems: [String] = []
  let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
  gone.value = readiness
  let waiters = (0...generator.below(3)).map { _ in
    Task { () -> FileDescriptorSource.Events? in
      var iterator = readiness.makeAsyncIterator()
      return await iterator.next()
    }
  }
  let writeFirst = generator.below(2) == 0
  if writeFirst { writeByte(writeEnd) }
  for _ in 0..<generator.below(4) { await Task.yield() }
  var cancelled: [Bool] = []
  for waiter in waiters {
    let cancelIt = generator.below(2) == 0
    if cancelIt { waiter.cancel() }
    cancelled.append(cancelIt)
  }
  if !writeFirst { writeByte(writeEnd) }
  for (index, waiter) in waiters.enumerated() {
    let events = await waiter.value
    if !cancelled[index] && events?.contains(.readable) != true {
      problems.append("round \(round) waiter \(index): \(String(describing: events)) though not cancelled")
    }
  }
  var byte: UInt8 = 0
  if read(readEnd, &byte, 1) != 1 { problems.append("round \(round): no byte to read") }
  return problems
}

/// A weak reference to a readiness sequence.
private final class WeakReadinessReference: @unchecked Sendable {
  // @unchecked: touched only by the test's task.
  weak var value: FileDescriptorReadiness?
}

/// How an awaited block ended.
private enum AwaitedOutcome: Sendable, CustomStringConvertible {
  case value
  case failed
  case cancelled
  case targetExitedAfterStop
  case other(String)

  var description: String {
    switch self {
    case .value: "value"
    case .failed: "failed"
    case .cancelled: "cancelled"
    case .targetExitedAfterStop: "targetExited"
    case .other(let text): text
    }
  }
}

private struct BlockFailure: Error, Equatable { let index: Int }

/// Awaits a block on `runLoop` that counts its runs in `runs` and returns `index` or throws.
private func awaitedOutcome(
  on runLoop: RunLoop, index: Int, fails: Bool, runs: AtomicInteger<Int>, stopping: AtomicBool
) async -> AwaitedOutcome {
  do throws(AwaitedPerformError<BlockFailure>) {
    let value = try await runLoop.performAndAwait { () throws(BlockFailure) -> Int in
      runs.increment(ordering: .releasing)
      if fails { throw BlockFailure(index: index) }
      return index
    }
    return value == index && !fails ? .value : .other("value \(value)")
  } catch {
    switch error {
    case .failed(let failure): return failure.index == index && fails ? .failed : .other("failed \(failure)")
    case .cancelled: return .cancelled
    case .targetExited:
      return stopping.load(ordering: .acquiring) ? .targetExitedAfterStop : .other("targetExited before the stop")
    }
  }
}

/// The priorities the chained links' tasks are given.
private let chainPriorities: [TaskPriority] = [.background, .low, .medium, .high, .userInitiated]

/// Which links of which chains ran, and where.
private final class ChainLedger: @unchecked Sendable {
  // @unchecked: `counts` and `wrongThread` are protected by `lock`.
  private let lock = Lock()
  private var counts: [[Int]]
  private var wrongThread = 0

  init(lengths: [Int]) { counts = lengths.map { [Int](repeating: 0, count: $0 + 1) } }

  func record(chain: Int, step: Int, onLoop: Bool) {
    lock.withLock {
      counts[chain][step] += 1
      if !onLoop { wrongThread += 1 }
    }
  }

  /// Links that ran other than once, and runs off the loop's thread; empty when all is well.
  func problems() -> String {
    lock.withLock {
      var text: [String] = []
      for (chain, steps) in counts.enumerated() {
        for (step, count) in steps.enumerated() where count != 1 {
          text.append("chain \(chain) link \(step) ran \(count)")
        }
      }
      if wrongThread > 0 { text.append("\(wrongThread) links off the loop's thread") }
      return text.joined(separator: ", ")
    }
  }
}

/// An actor pinned to a loop whose links queue the next link of their chain.
private actor ChainLinks {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  let ledger: ChainLedger
  let thread: Thread

  init(executor: RunLoopExecutor, ledger: ChainLedger, thread: Thread) {
    self.executor = executor
    self.ledger = ledger
    self.thread = thread
  }

  /// Records this link, then queues the next one from this job, as a task of the next
  /// link's priority. (Not after a `Task.yield()`: on Swift 6.3 a yielding task waits on the
  /// global executor, not on this one, so a shutdown does not wait for it.)
  func link(chain: Int, step: Int, of length: Int, priorities: [TaskPriority]) {
    ledger.record(chain: chain, step: step, onLoop: Thread.current === thread)
    guard step < length else { return }
    Task(priority: priorities[step + 1]) {
      self.link(chain: chain, step: step + 1, of: length, priorities: priorities)
    }
  }
}

/// How a sleep ended.
private struct SleepOutcome: Sendable {
  let elapsed: Duration
  let error: (any Error)?
  let rightThread: Bool
}

/// Sleeps for `duration`, returning how long it took and what it threw.
private func timedSleep(_ duration: Duration) async -> (elapsed: Duration, error: (any Error)?) {
  let start = ContinuousClock.now
  do {
    try await Task.sleep(for: duration)
    return (ContinuousClock.now - start, nil)
  } catch {
    return (ContinuousClock.now - start, error)
  }
}

/// An actor pinned to a loop that sleeps.
private actor Sleeper {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  let thread: Thread

  init(executor: RunLoopExecutor, thread: Thread) {
    self.executor = executor
    self.thread = thread
  }

  /// Sleeps in the actor (not in a nonisolated function, which would leave it).
  func sleep(_ duration: Duration) async -> SleepOutcome {
    let start = ContinuousClock.now
    var thrown: (any Error)? = nil
    do {
      try await Task.sleep(for: duration)
    } catch {
      thrown = error
    }
    return SleepOutcome(elapsed: ContinuousClock.now - start, error: thrown, rightThread: Thread.current === thread)
  }
}
