import ProcessTestSupport
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Misuse stops the process with a message; each case runs in a child process.
@Suite("Misuse is reported", .timeLimit(.minutes(3)))
struct MisuseTests {
  // Joining twice, joining a detached thread and detaching twice do not compile: the handle
  // is noncopyable and `join()`/`detach()` consume it. For example
  //
  //   let worker = try Thread.spawn { 1 }
  //   _ = worker.join()
  //   _ = worker.join()   // error: 'worker' consumed more than once
  //
  // so they need no run-time check.

  @Test(.runsExitTests) func threadJoiningItself() async {
    await #expect(processExitsWith: .failure) { misuseJoinSelf() }
  }

  @Test(.runsExitTests) func startingTwice() async {
    await #expect(processExitsWith: .failure) { misuseStartTwice() }
  }

  @Test(.runsExitTests) func aPoolWhoseWorkersTheExitWouldWaitFor() async {
    // Idle workers never end on their own: exit() would wait for them for ever.
    await #expect(processExitsWith: .failure) {
      var configuration = ThreadPool.Configuration()
      configuration.threadConfiguration.finishBeforeExit = true
      _ = ThreadPool(name: "critical", configuration: configuration)
    }
  }

  @Test(.runsExitTests) func startingTheMainThread() async {
    await #expect(processExitsWith: .failure) { try? Thread.main.start() }
  }

  @Test(.runsExitTests) func configuringAfterStart() async {
    await #expect(processExitsWith: .failure) { misuseConfigureAfterStart() }
  }

  @Test(.runsExitTests) func renamingARunningThreadFromAnotherThread() async {
    await #expect(processExitsWith: .failure) { misuseRenameFromOutside() }
  }

  @Test(.runsExitTests) func addingAnExitHandlerToARunningThreadFromAnotherThread() async {
    await #expect(processExitsWith: .failure) { misuseOnExitFromOutside() }
  }

  /// An ended thread is not "running": the message covers both, so it does not mislead.
  @Test(.runsExitTests) func renamingOrAddingAnExitHandlerToAnEndedThreadFromAnotherThreadSaysSo() async {
    let results = [
      await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { misuseRenameEnded() },
      await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { misuseOnExitEnded() },
    ]
    for result in results {
      let text = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
      #expect(text.contains("Thread misuse") && text.contains("running or ended"), "\(text)")
    }
  }

  @Test(.runsExitTests) func misuseMessageNamesTheType() async throws {
    let result = try await #require(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      misuseJoinSelf()
    }
    let text = String(decoding: result.standardErrorContent, as: UTF8.self)
    #expect(text.contains("JoinableThread misuse: a thread cannot join itself"))
  }
}

func misuseJoinSelf() {
  // The thread receives its own handle and joins it; the process stops there (the main
  // thread waits on a latch nobody opens).
  let slot = HandleSlot<Void>()
  let ready = TestLatch()
  guard
    let worker = try? Thread.spawn({
      ready.wait()
      slot.handle.take()?.join()
    })
  else { exit(0) }
  slot.handle = consume worker
  ready.open()
  TestLatch().wait()
}

func misuseStartTwice() {
  let thread = Thread {}
  guard (try? thread.start()) != nil else { exit(0) }
  try? thread.start()
}

func misuseConfigureAfterStart() {
  let release = TestLatch()
  let thread = Thread { release.wait() }
  guard (try? thread.start()) != nil else { exit(0) }
  thread.configuration = ThreadConfiguration()
}

func misuseRenameFromOutside() {
  let release = TestLatch()
  guard let worker = try? Thread.spawn({ release.wait() }) else { exit(0) }
  worker.thread.name = "renamed"
}

func misuseRenameEnded() {
  guard let worker = try? Thread.spawn({}) else { exit(0) }
  let thread = worker.thread
  worker.join()
  thread.name = "renamed"
}

func misuseOnExitEnded() {
  guard let worker = try? Thread.spawn({}) else { exit(0) }
  let thread = worker.thread
  worker.join()
  thread.onExit {}
}

func misuseOnExitFromOutside() {
  let release = TestLatch()
  guard let worker = try? Thread.spawn({ release.wait() }) else { exit(0) }
  worker.thread.onExit {}
}
