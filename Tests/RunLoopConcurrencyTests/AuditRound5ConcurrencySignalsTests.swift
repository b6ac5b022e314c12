import ProcessTestSupport
import RunLoop
import RunLoopConcurrency
import Sync
import Synchronization
import TestSupport
import Testing
import Threads
@_spi(ExperimentalScheduling) import _Concurrency

#if canImport(Glibc)
  import Glibc
#endif

/// Round 5: signals without `SA_RESTART` delivered to the threads the RunLoopConcurrency
/// module blocks or runs loops on, and resource accounting over many lifecycles. Every
/// scenario runs in an exit test (a process-wide handler; process-wide counts).
@Suite("Audit round 5: concurrency under signals and resource accounting", .timeLimit(.minutes(3)))
struct AuditRound5ConcurrencySignalsTests {
  // MARK: Signals

  /// A group thread hit by signals while its loop waits and runs jobs: sleeps timed by the
  /// group are never early, and every job runs once.
  @Test(.runsExitTests) func aGroupThreadHitBySignalsSleepsFullyAndRunsEveryJob() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 40)
      await groupUnderSignals()
      exit(0)
    }
  }

  /// The blocking `RunLoopExecutor.shutDown()` waits for a delayed job (`enqueue(_:after:)`,
  /// 300 ms) while actor calls keep the loop busy; the waiting thread and the loop's thread
  /// are hit by signals meanwhile: the call returns only once the delayed job ran.
  @Test(.runsExitTests) func aBlockingExecutorShutDownHitBySignalsWaitsForItsDelayedJob() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 40)
      await executorShutDownUnderSignals()
      exit(0)
    }
  }

  /// The blocking `RunLoopThreadGroup.shutDown()`, hit by signals, returns once every thread
  /// has ended, after running every queued job.
  @Test(.runsExitTests) func aBlockingGroupShutDownHitBySignalsReturnsOnceEveryThreadEnded() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 40)
      await groupShutDownUnderSignals()
      exit(0)
    }
  }

  /// Port messages as a sequence, with the loop's thread and the sender hit by signals: every
  /// message arrives once, in order.
  @Test(.runsExitTests) func portMessagesWithTheLoopAndTheSenderHitBySignalsArriveOnceInOrder() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 40)
      await portMessagesUnderSignals()
      exit(0)
    }
  }

  /// Readiness on a pipe and blocks awaited on the loop, with the loop's thread hit by
  /// signals: readiness is reported only once the byte is written (no spurious readiness
  /// from an interrupted wait), and every awaited block returns its value.
  @Test(.runsExitTests) func readinessAndAwaitedBlocksWithTheLoopHitBySignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 40)
      await readinessUnderSignals()
      exit(0)
    }
  }

  // MARK: Resources

  /// 300 groups started, used and shut down, and 100 released without a shutdown: the
  /// descriptors and threads come back, and each group object is released.
  @Test(.runsExitTests) func manyGroupLifecyclesLeaveNoDescriptorThreadOrObjectBehind() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      await groupLifecycles()
      exit(0)
    }
  }

  /// 1,000 executors on one loop, used by an actor, shut down and released, 1,000 more
  /// released unused, and 200 run-loop threads each with an executor: nothing is left.
  @Test(.runsExitTests) func manyExecutorLifecyclesLeaveNoDescriptorThreadOrObjectBehind() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      await executorLifecycles()
      exit(0)
    }
  }

  /// 1,000 threads awaited with `value()`, 1,000 blocks awaited on a loop (100 of them
  /// withdrawn by cancellation), 1,000 port sequences and 1,000 readiness sequences created
  /// and released: the descriptors and threads come back and each object is released.
  @Test(.runsExitTests) func manyBridgeLifecyclesLeaveNoDescriptorThreadOrObjectBehind() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      await bridgeLifecycles()
      exit(0)
    }
  }
}

// MARK: - Signal helpers

/// Sends SIGUSR1 to a set of kernel threads every ~100 us from its own thread until stopped.
private final class Signaller: @unchecked Sendable {
  // @unchecked: `targets` is under `lock`; `stopFlag` is atomic; `handle` is touched by the
  // creating thread only.
  private let lock = Lock()
  private var targets: [pthread_t] = []
  private let stopFlag = Atomic<Bool>(false)
  private let sent = Atomic<Int>(0)
  private var handle: JoinableThread<Void, Never>?

