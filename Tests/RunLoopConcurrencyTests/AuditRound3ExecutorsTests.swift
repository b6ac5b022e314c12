import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Promises of the executors' doc comments that no other test checks.
@Suite(.timeLimit(.minutes(3))) struct AuditRound3ExecutorsTests {
  /// `RunLoopExecutor.shutDown()`: "Returns at once when already shut down." The loop's
  /// thread is held in a run of another mode, so a call that waits for the loop cannot
  /// return.
  @Test func aSecondBlockingShutDownReturnsAtOnceWhileTheLoopIsBusy() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    await offPool { shutDownInPlace(executor) }
    let occupied = OccupiedInPrivateMode(loop.runLoop)
    let returned = await offPool { () -> Bool in
      occupied.entered.wait()
      let done = Latch(count: 1)
      let caller = TestThread.spawn {
        shutDownInPlace(executor)
        done.countDown()
      }
      let returnedWhileBusy = blockingWait(done, timeout: .seconds(5))
      occupied.release()
      caller.join()
      return returnedWhileBusy
    }
    #expect(returned)
    loop.stop()
  }

  /// The async `shutDown()` makes the same promise.
  @Test func aSecondAwaitedShutDownReturnsAtOnceWhileTheLoopIsBusy() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    await executor.shutDown()
    let occupied = OccupiedInPrivateMode(loop.runLoop)
    await offPool { occupied.entered.wait() }
    let done = Latch(count: 1)
    let second = Task {
      await executor.shutDown()
      done.countDown()
    }
    let returned = await offPool { blockingWait(done, timeout: .seconds(5)) }
    occupied.release()
    await second.value
    #expect(returned)
    loop.stop()
  }

  /// A shutdown after the loop's thread ended (no job queued) returns; a later one too.
  @Test func shutDownAfterTheLoopsThreadEndedReturns() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    loop.onLoop {}
    loop.stop()
    await offPool { shutDownInPlace(executor) }
    await executor.shutDown()
    #expect(executor.queuedJobCount == 0)
  }

  /// `performAndAwait`: the block's own error comes back as `.failed` with its static type.
  @Test func performAndAwaitRethrowsTheBlocksTypedError() async {
    struct Refused: Error, Equatable { let code: Int }
    let loop = LoopThread()
    do throws(AwaitedPerformError<Refused>) {
      _ = try await loop.runLoop.performAndAwait { () throws(Refused) -> Int in throw Refused(code: 7) }
      Issue.record("the block's error was not thrown")
    } catch {
      guard case .failed(let refused) = error else {
        Issue.record("expected .failed, got \(error)")
        loop.stop()
        return
      }
      #expect(refused == Refused(code: 7))
    }
    let onLoop = try? await loop.runLoop.performAndAwait { () throws(Never) -> Bool in
      RunLoop.current === loop.runLoop
    }
    #expect(onLoop == true)
    loop.stop()
  }

  /// `performAndAwait` from a task cancelled before the call: `.cancelled`, the block never
  /// runs, and it is released at once.
  @Test func performAndAwaitFromACancelledTaskThrowsCancelledAndNeverRunsTheBlock() async {
    let loop = LoopThread()
    let ran = AtomicBool(false)
    let task = Task { () async -> String in
      withUnsafeCurrentTask { $0?.cancel() }
      do throws(AwaitedPerformError<Never>) {
        try await loop.runLoop.performAndAwait { ran.store(true, ordering: .releasing) }
        return "ran"
      } catch {
        if case .cancelled = error { return "cancelled" }
        return "\(error)"
      }
    }
    #expect(await task.value == "cancelled")
    loop.onLoop {}  // a pass after the call: a queued block would have run by now
    #expect(!ran.load(ordering: .acquiring))
    loop.stop()
  }

  /// `JoinableThread.value()` rethrows the body's error with its static type.
  @Test func awaitingAThreadsValueRethrowsItsTypedError() async throws {
    struct Broken: Error, Equatable { let reason: String }
    let worker = try Thread.spawn(name: "typed-failure") { () throws(Broken) -> Int in
      throw Broken(reason: "no input")
    }
    do throws(Broken) {
      _ = try await worker.value()
      Issue.record("the body's error was not rethrown")
    } catch {
      #expect(error == Broken(reason: "no input"))
    }
  }

  /// `RunLoopThreadGroup`: after `shutDown()` a task preferring the group still runs (on the
  /// global executor), and `isShutDown` is true.
  @Test func aGroupShutDownTwiceFromAsyncCodeReportsShutDownAndStillRunsLaterTasks() async throws {
    let group = try await RunLoopThreadGroup.start(threadCount: 2, name: "audit3")
    await group.shutDown()
    await group.shutDown()
    #expect(group.isShutDown)
    let value = await Task(executorPreference: group) { 41 + 1 }.value
    #expect(value == 42)
  }

  /// `readiness(of:)`: a task cancelled before it calls `next()` gets nil at once, and the
  /// report stays for the next call.
  @Test func readinessNextFromACancelledTaskReturnsNilAndKeepsTheSequenceUsable() async throws {
    var fds: [Int32] = [0, 0]
    #expect(pipe(&fds) == 0)
    defer {
      close(fds[0])
      close(fds[1])
    }
    let loop = LoopThread()
    let readiness = loop.runLoop.readiness(of: fds[0], events: .readable)
    let cancelled = Task { () async -> FileDescriptorSource.Events? in
      withUnsafeCurrentTask { $0?.cancel() }
      var iterator = readiness.makeAsyncIterator()
      return await iterator.next()
    }
    #expect(await cancelled.value == nil)
    var byte: UInt8 = 1
    #expect(write(fds[1], &byte, 1) == 1)
    var iterator = readiness.makeAsyncIterator()
    let events = await iterator.next()
    #expect(events?.contains(.readable) == true)
    loop.stop()
  }

  /// `readiness(of:)`: "Watching a descriptor the kernel cannot poll ... stops the process
  /// when the sequence is created". The child exits 0 right after creating it.
  @Test(.runsExitTests) func readinessOfARegularFileStopsTheProcessWhenCreated() async {
    await #expect(processExitsWith: .failure) {
      let path = "/tmp/audit3-readiness-\(getpid())"
      let fd = open(path, O_CREAT | O_RDWR, 0o600)
      unlink(path)
      let loop = LoopThread()
      let readiness = loop.runLoop.readiness(of: fd, events: .readable)
      withExtendedLifetime(readiness) {}
      exit(0)
    }
  }

  /// The same for a descriptor another source of the loop already watches.
  @Test(.runsExitTests) func readinessOfADescriptorAlreadyWatchedStopsTheProcessWhenCreated() async {
    await #expect(processExitsWith: .failure) {
      var fds: [Int32] = [0, 0]
      _ = pipe(&fds)
      let loop = LoopThread()
      let first = loop.runLoop.readiness(of: fds[0], events: .readable)
      let second = loop.runLoop.readiness(of: fds[0], events: .readable)
      withExtendedLifetime((first, second)) {}
      exit(0)
    }
  }

  /// `RunLoopThreadGroup`: thread `i` is named `"<name>-<i>"` (the configuration's name is
  /// replaced); an invalid configuration throws `.invalidConfiguration`.
  @Test func groupThreadsAreNamedByIndexAndAnInvalidConfigurationThrows() async throws {
    var configuration = ThreadConfiguration()
    configuration.name = "ignored"
    let group = try await RunLoopThreadGroup.start(threadCount: 3, name: "audit3-names", configuration: configuration)
    #expect(group.threads.map(\.name) == ["audit3-names-0", "audit3-names-1", "audit3-names-2"])
    #expect(group.runLoops.count == 3)
    await group.shutDown()
    var invalid = ThreadConfiguration()
    invalid.stackSize = 1
    do throws(ThreadStartError) {
      _ = try await RunLoopThreadGroup.start(threadCount: 2, configuration: invalid)
      Issue.record("an invalid configuration started a group")
    } catch {
      guard case .invalidConfiguration = error else {
        Issue.record("unexpected \(error)")
        return
      }
    }
  }

  /// `RunLoopExecutor.shutDown()` "waits until the loop's thread has run every queued job
  /// (and those they queue meanwhile), then closes the executor". A job that runs the loop
  /// nested (documented as supported) is still running, and may still queue jobs (its
  /// actor's own resumptions): the shutdown must not return before it has ended.
  @Test func shutDownDoesNotReturnWhileAJobRunsTheLoopNested() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let runner = NestedLoopRunner(executor: executor)
    let entered = Latch(count: 1)
    let called = AtomicBool(false)
    let returned = AtomicBool(false)
    let job = Task { await runner.runNested(entered: entered, shutDownCalled: called, shutDownReturned: returned) }
    await offPool { entered.wait() }
    let stopper = TestThread.spawn {
      called.store(true, ordering: .releasing)
      executor.shutDown()
      returned.store(true, ordering: .releasing)
    }
    let sawShutDownReturnWhileRunning = await job.value
    await stopper.joined()
    #expect(!sawShutDownReturnWhileRunning)
    loop.stop()
  }

  /// The consequence: a job that queues another after its nested run (here a task isolated
  /// to its actor) must not meet a closed executor (which stops the process).
  @Test(.runsExitTests) func aJobQueuedAfterANestedRunDuringShutDownStillRuns() async {
    await #expect(processExitsWith: .success) {
      let loop = LoopThread()
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      let runner = NestedLoopRunner(executor: executor)
      let entered = Latch(count: 1)
      let called = AtomicBool(false)
      let returned = AtomicBool(false)
      let job = Task {
        await runner.runNestedThenQueueFollowUp(entered: entered, shutDownCalled: called, shutDownReturned: returned)
      }
      await offPool { entered.wait() }
      let stopper = TestThread.spawn {
        called.store(true, ordering: .releasing)
        executor.shutDown()
        returned.store(true, ordering: .releasing)
      }
      await job.value
      await stopper.joined()
      loop.stop()
      exit(0)
    }
  }

  /// `readiness(of:)` on a loop whose thread had ended when the sequence was created ends at
  /// once; releasing a sequence leaves its descriptor open.
  @Test func readinessOnAnEndedLoopEndsAtOnceAndReleasingItKeepsTheDescriptorOpen() async {
    var fds: [Int32] = [0, 0]
    #expect(pipe(&fds) == 0)
    defer {
      close(fds[0])
      close(fds[1])
    }
    let live = LoopThread()
    do {
      let readiness = live.runLoop.readiness(of: fds[0], events: .readable)
      withExtendedLifetime(readiness) {}
    }
    live.onLoop {}
    #expect(fcntl(fds[0], F_GETFD) != -1)
    live.stop()
    let readEnd = fds[0]
    let (events, rescued) = await valueUnlessHung(
      Task { () -> FileDescriptorSource.Events? in
        var iterator = live.runLoop.readiness(of: readEnd, events: .readable).makeAsyncIterator()
        return await iterator.next()
      })
    #expect(events == nil)
    #expect(!rescued, "a sequence on a loop whose thread had ended waited")
  }

  /// `messages(on:)` for a port already invalidated ends at once; a released sequence takes
  /// the port out of the loop's modes, so a new sequence on the same port works.
  @Test func portMessagesForAnInvalidPortEndAtOnceAndAReleasedSequenceLeavesThePortReusable() async {
    let loop = LoopThread()
    let dead = Port()
    dead.invalidate()
    let (message, rescued) = await valueUnlessHung(
      Task { () -> PortMessage? in
        var iterator = dead.messages(on: loop.runLoop).makeAsyncIterator()
        return await iterator.next()
      })
    #expect(message == nil)
    #expect(!rescued, "a sequence on an invalidated port waited")
    let port = Port()
    do {
      let first = port.messages(on: loop.runLoop)
      #expect(loop.runLoop.contains(port, inMode: .common))
      withExtendedLifetime(first) {}
    }
    #expect(!loop.runLoop.contains(port, inMode: .common))
    let second = port.messages(on: loop.runLoop)
    TestThread.run { sendMessage(9, to: port) }
    var iterator = second.makeAsyncIterator()
    #expect(await iterator.next()?.msgid == 9)
    loop.stop()
  }

  /// `RunLoopExecutor.init`: "Stops the process (misuse) when ... `modes` is empty."
  @Test(.runsExitTests) func anExecutorWithNoModeStopsTheProcess() async {
    await #expect(processExitsWith: .failure) {
      let loop = LoopThread()
      _ = RunLoopExecutor(runLoop: loop.runLoop, modes: [])
      exit(0)
    }
  }

  /// "A loop that runs in a mode the executor is not in runs none of its jobs until it runs
  /// in one of them again"; a run in that mode nested in a perform block runs them.
  @Test func jobsWaitForARunInOneOfTheExecutorsModes() async throws {
    let loop = LoopThread()
    let custom = RunLoopMode("audit3-custom")
    let executor = RunLoopExecutor(runLoop: loop.runLoop, modes: [custom])
    let actor = NestedLoopRunner(executor: executor)
    // The task starts on a thread of its own group, not on the global pool, so the job reaches
    // the executor however many pool threads other tests are blocking at the time.
    let starter = try await RunLoopThreadGroup.start(threadCount: 1, name: "audit3-starter")
    let job = Task(executorPreference: starter) { await actor.onWhichLoop() }
    await offPool {
      waitUntil { executor.queuedJobCount == 1 }
      loop.onLoop {}  // a pass in the default mode
    }
    #expect(executor.queuedJobCount == 1)
    await offPool {
      loop.onLoop {
        while executor.queuedJobCount > 0 { _ = RunLoop.current.run(mode: custom, timeout: .milliseconds(10)) }
      }
    }
    #expect(await job.value === loop.runLoop)
    await offPool {
      // The shutdown waits for a pass in the executor's mode: one block runs that mode until
      // the shutdown returns. It runs before the shutdown queues its checks, so they are
      // visible to its nested runs (a pass hides the blocks it took, of any mode, from runs
      // nested in one of them).
      let driving = Latch(count: 1)
      let done = AtomicBool(false)
      loop.runLoop.performAndWakeUp {
        driving.countDown()
        while !done.load(ordering: .acquiring) { _ = RunLoop.current.run(mode: custom, timeout: .milliseconds(10)) }
      }
      driving.wait()
      let stopper = TestThread.spawn {
        shutDownInPlace(executor)
        done.store(true, ordering: .releasing)
      }
      stopper.join()
    }
    await starter.shutDown()
    loop.stop()
  }

  /// `readiness(of:inModes: [])`: a sequence watched in no mode could never report, and its
  /// end watch (in no mode either) would never see the loop's thread end, so it would not
  /// end as documented ("It ends ... when the run loop's thread ends"): misuse, as an
  /// executor or a perform request with no mode.
  @Test(.runsExitTests) func readinessInNoModeStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      var fds: [Int32] = [0, 0]
      _ = pipe(&fds)
      let loop = LoopThread()
      let readiness = loop.runLoop.readiness(of: fds[0], events: .readable, inModes: [])
      withExtendedLifetime(readiness) {}
      exit(0)
    }
    let stderr = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(stderr.contains("no mode"), "\(stderr)")
  }

  /// `messages(on:inModes: [])`: the same for a port's messages ("It also ends once the run
  /// loop's thread has ended").
  @Test(.runsExitTests) func portMessagesInNoModeStopTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let port = Port()
      let messages = port.messages(on: loop.runLoop, inModes: [])
      withExtendedLifetime(messages) {}
      exit(0)
    }
    let stderr = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(stderr.contains("no mode"), "\(stderr)")
  }
}

