#if canImport(Glibc)
  import Glibc
#endif

/// A one-shot latch for tests: `open()` once, `wait()` blocks until then. Built on a raw
/// pthread mutex and condition so it depends on nothing under test.
final class TestLatch: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
  private var opened = false  // guarded by `mutex`

  init() {
    precondition(pthread_mutex_init(mutex, nil) == 0)
    var attributes = pthread_condattr_t()
    precondition(pthread_condattr_init(&attributes) == 0)
    precondition(pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC) == 0)
    precondition(pthread_cond_init(condition, &attributes) == 0)
    precondition(pthread_condattr_destroy(&attributes) == 0)
  }

  deinit {
    precondition(pthread_cond_destroy(condition) == 0)
    precondition(pthread_mutex_destroy(mutex) == 0)
    mutex.deallocate()
    condition.deallocate()
  }

  func open() {
    precondition(pthread_mutex_lock(mutex) == 0)
    opened = true
    precondition(pthread_cond_broadcast(condition) == 0)
    precondition(pthread_mutex_unlock(mutex) == 0)
  }

  /// Whether `open()` was called; never blocks (for polling from a task with `eventually`).
  var isOpen: Bool {
    precondition(pthread_mutex_lock(mutex) == 0)
    defer { precondition(pthread_mutex_unlock(mutex) == 0) }
    return opened
  }

  /// Blocks until `open()`; stops the test process, naming the caller, after 60 s on the
  /// monotonic clock (a hang fails fast).
  func wait(file: StaticString = #file, line: UInt = #line) {
    var deadline = timespec()
    precondition(clock_gettime(CLOCK_MONOTONIC, &deadline) == 0)
    deadline.tv_sec += 60
    precondition(pthread_mutex_lock(mutex) == 0)
    while !opened {
      let result = pthread_cond_timedwait(condition, mutex, &deadline)
      if result == ETIMEDOUT { fatalError("TestLatch.wait: not opened within 60 s", file: file, line: line) }
      precondition(result == 0, "pthread_cond_timedwait failed: \(result)")
    }
    precondition(pthread_mutex_unlock(mutex) == 0)
  }
}

/// A value box for passing results out of test threads; guarded by a pthread mutex.
final class TestBox<Value: Sendable>: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private var stored: Value

  init(_ value: Value) {
    stored = value
    precondition(pthread_mutex_init(mutex, nil) == 0)
  }

  deinit {
    precondition(pthread_mutex_destroy(mutex) == 0)
    mutex.deallocate()
  }

  var value: Value {
    get {
      precondition(pthread_mutex_lock(mutex) == 0)
      defer { precondition(pthread_mutex_unlock(mutex) == 0) }
      return stored
    }
    set {
      precondition(pthread_mutex_lock(mutex) == 0)
      stored = newValue
      precondition(pthread_mutex_unlock(mutex) == 0)
    }
  }

  func update(_ body: (inout Value) -> Void) {
    precondition(pthread_mutex_lock(mutex) == 0)
    body(&stored)
    precondition(pthread_mutex_unlock(mutex) == 0)
  }
}
