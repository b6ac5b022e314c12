import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Misuse stops the process with a message; each case runs in a child process.
@Suite("Misuse is reported", .timeLimit(.minutes(2)))
struct MisuseTests {
  @Test func joiningTwice() async {
    await #expect(processExitsWith: .failure) { misuseJoinTwice() }
  }

  @Test func joiningADetachedThread() async {
    await #expect(processExitsWith: .failure) { misuseJoinDetached() }
  }

  @Test func detachingTwice() async {
    await #expect(processExitsWith: .failure) { misuseDetachTwice() }
  }

  @Test func threadJoiningItself() async {
    await #expect(processExitsWith: .failure) { misuseJoinSelf() }
  }

  @Test func startingTwice() async {
    await #expect(processExitsWith: .failure) { misuseStartTwice() }
  }

  @Test func startingTheMainThread() async {
    await #expect(processExitsWith: .failure) { try? Thread.main.start() }
  }

  @Test func configuringAfterStart() async {
    await #expect(processExitsWith: .failure) { misuseConfigureAfterStart() }
  }

  @Test func renamingARunningThreadFromAnotherThread() async {
    await #expect(processExitsWith: .failure) { misuseRenameFromOutside() }
  }

  @Test func misuseMessageNamesTheType() async throws {
    let result = try await #require(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      misuseJoinTwice()
    }
    let text = String(decoding: result.standardErrorContent, as: UTF8.self)
    #expect(text.contains("JoinableThread misuse: join() called twice"))
  }
}

func misuseJoinTwice() {
  guard let worker = try? Thread.spawn({ 1 }) else { exit(0) }
  _ = worker.join()
  _ = worker.join()
}

func misuseJoinDetached() {
  guard let worker = try? Thread.spawn({ 1 }) else { exit(0) }
  worker.detach()
  _ = worker.join()
}

func misuseDetachTwice() {
  guard let worker = try? Thread.spawn({ 1 }) else { exit(0) }
  worker.detach()
  worker.detach()
}

func misuseJoinSelf() {
  let handle = TestBox<JoinableThread<Void, Never>?>(nil)
  let ready = TestLatch()
  guard
    let worker = try? Thread.spawn({
      ready.wait()
      handle.value?.join()
    })
  else { exit(0) }
  handle.value = worker
  ready.open()
  worker.join()
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
