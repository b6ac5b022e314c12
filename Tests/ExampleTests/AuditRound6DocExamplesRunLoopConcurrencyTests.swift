// The code examples of RunLoopConcurrency's doc comments (and of its DocC article), compiled
// and run: each test keeps its example's lines as the doc comment shows them, with the names
// the example leaves to the reader (`drain(_:)`, `ParseError`, `summarize(_:)`, ...) defined
// around it, and asserts what the surrounding text claims. Starting and stopping a run-loop
// thread block briefly (`noasync`): the async tests do it in synchronous helpers.
import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

@Suite("RunLoopConcurrency doc-comment examples", .timeLimit(.minutes(3)))
struct AuditRound6DocExamplesRunLoopConcurrencyTests {
  private static func startWorker(_ name: String) throws -> RunLoopThread { try RunLoopThread.start(name: name) }
  private static func stopWorker(_ worker: consuming RunLoopThread) { worker.stop() }
  private static func send(_ ids: [Int32], to port: Port) throws(PortError) {
    for id in ids { try port.send(PortMessage(msgid: id), timeout: .seconds(1)) }
  }

  @Test("readiness(of:): a socket drained until it hangs up")
  func readinessDrainsUntilHangUp() async throws {
    var pair: [Int32] = [0, 0]
    #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
    let socket = pair[0]
    var drained = 0
    func drain(_ descriptor: Int32) {
      var buffer = [UInt8](repeating: 0, count: 64)
      let count = read(descriptor, &buffer, buffer.count)
      if count > 0 { drained += count }
    }
    let worker = try Self.startWorker("readiness")
    #expect(write(pair[1], "hello", 5) == 5)
    close(pair[1])
    for await events in worker.runLoop.readiness(of: socket, events: .readable) {
      if events.contains(.readable) { drain(socket) }
      if events.contains(.hangUp) { break }
    }
    Self.stopWorker(worker)
    close(socket)
    #expect(drained == 5)
  }

  struct ParseError: Error, Equatable {}
  struct Document: Sendable, Equatable { let text: String }
  @Sendable static func parse(_ data: [UInt8]) throws(ParseError) -> Document {
    guard !data.isEmpty else { throw ParseError() }
    return Document(text: String(decoding: data, as: UTF8.self))
  }

  @Test("JoinableThread.value(): a parser's typed error, awaited")
  func valueRethrowsTypedError() async throws {
    let parse = Self.parse
    let data: [UInt8] = Array("doc".utf8)
    let parser = try Thread.spawn(name: "parser") { () throws(ParseError) -> Document in
      try parse(data)
    }
    let document = try await parser.value()  // rethrows ParseError
    #expect(document == Document(text: "doc"))

    let empty: [UInt8] = []
    let failing = try Thread.spawn(name: "parser") { () throws(ParseError) -> Document in try parse(empty) }
    do throws(ParseError) {
      _ = try await failing.value()
      Issue.record("the parser's error was not rethrown")
    } catch {
      #expect(error == ParseError())
    }
  }

  @Test("JoinableThread.value(): an exit request from a cancellation handler")
  func valueWithCancellationHandler() async throws {
    let task = Task { () -> Int in
      let worker = try Thread.spawn(name: "cancellable") { () throws(ParseError) -> Int in
        var rounds = 0
        while !Thread.current.isExitRequested {
          rounds += 1
          Thread.yield()
        }
        return rounds
      }
      let thread = worker.thread
      var handle = Optional(consume worker)  // the operation closure may not consume a capture
      let result = try await withTaskCancellationHandler {
        try await handle.take()!.value()
      } onCancel: {
        thread.requestExit()
      }
      return result
    }
    task.cancel()
    let rounds = try await task.value
    #expect(rounds >= 0)
  }

  @Test("Port.messages(on:): a port's messages as an async sequence")
  func portMessagesSequence() async throws {
    let port = Port()
    var handled: [Int32] = []
    func handle(_ message: PortMessage) { handled.append(message.msgid) }
    let worker = try Self.startWorker("messages")
    try Self.send([1, 2], to: port)
    for await message in port.messages(on: worker.runLoop) {
      handle(message)
      if handled.count == 2 { break }
    }
    port.invalidate()
    Self.stopWorker(worker)
    #expect(handled == [1, 2])
  }

  struct DatabaseError: Error {}
  final class Database: Sendable {
    let thread = LockedValue<Thread?>(nil)
    func count() throws(DatabaseError) -> Int {
      thread.withLock { $0 = Thread.current }
      return 3
    }
    func rows() throws(DatabaseError) -> [String] { ["a", "b"] }
  }