/// An actor whose job runs its loop nested (see
/// `shutDownDoesNotReturnWhileAJobRunsTheLoopNested`).
actor NestedLoopRunner {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

  init(executor: RunLoopExecutor) { self.executor = executor }

  /// Runs the loop nested until a shutdown was called, then for at most 300 ms more;
  /// returns whether the shutdown returned while this job was still running.
  func runNested(entered: Latch, shutDownCalled: AtomicBool, shutDownReturned: AtomicBool) -> Bool {
    entered.countDown()
    while !shutDownCalled.load(ordering: .acquiring) {
      _ = RunLoop.current.run(mode: .default, timeout: .milliseconds(5))
    }
    // Bounds the window in which a wrong return would be seen; not synchronization.
    let end = MonotonicInstant.after(.milliseconds(300))
    while !end.hasPassed {
      if shutDownReturned.load(ordering: .acquiring) { return true }
      _ = RunLoop.current.run(mode: .default, timeout: .milliseconds(5))
    }
    return shutDownReturned.load(ordering: .acquiring)
  }

  /// `runNested`, then queues a job on this actor's executor (a task isolated to it) in the
  /// same job, as actor code may.
  func runNestedThenQueueFollowUp(entered: Latch, shutDownCalled: AtomicBool, shutDownReturned: AtomicBool) {
    _ = runNested(entered: entered, shutDownCalled: shutDownCalled, shutDownReturned: shutDownReturned)
    Task { self.touch() }
  }

  func touch() {}

  /// The run loop of the thread this job runs on.
  func onWhichLoop() -> RunLoop { RunLoop.current }
}

/// Keeps a loop's thread in a run nested in a private mode (busy for every other mode) until
/// `release()`. Nested runs serve the loop, so the stall detector of a diagnostics run does
/// not count the wait as one long callback, as it would a block that simply blocks.
private struct OccupiedInPrivateMode: Sendable {
  static let mode = RunLoopMode("audit3-occupied")
  let entered = Latch(count: 1)
  private let runLoop: RunLoop

  init(_ runLoop: RunLoop) {
    self.runLoop = runLoop
    runLoop.performAndWakeUp { [entered] in
      let current = RunLoop.current
      let keepAlive = RunLoopSource(perform: {})
      current.add(keepAlive, forMode: Self.mode)
      entered.countDown()
      while current.run(mode: Self.mode, timeout: .seconds(30)) != .stopped {}
      keepAlive.invalidate()
    }
  }

  /// Ends the nested run (from any thread).
  func release() {
    runLoop.performAndWakeUp(inModes: [Self.mode]) { RunLoop.current.stop() }
  }
}
