import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

/// The module's overview snippets, compiled and run: an actor pinned to a run-loop thread, a
/// thread group as a task executor, a block awaited on a loop's thread, a port's messages as
/// a sequence.
@Suite(.timeLimit(.minutes(3))) struct ConcurrencySnippetTests {
  struct StoreError: Error {}

  actor Renderer {
    let executor: RunLoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(on runLoop: RunLoop) { executor = RunLoopExecutor(runLoop: runLoop) }
    func draw() -> Bool { RunLoop.current === executor.runLoop }  // always on the run loop's thread
  }

  @Test func anActorPinnedToARunLoopThread() async throws {
    // Starting and stopping the thread block briefly (`noasync`): done in synchronous code.
    let worker = try Self.startRenderThread()
    let renderer = Renderer(on: worker.runLoop)
    #expect(await renderer.draw())
    Self.stopRenderThread(worker)
  }

  private static func startRenderThread() throws -> RunLoopThread { try RunLoopThread.start(name: "render") }
  private static func stopRenderThread(_ worker: consuming RunLoopThread) { worker.stop() }

  @Test func aThreadGroupRunsAChildTaskTreeAndShutsDown() async throws {
    let files = ["a", "bb", "ccc"]
    let group = try await RunLoopThreadGroup.start(threadCount: 2, name: "io")
    let total = await withTaskExecutorPreference(group) {
      await withTaskGroup(of: Int.self) { tasks in  // child tasks prefer the group too
        for file in files { tasks.addTask { file.count } }
        return await tasks.reduce(0, +)
      }
    }
    await group.shutDown()  // runs what is queued, joins the threads
    #expect(total == 6)
    #expect(group.isShutDown)
  }

  @Test func aBlockAwaitedOnALoopAndAPortsMessagesAsASequence() async throws {
    let worker = LoopThread(name: "worker")
    let store = ["x", "y"]
    let count = try await worker.runLoop.performAndAwait { () throws(StoreError) -> Int in
      store.count  // on the worker's thread, typed error kept
    }
    #expect(count == 2)

    let port = Port()
    TestThread.run {
      sendMessage(1, to: port)
      sendMessage(0, to: port)
    }
    var seen: [Int32] = []
    for await message in port.messages(on: worker.runLoop) {  // cancellation loses no message
      seen.append(message.msgid)
      if message.msgid == 0 { break }
    }
    #expect(seen == [1, 0])
    worker.stop()
  }
}
