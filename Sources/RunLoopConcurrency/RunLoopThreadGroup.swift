import CThreadingShims
import RunLoop
import Sync
import Threads

/// A group of run-loop threads that runs Swift tasks: a `TaskExecutor` for
/// `withTaskExecutorPreference(_:operation:)` and `Task(executorPreference:)`.
///
/// ```swift
/// let group = try await RunLoopThreadGroup.start(threadCount: 4, name: "io")
/// let summary = await Task(executorPreference: group) { await summarize(files) }.value
/// await group.shutDown()   // runs what is still queued, then joins the threads
/// ```
///
/// Each thread is a ``/RunLoop/RunLoopThread``: it runs its loop in the default mode, so
/// sources, timers and ports added to one of ``runLoops`` are served by the same threads as
/// the tasks. A task's jobs run at the source step of a pass, like a ``RunLoopExecutor``'s.
///
/// **Where jobs run.** Round robin: the n-th job enqueued goes to thread `n % threadCount`,
/// whichever thread enqueues it (one relaxed atomic increment picks the thread, so enqueuers
/// never contend on a shared queue). On each thread, higher `ExecutorJob.priority` first,
/// first in, first out within a priority. A task executor promises no thread and no
/// isolation: consecutive jobs of one task may run on different threads of the group, and
/// actors keep their own executors (an actor's code runs where its executor runs it).
///
/// This type is deliberately not a `SerialExecutor` as well: the concurrency runtime takes a
/// slower path for an executor that is both. For actors pinned to one thread, use a
/// ``RunLoopExecutor`` of one of ``runLoops``.
///
/// **Shutting down** (`shutDown()`) drains: every job queued on a thread when it closes
/// runs on that thread before the thread ends, and the call joins every thread. A job that
/// arrives at a closed thread (during or after the shutdown, or after the group was
/// released) runs on the Swift runtime's global concurrent executor instead: a task executor
/// does not promise a thread, and moving the job keeps its task going rather than leaving
/// it suspended forever. No job is dropped.
///
/// **Lifetime.** A task made with `Task(executorPreference:)` keeps the group alive until the
/// task is destroyed (the runtime retains a task's preferred executor); a
/// `withTaskExecutorPreference` scope does not, so keep the group for as long as it runs.
/// Releasing the group without `shutDown()` shuts it down without draining (its queued jobs
/// move to the global concurrent executor) and joins its threads, or detaches the thread it
/// is released on when that is one of its own (the last reference may be a task's).
///
/// **Cost.** An enqueue is one relaxed increment, one short lock of the chosen thread's
/// queue, and a wake-up system call only when that thread sleeps; it allocates nothing once
/// each priority in use has reached its peak queue length on that thread.
public final class RunLoopThreadGroup: TaskExecutor, @unchecked Sendable, CustomStringConvertible {
  // @unchecked: `workers` is immutable; each worker guards its own queue; the shutdown state
  // is atomic and the latch is thread-safe.

  /// The group's name; its threads are named `"<name>-<index>"`.
  public let name: String
  private let workers: [GroupWorker]
  /// Counts enqueues; its value modulo the thread count picks the next job's thread.
  private let nextWorker = AtomicInteger<UInt>(0)
  /// 0 running, 1 shutting down, 2 shut down.
  private let state = AtomicInteger<UInt8>(0)
  /// Opens when the first shutdown has joined every thread; later callers wait on it.
  private let shutDownFinished = Latch(count: 1)

  /// Starts `threadCount` run-loop threads and returns once each runs its loop. Blocks the
  /// caller for the threads' start-up only.
  ///
  /// - Parameters:
  ///   - threadCount: How many threads; at least 1 (fewer stops the process: misuse).
  ///   - name: The group's name; thread `i` is named `"<name>-<i>"`.
  ///   - configuration: Stack, priority, affinity and the other settings of every thread
  ///     (its `name` is replaced as above).
  /// - Throws: ``/Threads/ThreadStartError``, as ``/RunLoop/RunLoopThread/start(name:configuration:)``
  ///   throws it; the threads already started are then stopped and joined.
  @available(*, noasync, message: "blocks until the group's threads run their loops")
  public init(
    threadCount: Int, name: String = "run-loop-group", configuration: ThreadConfiguration = ThreadConfiguration()
  ) throws(ThreadStartError) {
    if threadCount < 1 {
      concurrencyMisuse("RunLoopThreadGroup", "created with \(threadCount) threads (at least one is needed)")
    }
    self.name = name
    var workers: [GroupWorker] = []
    workers.reserveCapacity(threadCount)
    for index in 0..<threadCount {
      let thread: RunLoopThread
      do {
        thread = try RunLoopThread.start(name: "\(name)-\(index)", configuration: configuration)
      } catch {
        for worker in workers { worker.closeAndForward() }
        for worker in workers { worker.stopThread() }
        throw error
      }
      workers.append(GroupWorker(consume thread))
    }
    self.workers = workers
    // Before `self` is published, so every job finds it: the lock of the first enqueue
    // orders this store before the worker thread reads it.
    for worker in workers { worker.taskExecutor = asUnownedTaskExecutor() }
  }