  init() {
    handle = try! Thread.spawn(name: "signaller") { [self] () throws(Never) in
      while !stopFlag.load(ordering: .acquiring) {
        for tid in lock.withLock({ targets }) where pthread_kill(tid, SIGUSR1) == 0 {
          sent.add(1, ordering: .relaxed)
        }
        var pause = timespec(tv_sec: 0, tv_nsec: 100_000)
        _ = nanosleep(&pause, nil)
      }
    }
  }

  func add(_ tid: pthread_t) { lock.withLock { targets.append(tid) } }

  var sentCount: Int { sent.load(ordering: .relaxed) }

  /// Stops and joins the signalling thread.
  func stop() {
    stopFlag.store(true, ordering: .releasing)
    handle.take()?.join()
  }
}

/// The `pthread_t` of `runLoop`'s thread.
private func tid(of runLoop: RunLoop) async -> pthread_t {
  try! await runLoop.performAndAwait { unblockSignalOnCallingThread() }
}

private func groupUnderSignals() async {
  installCountingSignalHandler()
  let group = try! await RunLoopThreadGroup.start(threadCount: 1, name: "signalled")
  let signaller = Signaller()
  signaller.add(await tid(of: group.runLoops[0]))
  let before = signalsHandled.load(ordering: .relaxed)
  let early = await Task(executorPreference: group) { () -> [Int64] in
    var early: [Int64] = []
    for _ in 0..<10 {
      let start = monotonicNanoseconds()
      try? await Task.sleep(for: .milliseconds(25))
      let elapsed = monotonicNanoseconds() - start
      if elapsed < 25_000_000 { early.append(elapsed) }
    }
    return early
  }.value
  let ran = Counter()
  await withTaskGroup(of: Void.self) { tasks in
    for _ in 0..<3_000 {
      tasks.addTask(executorPreference: group) { ran.value.add(1, ordering: .relaxed) }
    }
  }
  let handled = signalsHandled.load(ordering: .relaxed) - before
  signaller.stop()
  await offPool { group.shutDown() }
  precondition(handled > 0, "no signal handled: \(handled)")
  precondition(early.isEmpty, "sleeps of 25 ms on a signalled group ended early: \(early) ns")
  precondition(ran.value.load(ordering: .relaxed) == 3_000, "jobs ran: \(ran.value.load(ordering: .relaxed))")
}

private final class Counter: Sendable {
  let value = Atomic<Int>(0)
}

private func executorShutDownUnderSignals() async {
  installCountingSignalHandler()
  let loop = LoopThread(name: "signalled-loop")
  let executor = RunLoopExecutor(runLoop: loop.runLoop)
  let actor = PinnedCounter(on: loop)
  let signaller = Signaller()
  signaller.add(await tid(of: loop.runLoop))
  let (job, stamped) = await capturedStampJob()
  let delayedFrom = monotonicNanoseconds()
  executor.enqueue(ExecutorJob(job), after: .milliseconds(300), tolerance: nil, clock: .continuous)
  let calls = (0..<200).map { _ in Task { _ = await actor.increment() } }
  let before = signalsHandled.load(ordering: .relaxed)
  let returnedAfter = await offPool { () -> Int64 in
    signaller.add(unblockSignalOnCallingThread())
    executor.shutDown()
    return monotonicNanoseconds() - delayedFrom
  }
  let handled = signalsHandled.load(ordering: .relaxed) - before
  _ = await stamped.value
  for call in calls { await call.value }
  signaller.stop()
  loop.stop()
  precondition(handled > 0, "no signal handled: \(handled)")
  precondition(
    returnedAfter >= 300_000_000, "shutDown() returned \(returnedAfter) ns after a 300 ms delayed job was queued")
}

