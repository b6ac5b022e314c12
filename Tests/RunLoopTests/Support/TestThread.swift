import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// A joinable toolkit thread for tests (`Threads.Thread.spawn`). Always join it.
final class TestThread: Sendable {
  private let handle: JoinableThread<Void, Never>

  private init(_ handle: JoinableThread<Void, Never>) { self.handle = handle }

  /// Starts `body` on a new thread.
  static func spawn(_ body: @escaping @Sendable () -> Void) -> TestThread {
    do {
      return TestThread(try Thread.spawn { () throws(Never) in body() })
    } catch {
      fatalError("Thread.spawn failed: \(error)")
    }
  }

  /// The toolkit thread object (for exit requests).
  var thread: Thread { handle.thread }

  /// Waits for the thread to end.
  func join() {
    handle.join()
  }

  /// Runs `body` on a new thread and waits for it.
  static func run(_ body: @escaping @Sendable () -> Void) {
    spawn(body).join()
  }
}

/// A thread-safe list tests append to from callbacks on any thread.
final class Recorder<Element: Sendable>: @unchecked Sendable {
  private let lock = Mutex()
  private var elements: [Element] = []  // protected by lock

  func append(_ element: Element) { lock.withLock { elements.append(element) } }
  var snapshot: [Element] { lock.withLock { elements } }
  var count: Int { lock.withLock { elements.count } }
}

/// A thread-safe box.
final class Box<Value: Sendable>: @unchecked Sendable {
  private let lock = Mutex()
  private var stored: Value  // protected by lock
  init(_ value: Value) { stored = value }
  var value: Value {
    get { lock.withLock { stored } }
    set { lock.withLock { stored = newValue } }
  }
  func update<R>(_ body: (inout Value) -> R) -> R { lock.withLock { body(&stored) } }
}

/// Waits (yielding the CPU) until `condition` holds; for waiting on another thread's
/// observable state such as `RunLoop.isWaiting`, never on elapsed time.
func waitUntil(_ condition: () -> Bool) {
  while !condition() { sched_yield() }
}