  /// Starts a group as ``init(threadCount:name:configuration:)`` does, from async code: the
  /// threads are started on a short-lived helper thread while the calling task is suspended.
  ///
  /// - Throws: ``/Threads/ThreadStartError``, as the initializer throws it.
  public static func start(
    threadCount: Int, name: String = "run-loop-group", configuration: ThreadConfiguration = ThreadConfiguration()
  ) async throws(ThreadStartError) -> RunLoopThreadGroup {
    let outcome = LockedValue<Result<RunLoopThreadGroup, ThreadStartError>?>(nil)
    await runOffPool(name: "group-start") {
      let result: Result<RunLoopThreadGroup, ThreadStartError>
      do throws(ThreadStartError) {
        result = .success(try RunLoopThreadGroup(threadCount: threadCount, name: name, configuration: configuration))
      } catch {
        result = .failure(error)
      }
      outcome.withLock { $0 = result }
    }
    guard let result = outcome.withLock({ $0 }) else {
      preconditionFailure("RunLoopThreadGroup.start: the helper returned without an outcome")
    }
    return try result.get()
  }

  deinit {
    // Jobs queued now belong to tasks that no longer keep the group alive: they move to the
    // global executor rather than run with a group being released as their task executor.
    shutDownWorkers(drain: false)
  }

  /// How many threads the group has.
  public var threadCount: Int { workers.count }

  /// The group's threads, in index order.
  public var threads: [Thread] { workers.map(\.thread) }

  /// The run loops of the group's threads, in index order: add sources, timers and ports
  /// to them, or make a ``RunLoopExecutor`` for an actor pinned to one of them.
  public var runLoops: [RunLoop] { workers.map(\.runLoop) }

  /// Queues `job` on the next thread in round-robin order; see the type's "Where jobs run".
  /// Callable from any thread; never blocks (beyond the chosen queue's short lock). A job
  /// that meets a closed thread runs on the global concurrent executor.
  public func enqueue(_ job: consuming ExecutorJob) {
    let priority = job.priority.rawValue
    let unownedJob = UnownedJob(job)
    // Relaxed: the counter only spreads jobs; the chosen queue's lock orders the job.
    let ticket = nextWorker.fetchAdd(1, ordering: .relaxed)
    let worker = workers[Int(ticket % UInt(workers.count))]
    if !worker.push(unownedJob, priority: priority) {
      globalConcurrentExecutor.enqueue(ExecutorJob(unownedJob))
    }
  }

  /// Shuts the group down and joins its threads: each thread closes its queue, runs every
  /// job queued on it, and ends (its run loop's other items are dropped, as
  /// ``/RunLoop/RunLoopThread/stop()`` drops them). Jobs that arrive at a closed thread run on
  /// the global concurrent executor (see the type's "Shutting down"). Blocks until every
  /// thread has ended; a second call waits for the first to finish, then returns.
  ///
  /// Calling it on one of the group's threads stops the process (misuse: a thread cannot
  /// join itself); release the group there instead, which shuts it down without joining
  /// that thread.
  @available(*, noasync, message: "blocks until the group's threads have ended")
  public func shutDown() {
    let current = tk_thread_identity()
    if workers.contains(where: { $0.identity == current }) {
      concurrencyMisuse(
        "RunLoopThreadGroup",
        "shutDown() called on one of the group's threads (\(name)): a thread cannot join itself (release the group instead)"
      )
    }
    shutDownWorkers(drain: true)
  }

  /// Shuts the group down as `shutDown()` does, suspending the calling task instead of
  /// blocking its thread (the waiting happens on a short-lived helper thread). May be called
  /// from a task running on the group: that task's thread is free while it waits, and the
  /// task resumes on the global concurrent executor (its preferred group is closed).
  public func shutDown() async {
    await runOffPool(name: "group-shutdown") { self.shutDownWorkers(drain: true) }
  }

  /// Whether `shutDown()` has finished (every thread has ended).
  public var isShutDown: Bool { state.load(ordering: .acquiring) == 2 }

