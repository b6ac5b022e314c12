import Glibc
import Sync

/// Starts `count` raw pthreads running `body(index)` and joins them all before returning.
/// (SyncTests sits below the Threads module, so it drives pthreads directly.)
func runConcurrently(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
  let threads = (0..<count).map { index in startThread { body(index) } }
  for thread in threads { joinThread(thread) }
}

/// Starts a thread that runs `body`; the caller joins it with ``joinThread(_:)``.
func startThread(_ body: @escaping @Sendable () -> Void) -> pthread_t {
  final class Box: @unchecked Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
  }
  let box = Unmanaged.passRetained(Box(body)).toOpaque()
  var thread = pthread_t()
  let result = pthread_create(
    &thread, nil,
    { raw in
      let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
      box.body()
      return nil
    }, box)
  precondition(result == 0, "pthread_create failed: \(result)")
  return thread
}

/// Waits for a thread started by ``startThread(_:)`` to end.
func joinThread(_ thread: pthread_t) {
  let result = pthread_join(thread, nil)
  precondition(result == 0, "pthread_join failed: \(result)")
}

/// A one-shot gate on a Sync lock-free atomic: threads wait until it opens. Spinning with
/// sched_yield keeps it independent of the primitives under test.
final class Gate: @unchecked Sendable {
  private let flag = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
  init() { flag.initialize(to: 0) }
  deinit { flag.deallocate() }
  func open() { UInt32.atomicStore(1, at: flag, ordering: .releasing) }
  var isOpen: Bool { UInt32.atomicLoad(at: flag, ordering: .acquiring) == 1 }
  /// Waits until the gate opens; stops the test process, naming the caller, after 60 s (a
  /// hang fails fast). Timed on the raw monotonic clock, not on the primitives under test.
  func wait(file: StaticString = #file, line: UInt = #line) {
    let giveUp = monotonicSeconds() + 60
    while !isOpen {
      if monotonicSeconds() > giveUp { fatalError("Gate.wait: not opened within 60 s", file: file, line: line) }
      sched_yield()
    }
  }
}

/// Runs `body` synchronously. Exit-test bodies are async closures, where the toolkit's
/// blocking calls are unavailable (`noasync`); wrapping them in a synchronous closure states
/// that blocking is intended.
func blocking(_ body: () -> Void) {
  body()
}

/// Seconds on CLOCK_MONOTONIC, for the test helpers' own give-up limits.
func monotonicSeconds() -> Double {
  var now = timespec()
  precondition(clock_gettime(CLOCK_MONOTONIC, &now) == 0)
  return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}
