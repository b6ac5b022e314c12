// The code examples of Threads' doc comments (and of its DocC articles), compiled and run: each
// test keeps its example's lines as the doc comment shows them, with the names the example
// leaves to the reader (`sum(of:half:)`, `ParseError`, `decode()`, ...) defined around it, and
// asserts what the surrounding text claims.
import Sync
import TestSupport
import Testing
import Threads

@Suite("Threads doc-comment examples", .timeLimit(.minutes(3)))
struct AuditRound6DocExamplesThreadsTests {
  static let data = Array(1...100)
  @Sendable static func sum(of data: [Int], half: Int) -> Int {
    let middle = data.count / 2
    return (half == 0 ? data[..<middle] : data[middle...]).reduce(0, +)
  }

  @Test("JoinableThread: two halves summed on two threads")
  func joinableHalves() throws {
    let data = Self.data
    let sum = Self.sum
    let low = try Thread.spawn(name: "sum-low") { sum(data, 0) }
    let high = try Thread.spawn(name: "sum-high") { sum(data, 1) }
    let total = low.join() + high.join()
    #expect(total == 5050)
  }

  final class Connection: Sendable {
    let closed = AtomicBool(false)
    static func open() throws -> Connection { Connection() }
    func close() { closed.store(true, ordering: .releasing) }
  }

  @Test("Thread.onExit: a connection closed as the thread exits")
  func onExitClosesConnection() throws {
    let opened = LockedValue<Connection?>(nil)
    let worker = try Thread.spawn(name: "connection") { () throws -> Void in
      let connection = try Connection.open()
      Thread.current.onExit { connection.close() }
      opened.withLock { $0 = connection }
    }
    try worker.join()
    #expect(opened.withLock { $0 }?.closed.load(ordering: .acquiring) == true)
  }

  @Test("isExitRequested: a work loop that stops on request")
  func exitRequestedLoop() throws {
    let done = AtomicInteger<Int>(0)
    let started = Latch(count: 1)
    let worker = try Thread.spawn(name: "exit-request") {
      let moreWork = true
      func doSomeWork() {
        if done.increment(ordering: .relaxed) == 1 { started.countDown() }
        Thread.yield()
      }
      while moreWork && !Thread.current.isExitRequested { doSomeWork() }
    }
    started.wait()
    worker.thread.requestExit()
    worker.join()
    #expect(done.load(ordering: .relaxed) >= 1)
  }

  struct ParseError: Error, Equatable { let offset: Int }
  struct Document: Sendable, Equatable { let text: String }
  @Sendable static func parse(_ data: [UInt8]) throws(ParseError) -> Document {
    guard let text = String(validating: data, as: UTF8.self), !text.isEmpty else { throw ParseError(offset: 0) }
    return Document(text: text)
  }

  @Test("Thread.spawn with a typed error: join rethrows ParseError")
  func spawnTypedError() throws {
    let parse = Self.parse
    let data: [UInt8] = []
    let worker = try Thread.spawn(name: "parser") { () throws(ParseError) -> Document in
      try parse(data)
    }
    do throws(ParseError) {
      let document = try worker.join()  // rethrows ParseError
      Issue.record("joined \(document) instead of the parser's error")
    } catch {
      #expect(error == ParseError(offset: 0))
    }
    let fine: [UInt8] = Array("doc".utf8)
    let parser = try Thread.spawn(name: "parser") { () throws(ParseError) -> Document in
      try parse(fine)
    }
    let document = try parser.join()  // rethrows ParseError
    #expect(document == Document(text: "doc"))
  }

  @Test("Thread: spawn and join, detach and request an exit")
  func threadOverview() throws {
    let polls = AtomicInteger<Int>(0)
    let ended = Latch(count: 1)
    @Sendable func poll() {
      polls.increment(ordering: .relaxed)
      Thread.yield()
    }

    let sum = try Thread.spawn(name: "summer") { (1...100).reduce(0, +) }
    let printed = sum.join()  // print(sum.join()): 5050

    let worker = try Thread.detach(name: "poller") {
      Thread.current.onExit { ended.countDown() }
      while !Thread.current.isExitRequested { poll() }
    }
    worker.requestExit()
    ended.wait()
    #expect(printed == 5050)
  }

