// Helpers shared by the test targets above Sync (RunLoopTests, RunLoopConcurrencyTests,
// ExampleTests): toolkit threads that are always joined, thread-safe boxes for results,
// waiting on another thread's observable state (never on elapsed time), and blocking off
// the cooperative pool. SyncTests and ThreadsTests keep their
// own pthread-based helpers on purpose: they must not trust the primitives they test.

// The sanitizer flags (`isRunningUnderSanitizer` and the two it combines) come from here.
@_exported import ProcessTestSupport
import RunLoop
import RunLoopConcurrency
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// A joinable toolkit thread for tests (`Threads.Thread.spawn`). Always join it, once.
public final class TestThread: @unchecked Sendable {
  // @unchecked: `handle` is only touched with `lock` held.
  /// The toolkit thread object (for exit requests).
  public let thread: Thread
  private let lock = Lock()
  private var handle: JoinableThread<Void, Never>?  // protected by lock; taken by takeHandle()

  private init(_ handle: consuming JoinableThread<Void, Never>) {
    thread = handle.thread
    self.handle = consume handle
  }

  /// Starts `body` on a new thread named `name`.
  public static func spawn(name: String? = nil, _ body: @escaping @Sendable () -> Void) -> TestThread {
    do {
      return TestThread(try Thread.spawn(name: name) { () throws(Never) in body() })
    } catch {
      fatalError("Thread.spawn failed: \(error)")
    }
  }

  /// Takes the thread's handle, to join it once: synchronously with `join()`, or from an
  /// async test with `value()` (RunLoopConcurrency), which waits without holding a
  /// cooperative thread. Stops the process when the handle was taken already.
  public func takeHandle() -> JoinableThread<Void, Never> {
    lock.lock()
    let taken = handle.take()
    lock.unlock()
    guard let taken else { fatalError("TestThread: joined twice") }
    return taken
  }

  /// Waits for the thread to end. Stops the process when called twice.
  public func join() {
    takeHandle().join()
  }

  /// Runs `body` on a new thread and waits for it.
  public static func run(_ body: @escaping @Sendable () -> Void) {
    spawn(body).join()
  }
}

/// A thread-safe list tests append to from callbacks on any thread.
public final class Recorder<Element: Sendable>: @unchecked Sendable {
  private let lock = Lock()
  private var elements: [Element] = []  // protected by lock

  /// An empty list.
  public init() {}
  /// Appends `element`; any thread.
  public func append(_ element: Element) { lock.withLock { elements.append(element) } }
  /// The elements so far, in the order appended.
  public var snapshot: [Element] { lock.withLock { elements } }
  /// How many elements were appended.
  public var count: Int { lock.withLock { elements.count } }
}

/// A thread-safe box.
public final class Box<Value: Sendable>: @unchecked Sendable {
  private let lock = Lock()
  private var stored: Value  // protected by lock
  /// A box holding `value`.
  public init(_ value: Value) { stored = value }
  /// The value; reads and writes are each atomic.
  public var value: Value {
    get { lock.withLock { stored } }
    set { lock.withLock { stored = newValue } }
  }
  /// Runs `body` on the value under the lock.
  public func update<R>(_ body: (inout Value) -> R) -> R { lock.withLock { body(&stored) } }
}

/// Waits (yielding the CPU) until `condition` holds; for waiting on another thread's
/// observable state such as `RunLoop.isWaiting`, never on elapsed time. Stops the test
/// process, naming the caller, when the condition does not hold within `limit`: a hang fails
/// fast instead of blocking the run.
public func waitUntil(
  within limit: Duration = .seconds(60), file: StaticString = #file, line: UInt = #line,
  _ condition: () -> Bool
) {
  let giveUp = MonotonicInstant.after(limit)
  while !condition() {
    if giveUp.hasPassed { fatalError("waitUntil: the condition did not hold within \(limit)", file: file, line: line) }
    sched_yield()
  }
}

/// Runs the blocking `body` on a new toolkit thread and awaits its result with
/// `JoinableThread.value()`: how an async test waits for blocking work (a join, a latch, a
/// blocking shutdown, a ping-pong of threads it started), and how a test that blocks for
/// long runs at all.
///
/// Blocking inside a task instead (in the test's own task or a detached one, or in a
/// synchronous test, which the test runner also runs on the pool) holds a thread of the
/// cooperative pool, which has one thread per core, two on a 2-core machine, and runs every
/// test of the run. When what the blocked thread waits for needs a pool thread itself (a
/// task created on a plain thread, a task resuming after an actor call, a continuation
/// resumed elsewhere), two such waits at once, in two tests, deadlock the pool until some
/// timeout ends one; and two long blocking tests at once stall every other test of the run
/// behind them. Errors `body` throws are rethrown here.
public func offPool<Result: Sendable, Failure: Error>(
  _ body: @escaping @Sendable () throws(Failure) -> Result
) async throws(Failure) -> Result {
  let thread: JoinableThread<Result, Failure>
  do {
    thread = try Thread.spawn(name: "off-pool") { () throws(Failure) in try body() }
  } catch {
    fatalError("Thread.spawn: \(error)")
  }
  return try await thread.value()
}

/// Runs `body(index)` on `count` toolkit threads and joins them all before returning.
public func runThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
  let threads = (0..<count).map { index in TestThread.spawn { body(index) } }
  for thread in threads { thread.join() }
}

/// Runs `body` synchronously: exit-test bodies are async, where the toolkit's blocking calls
/// are unavailable (`noasync`); wrapping them states that blocking is intended.
public func blocking(_ body: () -> Void) {
  body()
}

/// Connects to the named port `name`, retrying while it is not registered yet (another
/// thread or process is starting it), for at most `limit`. The pause between attempts is
/// not synchronization: no in-process primitive can tell when another process registers.
public func remotePortEventually(_ name: String, within limit: Duration = .seconds(60)) throws(PortError) -> MessagePort
{
  let giveUp = MonotonicInstant.after(limit)
  while true {
    do {
      return try MessagePort.remote(name: name)
    } catch  where error.status == .invalid && !giveUp.hasPassed {
      var pause = timespec(tv_sec: 0, tv_nsec: 2_000_000)
      _ = nanosleep(&pause, nil)
    }
  }
}

/// Where the process's threads whose kernel names (`/proc/self/task/*/comm`) start with
/// `prefix` are, one line each: thread id, name, the kernel function it sleeps in
/// (`wchan`) and its system call with arguments (`syscall`: number, then the arguments in
/// hex; for a futex wait the first is the word's address). For a hang's failure message,
/// so it says where a thread sleeps; best effort (an entry may vanish while it is read).
public func kernelStates(ofThreadsNamed prefix: String) -> String {
  func read(_ path: String) -> String {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    if descriptor < 0 { return "?" }
    defer { close(descriptor) }
    var buffer = [UInt8](repeating: 0, count: 512)
    let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
    return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self).filter { $0 != "\n" } : "?"
  }
  guard let directory = opendir("/proc/self/task") else { return "(no /proc/self/task)" }
  defer { closedir(directory) }
  var lines: [String] = []
  while let entry = readdir(directory) {
    let tid = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    if tid.hasPrefix(".") { continue }
    let name = read("/proc/self/task/\(tid)/comm")
    guard name.hasPrefix(prefix) else { continue }
    lines.append(
      "\(tid) \(name): wchan \(read("/proc/self/task/\(tid)/wchan")), syscall \(read("/proc/self/task/\(tid)/syscall"))"
    )
  }
  return lines.isEmpty ? "(no thread named \(prefix)*)" : lines.joined(separator: "\n")
}