private func groupShutDownUnderSignals() async {
  installCountingSignalHandler()
  let group = try! await RunLoopThreadGroup.start(threadCount: 2, name: "signalled-group")
  let signaller = Signaller()
  for runLoop in group.runLoops {
    let thread = await tid(of: runLoop)
    signaller.add(thread)
  }
  let ran = Counter()
  // Jobs queued on the group while it shuts down; each takes a little time.
  for _ in 0..<400 {
    Task(executorPreference: group) {
      var pause = timespec(tv_sec: 0, tv_nsec: 200_000)
      _ = nanosleep(&pause, nil)
      ran.value.add(1, ordering: .relaxed)
    }
  }
  let before = signalsHandled.load(ordering: .relaxed)
  let threads = group.threads
  let allEnded = await offPool { () -> Bool in
    signaller.add(unblockSignalOnCallingThread())
    waitForSignalsHandled(5, since: before)
    // Groups started and shut down from this signalled thread too (start-up waits).
    for index in 0..<30 {
      let other = try! RunLoopThreadGroup(threadCount: 2, name: "signalled-start")
      precondition(other.threads.allSatisfy(\.isExecuting), "group \(index) returned before its threads ran")
      other.shutDown()
      precondition(other.threads.allSatisfy(\.isFinished), "group \(index)'s shutDown returned early")
    }
    group.shutDown()
    return threads.allSatisfy(\.isFinished)
  }
  signaller.stop()
  precondition(allEnded, "shutDown() returned before every group thread ended")
  precondition(group.isShutDown)
  // Jobs enqueued after the close run on the global executor; all 400 run.
  let giveUp = monotonicNanoseconds() + 20_000_000_000
  while ran.value.load(ordering: .relaxed) < 400 {
    precondition(monotonicNanoseconds() < giveUp, "jobs ran: \(ran.value.load(ordering: .relaxed)) of 400")
    await Task.yield()
  }
}

private func portMessagesUnderSignals() async {
  installCountingSignalHandler()
  let loop = LoopThread(name: "signalled-ports")
  let signaller = Signaller()
  signaller.add(await tid(of: loop.runLoop))
  let port = Port(capacity: 16)
  let messages = port.messages(on: loop.runLoop)
  let count = 3_000
  let before = signalsHandled.load(ordering: .relaxed)
  let sender = TestThread.spawn(name: "sender") {
    signaller.add(unblockSignalOnCallingThread())
    for index in 0..<count {
      do {
        try port.send(PortMessage(msgid: Int32(index)), timeout: .seconds(20))
      } catch {
        fatalError("send \(index): \(error)")
      }
    }
  }
  var received: [Int32] = []
  for await message in messages {
    received.append(message.msgid)
    if received.count == count { break }
  }
  await sender.joined()
  let handled = signalsHandled.load(ordering: .relaxed) - before
  signaller.stop()
  loop.stop()
  precondition(handled > 0, "no signal handled: \(handled)")
  precondition(received == (0..<count).map { Int32($0) }, "messages lost, duplicated or reordered")
}

private func readinessUnderSignals() async {
  installCountingSignalHandler()
  let loop = LoopThread(name: "signalled-readiness")
  let signaller = Signaller()
  signaller.add(await tid(of: loop.runLoop))
  var fds: [Int32] = [0, 0]
  precondition(pipe(&fds) == 0)
  let readiness = loop.runLoop.readiness(of: fds[0], events: .readable)
  let flags = Flag()
  let before = signalsHandled.load(ordering: .relaxed)
  let writeEnd = fds[1]
  let writer = TestThread.spawn(name: "writer") {
    waitForSignalsHandled(30, since: before)
    flags.value.store(true, ordering: .releasing)
    var byte: UInt8 = 1
    precondition(write(writeEnd, &byte, 1) == 1)
  }
  var iterator = readiness.makeAsyncIterator()
  let events = await iterator.next()
  let sawWrite = flags.value.load(ordering: .acquiring)
  await writer.joined()
  var sum = 0
  for index in 0..<500 {
    sum += try! await loop.runLoop.performAndAwait { index }
  }
  signaller.stop()
  loop.stop()
  close(fds[0])
  close(fds[1])
  precondition(events?.contains(.readable) == true, "readiness reported \(String(describing: events))")
  precondition(sawWrite, "readiness was reported before the byte was written")
  precondition(sum == (0..<500).reduce(0, +), "performAndAwait sum \(sum)")
}