  /// Closes every thread's queue, runs (`drain`) or moves to the global executor the jobs
  /// left in it, and stops the threads; once. A thread cannot drain or join itself: on one of
  /// the group's threads (the group released in one of its jobs) that thread's jobs move and
  /// it is detached, not joined.
  private func shutDownWorkers(drain: Bool) {
    // Full: the winner's later stores (state 2, the latch) are what other callers wait for.
    if !state.compareAndSwap(expected: 0, desired: 1, ordering: .full) {
      let current = tk_thread_identity()
      if !workers.contains(where: { $0.identity == current }) { shutDownFinished.wait() }
      return
    }
    let current = tk_thread_identity()
    for worker in workers {
      if !drain || worker.identity == current {
        worker.closeAndForward()
        continue
      }
      do throws(PerformError) {
        try worker.runLoop.performAndWait(inModes: [.common]) { worker.closeAndDrain() }
      } catch {
        // The thread ended on its own (a job requested its exit): its source's cancellation
        // already closed the queue and moved its jobs; this makes sure of it.
        worker.closeAndForward()
      }
    }
    for worker in workers { worker.stopThread() }
    state.store(2, ordering: .releasing)
    shutDownFinished.countDown()
  }

  /// `"RunLoopThreadGroup(name, threads: N, queued: Q)"`.
  public var description: String {
    "RunLoopThreadGroup(\(name), threads: \(workers.count), queued: \(workers.reduce(0) { $0 + $1.queuedJobCount }))"
  }
}

/// One thread of a ``RunLoopThreadGroup``: its run-loop thread, and the queue its loop's
/// source drains.
private final class GroupWorker: @unchecked Sendable {
  // @unchecked: `queue` and `closed` are protected by `lock`; `handle` is taken once by the
  // group's single shutdown; `taskExecutor` is written before the group is published.
  let runLoop: RunLoop
  let thread: Thread
  /// The thread's `tk_thread_identity()`.
  let identity: UInt64
  private var handle: RunLoopThread?
  private var source: RunLoopSource!
  private let lock = Lock()
  private var queue = JobQueue()
  private var closed = false
  var taskExecutor: UnownedTaskExecutor?

  init(_ thread: consuming RunLoopThread) {
    runLoop = thread.runLoop
    self.thread = thread.thread
    let identity = LockedValue<UInt64>(0)
    do throws(PerformError) {
      try thread.performAndWait { identity.withLock { $0 = tk_thread_identity() } }
    } catch {
      preconditionFailure("RunLoopThreadGroup: a newly started thread did not run a request (\(error))")
    }
    self.identity = identity.withLock { $0 }
    handle = consume thread
    // The loop holds the source; the source reaches the worker weakly, so no cycle.
    let box = WeakWorker()
    source = RunLoopSource(
      order: 0,
      cancel: { _, _ in box.worker?.closeAndForward() },
      perform: { box.worker?.drain() })
    box.worker = self
    runLoop.add(source, forMode: .common)
  }

  deinit {
    source.invalidate()
  }

  var queuedJobCount: Int { lock.withLock { queue.count } }

  /// Queues `job`, or returns false when the worker is closed. Signals and wakes the loop
  /// on the queue's transition to non-empty (see `JobSourceQueue.signal`).
  func push(_ job: UnownedJob, priority: UInt8) -> Bool {
    lock.lock()
    if closed {
      lock.unlock()
      return false
    }
    let wasEmpty = queue.isEmpty
    queue.push(job, priority: priority)
    lock.unlock()
    if wasEmpty { JobSourceQueue.signal(source, runLoop) }
    return true
  }

  /// The source's perform callback: one pass of `JobSourceQueue.drainPass`.
  func drain() {
    guard let taskExecutor else { return }
    JobSourceQueue.drainPass(
      lock: lock, source: source, runLoop: runLoop,
      count: { queue.count }, pop: { queue.popHighest() },
      run: { $0.runSynchronously(on: taskExecutor) })
  }

  /// On the worker's thread: closes the queue, then runs every job left in it (none can
  /// arrive once it is closed, so this ends).
  func closeAndDrain() {
    lock.withLock { closed = true }
    guard let taskExecutor else { return }
    while true {
      lock.lock()
      let next = queue.popHighest()
      lock.unlock()
      guard let job = next else { return }
      job.runSynchronously(on: taskExecutor)
    }
  }

  /// Closes the queue and moves the jobs left in it to the global concurrent executor (the
  /// thread cannot run them: it has ended, or the caller is in one of its jobs).
  func closeAndForward() {
    var moved: [UnownedJob] = []
    lock.lock()
    closed = true
    while let job = queue.popHighest() { moved.append(job) }
    lock.unlock()
    for job in moved { globalConcurrentExecutor.enqueue(ExecutorJob(job)) }
  }

  /// Stops and joins the thread (or, on the thread itself, detaches it: see
  /// ``/RunLoop/RunLoopThread``'s drop).
  func stopThread() {
    guard let handle = handle.take() else { return }
    if identity == tk_thread_identity() {
      _ = consume handle
    } else {
      handle.stop()
    }
  }
}

/// The worker as its source's callbacks see it.
private final class WeakWorker: @unchecked Sendable {
  // @unchecked: written once before the source is added to a loop, read after.
  weak var worker: GroupWorker?
}