  @Test("ThreadConfiguration: a named, small-stack, low-priority, pinned thread")
  func configurationExample() throws {
    let decoded = AtomicBool(false)
    @Sendable func decode() { decoded.store(true, ordering: .relaxed) }
    var configuration = ThreadConfiguration()
    configuration.name = "image-decoder"
    configuration.stackSize = 256 * 1024
    configuration.relativePriority = 0.25  // nice 10: yields to interactive work
    configuration.cpuAffinity = [try Thread.currentCPUAffinity().first ?? 0]  // the doc pins CPU 1
    let worker = try Thread.spawn(configuration: configuration) { decode() }
    worker.join()
    #expect(decoded.load(ordering: .relaxed))
  }

  @Test("ThreadConfiguration.kernelName(for:): the 15 bytes the kernel keeps, cut on characters")
  func kernelNameCuts() {
    #expect(ThreadConfiguration.kernelName(for: "com.example.downloader") == "com.example.dow")
    #expect(ThreadConfiguration.kernelName(for: "downloaders-grösse") == "downloaders-gr")
  }

  @Test("ThreadConfigurationError: catch .stackSizeTooSmall and use the minimum")
  func configurationErrorStackSize() {
    var printed: String?
    var configuration = ThreadConfiguration()
    configuration.stackSize = 8 * 1024
    do throws(ThreadConfigurationError) {
      try configuration.validate()
    } catch .stackSizeTooSmall(_, let minimum) {
      configuration.stackSize = minimum
    } catch {
      printed = "\(error)"  // says which field to change, and how
    }
    #expect(printed == nil)
    #expect(configuration.stackSize == ThreadConfiguration.minimumStackSize)
    #expect(throws: Never.self) { try configuration.validate() }
  }

  @Test("ThreadDictionary: a flag set from another thread")
  func threadDictionaryFlag() throws {
    let flagged = Latch(count: 1)
    let initialized = Latch(count: 1)
    let worker = try Thread.spawn(name: "dictionary") { () -> Bool in
      Thread.current.threadDictionary["ThreadShouldExitNow"] = false
      initialized.countDown()
      flagged.wait()
      // ... in the worker's loop:
      let exitNow = Thread.current.threadDictionary["ThreadShouldExitNow", as: Bool.self] ?? false
      return exitNow
    }
    initialized.wait()
    // ... from another thread:
    worker.thread.threadDictionary["ThreadShouldExitNow"] = true
    flagged.countDown()
    let exitNow = worker.join()
    #expect(exitNow)
  }

  @Test("ThreadLocal: a per-thread scratch buffer and a counter with a destructor")
  func threadLocalExample() {
    let logged = LockedValue([String]())
    @Sendable func log(_ line: String) { logged.withLock { $0.append(line) } }
    let scratch = ThreadLocal<[UInt8]>(initialValue: { [UInt8](repeating: 0, count: 4096) })
    let requests = ThreadLocal<Int>(
      initialValue: { 0 },
      destructor: { count in
        log("this thread served \(count) requests")
      })
    TestThread.run {
      requests.value += 1
      #expect(scratch.value.count == 4096)
    }
    #expect(logged.withLock { $0 } == ["this thread served 1 requests"])
  }

  struct DatabaseError: Error {}
  final class DatabaseConnection: Sendable {
    func query(_ sql: String) throws(DatabaseError) -> [String] { sql.isEmpty ? [] : [sql] }
  }

  @Test("ThreadPool.run: a blocking read and a typed-throwing query")
  func threadPoolRun() async throws {
    @Sendable func readWholeFile(_ path: String) throws -> String { path }
    let path = "/etc/hostname"
    let text = try await ThreadPool.shared.run { try readWholeFile(path) }
    #expect(text == path)

    let pool = ThreadPool.shared
    let connection = DatabaseConnection()
    let sql = "select 1"
    let rows = try await pool.run { () throws(DatabaseError) in try connection.query(sql) }
    #expect(rows == ["select 1"])
  }