  @Test("performAndAwait: a typed-throwing block on the worker's thread")
  func performAndAwaitOnWorker() async throws {
    let database = Database()
    let worker = try Self.startWorker("database")
    let count = try await worker.runLoop.performAndAwait { () throws(DatabaseError) -> Int in
      try database.count()  // on the worker's thread
    }
    let rows = try await worker.runLoop.performAndAwait { () throws(DatabaseError) in try database.rows() }
    let ranOn = database.thread.withLock { $0 }
    let expected = worker.thread
    Self.stopWorker(worker)
    #expect(count == 3)
    #expect(rows == ["a", "b"])
    #expect(ranOn === expected)
  }

  actor Connection {
    let executor: RunLoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(on runLoop: RunLoop) { executor = RunLoopExecutor(runLoop: runLoop) }
    func isOnLoopThread() -> Bool { RunLoop.current === executor.runLoop }
  }

  @Test("RunLoopExecutor: an actor pinned to a loop; shut down, then stop the thread")
  func executorShutDownThenStop() async throws {
    let worker = try Self.startWorker("connection")
    let connection = Connection(on: worker.runLoop)
    #expect(await connection.isOnLoopThread())
    let executor = connection.executor
    await executor.shutDown()  // every queued job has run (`executor.shutDown()` in synchronous code)
    Self.stopWorker(worker)  // the thread ends and is joined
    #expect(executor.queuedJobCount == 0)
  }

  @Test("RunLoopExecutor: synchronous shutDown, then stop")
  func executorSynchronousShutDown() throws {
    let worker = try RunLoopThread.start(name: "sync-shutdown")
    let executor = RunLoopExecutor(runLoop: worker.runLoop)
    executor.shutDown()  // every queued job has run (`await executor.shutDown()` in async code)
    worker.stop()  // the thread ends and is joined
    #expect(executor.queuedJobCount == 0)
  }

  @Test("RunLoopThreadGroup: a task preferring the group, then shutDown")
  func threadGroupTaskPreference() async throws {
    let files = ["a", "bb", "ccc"]
    @Sendable func summarize(_ files: [String]) async -> Int { files.map(\.count).reduce(0, +) }
    let group = try await RunLoopThreadGroup.start(threadCount: 4, name: "io")
    let summary = await Task(executorPreference: group) { await summarize(files) }.value
    await group.shutDown()  // runs what is still queued, then joins the threads
    #expect(summary == 6)
    #expect(group.isShutDown)
  }

  @Test("README: withTaskExecutorPreference(group) runs the task's code on the group's threads")
  func threadGroupWithTaskExecutorPreference() async throws {
    let group = try await RunLoopThreadGroup.start(threadCount: 2, name: "preferred")
    let threads = group.threads
    let ranOn = await withTaskExecutorPreference(group) { () async -> Thread in
      await Task.yield()
      return Thread.current
    }
    await group.shutDown()
    #expect(threads.contains { $0 === ranOn })
  }

  actor Renderer {
    let executor: RunLoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(on runLoop: RunLoop) { executor = RunLoopExecutor(runLoop: runLoop) }
    func draw() {
      // always on the run loop's thread
    }
  }

  @Test("Module overview: a renderer actor pinned to a run-loop thread")
  func overviewRenderer() async throws {
    // In synchronous code: starting (and stopping) a run-loop thread blocks briefly (`noasync`).
    let worker = try Self.startWorker("render")
    let renderer = Renderer(on: worker.runLoop)
    // In any task:
    await renderer.draw()
    #expect(renderer.executor.runLoop === worker.runLoop)
    await renderer.executor.shutDown()
    Self.stopWorker(worker)
  }

  /// MainRunLoopExecutor's examples are `@main` programs that take over the process's main
  /// thread (Examples/MainActorOnRunLoop runs one): here they are compiled, never called.
  struct Window { @MainActor func show(_ model: Int = 0) {} }
  @MainActor static let window = Window()
  @MainActor static func loadModel() async -> Int { 1 }
  static func mainRunLoopExamplesCompile() throws -> Never {
    let window = Window()
    _ = window
    let worker = try RunLoopThread.start(name: "render")
    let renderer = Renderer(on: worker.runLoop)
    MainRunLoopExecutor.runMain {
      await renderer.draw()  // hops to the render thread and back
      Self.window.show()  // on the main thread
      let model = await Self.loadModel()  // back on the main thread after each await
      Self.window.show(model)
    }
  }

  @Test("MainRunLoopExecutor's examples compile (they run in Examples/MainActorOnRunLoop)")
  func mainRunLoopExamplesReferenced() {
    let example: () throws -> Never = Self.mainRunLoopExamplesCompile
    _ = example
    #expect(!MainRunLoopExecutor.isInstalled)
  }
}
