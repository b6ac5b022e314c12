import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// A thread-safe list the run-loop listings record into from any thread.
final class RunLoopExampleLog<Element: Sendable>: @unchecked Sendable {
  private let lock = Mutex()
  private var elements: [Element] = []  // protected by lock

  func append(_ element: Element) { lock.withLock { elements.append(element) } }
  var snapshot: [Element] { lock.withLock { elements } }
  var count: Int { lock.withLock { elements.count } }
}

/// A thread-safe value the run-loop listings share between threads.
final class RunLoopExampleBox<Value: Sendable>: @unchecked Sendable {
  private let lock = Mutex()
  private var stored: Value  // protected by lock
  init(_ value: Value) { stored = value }
  var value: Value {
    get { lock.withLock { stored } }
    set { lock.withLock { stored = newValue } }
  }
}

/// Waits (yielding the CPU) for another thread's observable state, never on elapsed time.
func runLoopExampleWaitUntil(_ condition: () -> Bool) {
  while !condition() { sched_yield() }
}

/// Runs `body` on a new joinable toolkit thread and returns its handle.
func runLoopExampleSpawn(_ body: @escaping @Sendable () -> Void) -> JoinableThread<Void, Never> {
  do {
    return try Thread.spawn { () throws(Never) in body() }
  } catch {
    fatalError("Thread.spawn failed: \(error)")
  }
}