private final class Flag: Sendable {
  let value = Atomic<Bool>(false)
}

// MARK: - Resource helpers

private final class Weak<Object: AnyObject>: @unchecked Sendable {
  weak var object: Object?
  init(_ object: Object) { self.object = object }
}

/// Lets the cooperative pool settle (threads the runtime starts on first use) before counting.
private func warmUp() async {
  await withTaskGroup(of: Void.self) { tasks in
    for _ in 0..<8 { tasks.addTask { try? await Task.sleep(for: .milliseconds(1)) } }
  }
}

private func groupLifecycles() async {
  await warmUp()
  do {
    let warm = try! await RunLoopThreadGroup.start(threadCount: 2, name: "warm")
    await Task(executorPreference: warm) {}.value
    await warm.shutDown()
  }
  await warmUp()
  let descriptors = procEntryCount("/proc/self/fd")
  let threads = procEntryCount("/proc/self/task")
  for index in 0..<300 {
    let weak: Weak<RunLoopThreadGroup>
    do {
      let group = try! await RunLoopThreadGroup.start(threadCount: 2, name: "cycle")
      weak = Weak(group)
      let value = await Task(executorPreference: group) { index }.value
      precondition(value == index)
      await group.shutDown()
    }
    // The finished task may let go of its preferred group a moment later.
    let giveUp = monotonicNanoseconds() + 10_000_000_000
    while weak.object != nil {
      precondition(monotonicNanoseconds() < giveUp, "group \(index) outlived its shutdown and last reference")
      await Task.yield()
    }
  }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 300 groups shut down")
  for index in 0..<100 {
    let weak: Weak<RunLoopThreadGroup>
    do {
      let group = try! await RunLoopThreadGroup.start(threadCount: 1, name: "dropped")
      weak = Weak(group)
      _ = await Task(executorPreference: group) { index }.value
    }
    let giveUp = monotonicNanoseconds() + 10_000_000_000
    while weak.object != nil {
      precondition(monotonicNanoseconds() < giveUp, "dropped group \(index) was never released")
      await Task.yield()
    }
  }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 100 groups released without shutDown")
}

private func executorLifecycles() async {
  await warmUp()
  do {
    let warmLoop = LoopThread(name: "warm")
    let warm = RunLoopExecutor(runLoop: warmLoop.runLoop)
    let answer = await Pinned(executor: warm).answer()
    precondition(answer == 42)
    await warm.shutDown()
    warmLoop.stop()
  }
  let descriptorsWithoutLoop = procEntryCount("/proc/self/fd")
  let threadsWithoutLoop = procEntryCount("/proc/self/task")
  await executorsOnOneLoop()
  // The loop's descriptors go with its `RunLoop` object, released with the last executor.
  expectProcessBack(descriptors: descriptorsWithoutLoop, threads: threadsWithoutLoop, "after stopping the loop thread")
  for index in 0..<200 {
    let other = LoopThread(name: "loop-\(index)")
    let executor = RunLoopExecutor(runLoop: other.runLoop)
    _ = await Pinned(executor: executor).answer()
    await executor.shutDown()
    other.stop()
  }
  expectProcessBack(
    descriptors: descriptorsWithoutLoop, threads: threadsWithoutLoop, "after 200 loop threads with executors")
}

