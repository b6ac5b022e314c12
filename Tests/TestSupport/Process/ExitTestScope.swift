// Running exit tests off the cooperative pool. Plain Swift and pthreads, nothing of the
// toolkit, like the fork helpers beside it, so SyncTests and ThreadsTests may use it.
//
// The Swift Testing of this toolchain waits for an exit test's child on the cooperative
// pool: it reads the child's event stream (and its output, when observed) to the end in
// child tasks of the test's task, each holding a pool thread until the child exits. On two
// cores the pool has two threads, so two exit tests at once stall every other test of the
// pass. Child tasks run on their task's executor preference, so a test that runs with one
// set to `BlockingTestExecutor.shared` holds threads of that executor instead.

import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// A task executor whose threads may block for as long as a test needs: each job runs on an
/// idle thread, and a thread starts whenever a job is queued that no idle thread will take,
/// so a job that blocks never holds up another. For tests only (``RunsExitTests``): its
/// threads are never joined, and stay for the life of the process, idle ones waiting for the
/// next job, as the cooperative pool's threads do. They keep the name of the thread that
/// started them (a pool thread's, usually).
public final class BlockingTestExecutor: TaskExecutor, @unchecked Sendable {
  // @unchecked: `queue` and `idle` are read and written only with `mutex` held.

  /// The executor ``RunsExitTests`` runs tests on.
  public static let shared = BlockingTestExecutor()

  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let jobQueued = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
  /// Jobs not taken yet, oldest first.
  private var queue: [UnownedJob] = []
  /// Threads waiting for a job.
  private var idle = 0

  private init() {
    precondition(pthread_mutex_init(mutex, nil) == 0, "pthread_mutex_init failed")
    precondition(pthread_cond_init(jobQueued, nil) == 0, "pthread_cond_init failed")
  }

  public func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    precondition(pthread_mutex_lock(mutex) == 0, "pthread_mutex_lock failed")
    queue.append(job)
    // Every queued job has a thread coming for it: an idle one woken for each job while
    // there are no more jobs than idle threads, else a new one.
    let startThread = queue.count > idle
    if !startThread { precondition(pthread_cond_signal(jobQueued) == 0, "pthread_cond_signal failed") }
    precondition(pthread_mutex_unlock(mutex) == 0, "pthread_mutex_unlock failed")
    if startThread { startWorker() }
  }

  private func startWorker() {
    var thread = pthread_t()
    // The executor is never released (`shared`), so the worker needs no reference of its own.
    let result = pthread_create(
      &thread, nil,
      { executor in
        Unmanaged<BlockingTestExecutor>.fromOpaque(executor!).takeUnretainedValue().work()
      }, Unmanaged.passUnretained(self).toOpaque())
    precondition(result == 0, "BlockingTestExecutor: pthread_create failed: \(result)")
    precondition(pthread_detach(thread) == 0, "pthread_detach failed")
  }

  /// A worker's life: takes the oldest job, runs it, and waits when there is none.
  private func work() -> Never {
    let executor = asUnownedTaskExecutor()
    precondition(pthread_mutex_lock(mutex) == 0, "pthread_mutex_lock failed")
    while true {
      while queue.isEmpty {
        idle += 1
        precondition(pthread_cond_wait(jobQueued, mutex) == 0, "pthread_cond_wait failed")
        idle -= 1
      }
      let job = queue.removeFirst()
      precondition(pthread_mutex_unlock(mutex) == 0, "pthread_mutex_unlock failed")
      job.runSynchronously(on: executor)
      precondition(pthread_mutex_lock(mutex) == 0, "pthread_mutex_lock failed")
    }
  }
}

/// At most `limit` holders at once; the others wait suspended, first come first served.
/// Guarded by a pthread mutex, which ThreadSanitizer sees: a contended
/// `Synchronization.Mutex` hands over through the kernel (a priority-inheritance futex),
/// which it does not, and it reported the accesses of two holders in turn as a race.
final class AsyncPermits: @unchecked Sendable {
  // @unchecked: `free` and `waiting` are read and written only with `mutex` held.
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private var free: Int
  private var waiting: [CheckedContinuation<Void, Never>] = []

  init(_ limit: Int) {
    free = limit
    precondition(pthread_mutex_init(mutex, nil) == 0, "pthread_mutex_init failed")
  }

  func acquire() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      precondition(pthread_mutex_lock(mutex) == 0, "pthread_mutex_lock failed")
      let granted = free > 0
      if granted { free -= 1 } else { waiting.append(continuation) }
      precondition(pthread_mutex_unlock(mutex) == 0, "pthread_mutex_unlock failed")
      if granted { continuation.resume() }
    }
  }

  func release() {
    precondition(pthread_mutex_lock(mutex) == 0, "pthread_mutex_lock failed")
    let next = waiting.isEmpty ? nil : waiting.removeFirst()
    if next == nil { free += 1 }
    precondition(pthread_mutex_unlock(mutex) == 0, "pthread_mutex_unlock failed")
    next?.resume()
  }
}

/// The trait of a test that runs exit tests (`@Test(.runsExitTests)`; on a suite, of each of
/// its tests): the test runs with ``BlockingTestExecutor/shared`` as its task executor
/// preference, so the waits of its exit tests hold that executor's threads instead of the
/// cooperative pool's, and at most eight of the process's tests with this trait run at once,
/// so the process never starts hundreds of children at once. Without the trait a pass ran a
/// median of two or three exit-test children at a time and up to fourteen (sampled every
/// 0.2 s on two cores); with at most two, the exit tests became the pass's critical path
/// (52-55 s for a plain pass against 38-47 s, 153 s under ThreadSanitizer against 57 s), with
/// eight 42-47 s and 67 s. A test waiting for its turn holds no thread; the wait counts in
/// its time limit.
public struct RunsExitTests: SuiteTrait, TestTrait, TestScoping {
  /// Tests with this trait running at once, in the whole process: `EXIT_TEST_CONCURRENCY`
  /// from the environment when it is a whole number above 0, else 8.
  static let running = AsyncPermits(
    getenv("EXIT_TEST_CONCURRENCY").flatMap { Int(String(cString: $0)) }.flatMap { $0 > 0 ? $0 : nil } ?? 8)

  public var isRecursive: Bool { true }

  public func provideScope(
    for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
  ) async throws {
    // The suite's own scope, and a parameterized test's before its cases, pass through: the
    // bound is per test case.
    guard testCase != nil else { return try await function() }
    await Self.running.acquire()
    defer { Self.running.release() }
    try await withTaskExecutorPreference(BlockingTestExecutor.shared) {
      try await function()
    }
  }
}

extension Trait where Self == RunsExitTests {
  /// See ``RunsExitTests``.
  public static var runsExitTests: Self { Self() }
}