  @Test("ThreadPoolError: .failed carries the closure's DecodingError")
  func threadPoolErrorFailed() async {
    @Sendable func decode(_ path: String) throws(DecodingError) -> [UInt8] {
      throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: path))
    }
    var shown: [UInt8]?
    func show(_ image: [UInt8]) { shown = image }
    var message: String?
    let path = "/tmp/image.png"
    do throws(ThreadPoolError<DecodingError>) {
      let image = try await ThreadPool.shared.run { () throws(DecodingError) in try decode(path) }
      show(image)
    } catch .failed(let error) {
      message = "cannot decode: \(error)"  // error: DecodingError
    } catch .cancelled {
      return  // the task was cancelled before decoding began
    } catch {
      print(error)  // shut down, or no thread could be started
    }
    #expect(shown == nil)
    #expect(message?.hasPrefix("cannot decode: ") == true)
  }

  @Test("ThreadSchedulingPolicy: a real-time thread, with a fallback without permission")
  func schedulingPolicyFallback() {
    let ran = Latch(count: 1)
    @Sendable func audioLoop() { ran.countDown() }
    var fellBack = false
    var configuration = ThreadConfiguration()
    configuration.schedulingPolicy = .fifo(priority: ThreadSchedulingPolicy.realTimePriorityRange.lowerBound)
    do {
      _ = try Thread.spawn(configuration: configuration) { audioLoop() }
    } catch let error where error.systemError?.code == .operationNotPermitted {
      // no permission: fall back
      fellBack = true
    } catch {
      Issue.record("the real-time thread did not start: \(error)")
      fellBack = true
    }
    // Without permission the fallback ran; with it, the real-time thread runs (detached).
    #expect(fellBack || ran.wait(timeout: .seconds(10)))
  }

  @Test("ThreadStartError: an invalid configuration is caught before any C call")
  func threadStartErrorInvalidConfiguration() {
    let worked = AtomicBool(false)
    @Sendable func work() { worked.store(true, ordering: .relaxed) }
    var configuration = ThreadConfiguration()
    configuration.stackSize = 8192
    var problem: ThreadConfigurationError?
    do throws(ThreadStartError) {
      let worker = try Thread.spawn(configuration: configuration) { work() }
      worker.join()
    } catch .invalidConfiguration(let found) {
      problem = found  // print("fix the configuration: \(problem)")
    } catch let error where error.systemError?.code == .tryAgain {
      // the system refused another thread or could not map its stack; retry later
    } catch {
      print(error)
    }
    #expect(problem == .stackSizeTooSmall(8192, minimum: ThreadConfiguration.minimumStackSize))
    #expect(!worked.load(ordering: .relaxed))
    // The article's comment shows the message: "stackSize 8192 is below the minimum 16384: ..."
    #expect("\(problem!)".hasPrefix("stackSize 8192 is below the minimum \(ThreadConfiguration.minimumStackSize)"))
  }

  @Test("Threads overview: a configured thread's result")
  func threadsOverview() throws {
    var configuration = ThreadConfiguration()
    configuration.stackSize = 1 << 20  // validated before start: typed errors, not crashes
    let worker = try Thread.spawn(name: "summer", configuration: configuration) {
      (1...100).reduce(0, +)
    }
    let sum = worker.join()  // 5050; a thrown error would be rethrown here
    #expect(sum == 5050)
  }

  @Test("Threads article: a detached logger and a poller asked to exit")
  func threadsArticle() throws {
    let flushed = AtomicInteger<Int>(0)
    let ended = Latch(count: 1)
    @Sendable func flushLogs() {
      flushed.increment(ordering: .relaxed)
      Thread.yield()
    }
    @Sendable func pollOnce() { Thread.yield() }

    let logger = try Thread.detach(name: "logger") {
      Thread.current.onExit { ended.countDown() }
      while !Thread.current.isExitRequested { flushLogs() }
    }
    logger.requestExit()
    ended.wait()

    let poller = try Thread.spawn(name: "poller") {
      while !Thread.current.isExitRequested { pollOnce() }
    }
    poller.thread.requestExit()  // from any thread, any number of times
    poller.join()
    #expect(logger.isExitRequested)
  }
}