/// 2,000 executors on one loop thread, which is stopped at the end.
private func executorsOnOneLoop() async {
  let loop = LoopThread(name: "executors")
  do {
    let warm = RunLoopExecutor(runLoop: loop.runLoop)
    let answer = await Pinned(executor: warm).answer()
    precondition(answer == 42)
    await warm.shutDown()
  }
  let descriptors = procEntryCount("/proc/self/fd")
  let threads = procEntryCount("/proc/self/task")
  for index in 0..<1_000 {
    let weak: Weak<RunLoopExecutor>
    do {
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      weak = Weak(executor)
      let actor = Pinned(executor: executor)
      let answer = await actor.answer()
      precondition(answer == 42)
      if index % 2 == 0 { await executor.shutDown() }
    }
    // The last job's release may still be under way on the loop's thread.
    let giveUp = monotonicNanoseconds() + 10_000_000_000
    while weak.object != nil {
      precondition(monotonicNanoseconds() < giveUp, "executor \(index) was never released")
      await Task.yield()
    }
  }
  for index in 0..<1_000 {
    let weak: Weak<RunLoopExecutor>
    do {
      let executor = RunLoopExecutor(
        runLoop: loop.runLoop, modes: index % 2 == 0 ? [.common] : [.default, RunLoopMode("private")])
      weak = Weak(executor)
    }
    precondition(weak.object == nil, "unused executor \(index) outlived its last reference")
  }
  // The loop's modes hold nothing the executors left: a private-mode run finds no source.
  let result = try! await loop.runLoop.performAndAwait {
    RunLoop.current.run(mode: RunLoopMode("private"), timeout: .zero)
  }
  precondition(result == .finished, "a run in the executors' private mode found items left: \(result)")
  expectProcessBack(descriptors: descriptors, threads: threads, "after 2,000 executors")
  loop.stop()
}

private func bridgeLifecycles() async {
  await warmUp()
  let loop = LoopThread(name: "bridges")
  _ = try! await loop.runLoop.performAndAwait { 0 }
  _ = await (try! Thread.spawn { () throws(Never) in 0 }).value()
  let descriptors = procEntryCount("/proc/self/fd")
  let threads = procEntryCount("/proc/self/task")
  for index in 0..<1_000 {
    let handle = try! Thread.spawn { () throws(Never) in index }
    let weak = Weak(handle.thread)
    let value = await handle.value()
    precondition(value == index)
    // Joined: the thread's object goes with the handle (the helper may still be ending).
    let giveUp = monotonicNanoseconds() + 10_000_000_000
    while weak.object != nil {
      precondition(monotonicNanoseconds() < giveUp, "awaited thread \(index)'s object was never released")
      await Task.yield()
    }
  }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 1,000 awaited threads")
  for index in 0..<1_000 {
    if index % 10 == 0 {
      let task = Task { try await loop.runLoop.performAndAwait(inModes: [RunLoopMode("never")]) { index } }
      task.cancel()
      _ = try? await task.value
    } else {
      let value = try! await loop.runLoop.performAndAwait { index }
      precondition(value == index)
    }
  }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 1,000 awaited blocks")
  for index in 0..<1_000 {
    let weakPort: Weak<Port>
    let weakSequence: Weak<PortMessages>
    do {
      let port = Port()
      weakPort = Weak(port)
      let messages = port.messages(on: loop.runLoop)
      weakSequence = Weak(messages)
      sendMessage(index, to: port)
      var iterator = messages.makeAsyncIterator()
      let message = await iterator.next()
      precondition(message?.msgid == Int32(index))
      if index % 2 == 0 { port.invalidate() }
    }
    let giveUp = monotonicNanoseconds() + 10_000_000_000
    while weakPort.object != nil || weakSequence.object != nil {
      precondition(monotonicNanoseconds() < giveUp, "port or sequence \(index) was never released")
      await Task.yield()
    }
  }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 1,000 port sequences")
  for index in 0..<1_000 {
    var fds: [Int32] = [0, 0]
    precondition(pipe(&fds) == 0)
    let weak: Weak<FileDescriptorReadiness>
    do {
      let readiness = loop.runLoop.readiness(of: fds[0], events: .readable)
      weak = Weak(readiness)
      var byte: UInt8 = 1
      precondition(write(fds[1], &byte, 1) == 1)
      var iterator = readiness.makeAsyncIterator()
      let events = await iterator.next()
      precondition(events?.contains(.readable) == true)
    }
    let giveUp = monotonicNanoseconds() + 10_000_000_000
    while weak.object != nil {
      precondition(monotonicNanoseconds() < giveUp, "readiness \(index) was never released")
      await Task.yield()
    }
    // The descriptor must be watched no more before it is closed (its number is reused).
    _ = try! await loop.runLoop.performAndAwait { 0 }
    close(fds[0])
    close(fds[1])
  }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 1,000 readiness sequences")
  loop.stop()
}
