import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// A raw pthread for tests (the Threads module is not a dependency yet). Always join it.
final class TestThread: @unchecked Sendable {
  // @unchecked: `handle` is written once before the thread is shared, `joined` only by the
  // joining thread.
  private var handle = pthread_t()
  private var joined = false

  private final class Body {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
  }

  /// Starts `body` on a new thread.
  static func spawn(_ body: @escaping @Sendable () -> Void) -> TestThread {
    let thread = TestThread()
    let context = Unmanaged.passRetained(Body(body)).toOpaque()
    let result = pthread_create(&thread.handle, nil, { context in
      let body = Unmanaged<Body>.fromOpaque(context!).takeRetainedValue()
      body.run()
      return nil
    }, context)
    precondition(result == 0, "pthread_create failed: \(result)")
    return thread
  }

  /// Waits for the thread to end.
  func join() {
    precondition(!joined)
    joined = true
    let result = pthread_join(handle, nil)
    precondition(result == 0, "pthread_join failed: \(result)")
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
