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
/// actors keep their own executors (an actor's code runs where its executor runs it). For
/// the same reason a job that runs its thread's loop nested (in the default mode) lets that
/// run take further jobs of the group's queue for the thread, unlike a ``RunLoopExecutor``,
/// whose nested runs take none of its jobs.
///
/// **Sleeping tasks.** `Task.sleep` in a task that prefers the group is timed by the group's
/// threads' run-loop timers (the toolchain's `SchedulingExecutor`, visible with
/// `@_spi(ExperimentalScheduling)`): never early, at most its tolerance late, and the task
/// resumes on one of the group's threads; see that extension.
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
/// it suspended forever. Delayed jobs whose timers have not fired (sleeping tasks) move to
/// the platform's timers with their deadlines unchanged. No job is dropped.
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
  // @unchecked: `workers` is immutable; each worker guards its own queue and delayed jobs;
  // the shutdown state is atomic and the latch is thread-safe; `timerScheduledForTesting`
  // is written before the group is used.

  /// The group's name; its threads are named `"<name>-<index>"` (in the kernel too, where a
  /// long name loses the end of `name`, never the index, to fit 15 bytes, and a name holding
  /// a NUL is cut before it, the index kept).
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
  ///     (its `name` is replaced as above). ``/Threads/ThreadConfiguration/finishBeforeExit``
  ///     must stay false (setting it stops the process: misuse): the threads run their loops
  ///     until the group is shut down, so `exit()` would wait for them for ever; to have
  ///     queued jobs finish before the process ends, call `shutDown()` first (as for a
  ///     ``/Threads/ThreadPool``).
  /// - Throws: ``/Threads/ThreadStartError``, as ``/RunLoop/RunLoopThread/start(name:configuration:)``
  ///   throws it; the threads already started are then stopped and joined.
  @available(*, noasync, message: "blocks until the group's threads run their loops")
  public init(
    threadCount: Int, name: String = "run-loop-group", configuration: ThreadConfiguration = ThreadConfiguration()
  ) throws(ThreadStartError) {
    if threadCount < 1 {
      concurrencyMisuse("RunLoopThreadGroup", "created with \(threadCount) threads (at least one is needed)")
    }
    if configuration.finishBeforeExit {
      concurrencyMisuse(
        "RunLoopThreadGroup",
        "configuration.finishBeforeExit is not supported (the threads run until shutDown(), so exit() would wait for ever); call shutDown() before exiting to finish queued jobs"
      )
    }
    self.name = name
    var workers: [GroupWorker] = []
    // Not `threadCount` itself: a count far beyond what the system can start (the start
    // then throws) would make a reservation whose byte count overflows.
    workers.reserveCapacity(Swift.min(threadCount, 256))
    for index in 0..<threadCount {
      let thread: RunLoopThread
      do {
        var numbered = configuration
        numbered.kernelNameKeptSuffix = "-\(index)"
        thread = try RunLoopThread.start(name: "\(name)-\(index)", configuration: numbered)
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

  /// Arms a timer on the next thread in round-robin order that queues `job` on that thread
  /// at `deadline`, at most `tolerance` later; on a closed thread, `job.handOn` at once (see
  /// the scheduling extension).
  func scheduleDelayed(_ job: DelayedGroupJob, deadline: MonotonicInstant, tolerance: Duration) {
    // Relaxed, as in `enqueue`: the worker's lock orders the rest.
    let ticket = nextWorker.fetchAdd(1, ordering: .relaxed)
    let worker = workers[Int(ticket % UInt(workers.count))]
    guard let timer = worker.schedule(job, deadline: deadline, tolerance: tolerance) else {
      job.handOn()
      return
    }
    timerScheduledForTesting?(timer)
  }

  /// Delayed jobs whose timers have neither fired nor been handed on (a snapshot).
  var delayedJobCount: Int { workers.reduce(0) { $0 + $1.delayedJobCount } }

  /// Test seam, nil outside tests: sees each delayed job's timer once it is armed. Set
  /// before the group is used.
  var timerScheduledForTesting: (@Sendable (RunLoopTimer) -> Void)?

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

/// One thread of a ``RunLoopThreadGroup``: its run-loop thread, the queue its loop's source
/// drains, and the delayed jobs its loop's timers hold.
final class GroupWorker: @unchecked Sendable {
  // @unchecked: `queue`, `closed`, `delayed` and `nextDelayedKey` are protected by `lock`;
  // `handle` is taken once by the group's single shutdown; `taskExecutor` is written before
  // the group is published. `queue` and `closed` skip the runtime's dynamic exclusivity
  // check: `lock` already makes each access exclusive, and the check's thread-local lookup
  // would be paid on every job's path.
  let runLoop: RunLoop
  let thread: Thread
  /// The thread's `tk_thread_identity()`.
  let identity: UInt64
  private var handle: RunLoopThread?
  private var source: RunLoopSource!
  private let lock = Lock()
  @exclusivity(unchecked) private var queue = JobQueue()
  @exclusivity(unchecked) private var closed = false
  /// Delayed jobs whose timers have not fired, by key; emptied (the jobs handed on) when the
  /// worker closes. Protected by `lock`.
  private var delayed: [UInt64: DelayedGroupJob] = [:]
  private var nextDelayedKey: UInt64 = 0
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

  var delayedJobCount: Int { lock.withLock { delayed.count } }

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
    let delayedJobs: [UInt64: DelayedGroupJob] = lock.withLock {
      closed = true
      defer { delayed = [:] }
      return delayed
    }
    handOn(delayedJobs)
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
    let delayedJobs = delayed
    delayed = [:]
    lock.unlock()
    handOn(delayedJobs)
    for job in moved { globalConcurrentExecutor.enqueue(ExecutorJob(job)) }
  }

  /// Arms a timer on the thread's loop that queues `job` there at `deadline`, at most
  /// `tolerance` later, and returns the timer. Returns nil, arming nothing, when the worker
  /// is closed: a loop whose thread has ended would keep the timer unfired for good.
  ///
  /// The check and the add are one step under `lock`, and a close takes every armed job
  /// under it, so each delayed job either fires here or is handed on by the close (also when
  /// the thread ends on its own: the loop drops its timers and the source's cancel closes
  /// the worker). The loop's lock is taken inside the worker's, never the other way round
  /// (the loop calls the worker's callbacks without its lock).
  func schedule(_ job: DelayedGroupJob, deadline: MonotonicInstant, tolerance: Duration) -> RunLoopTimer? {
    lock.lock()
    defer { lock.unlock() }
    if closed { return nil }
    nextDelayedKey &+= 1
    let key = nextDelayedKey
    // Weak: the loop holds the timer, and must not keep the worker alive through it.
    let timer = RunLoopTimer(fireAt: deadline, tolerance: tolerance) { [weak self] _ in self?.fireDelayed(key) }
    job.timer = timer
    delayed[key] = job
    runLoop.add(timer, forMode: .common)
    return timer
  }

  /// A delayed job's timer callback, on the worker's thread: queues the job here (it runs at
  /// the source step of this pass), unless a close has handed it on already. A close between
  /// the two steps hands it to the platform (its deadline has passed: it runs at once).
  private func fireDelayed(_ key: UInt64) {
    guard let entry = lock.withLock({ delayed.removeValue(forKey: key) }) else { return }
    entry.timer = nil
    if !push(entry.job, priority: entry.priority) { entry.handOn() }
  }

  /// Invalidates the timers of `jobs` (which releases them, also on a loop whose thread has
  /// ended) and hands the jobs to the platform's timers, due at the instants they were asked
  /// for.
  private func handOn(_ jobs: [UInt64: DelayedGroupJob]) {
    for entry in jobs.values {
      entry.timer?.invalidate()
      entry.timer = nil
      entry.handOn()
    }
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

/// A job waiting in a group thread's timer (a sleeping task's wake-up): the job, its
/// priority, and how to hand it to the platform's timers when the group cannot time it (the
/// closure keeps the job's own clock and instant; see the group's `SchedulingExecutor`
/// extension).
final class DelayedGroupJob: @unchecked Sendable {
  // @unchecked: `timer` is protected by the worker's lock until the job leaves `delayed`,
  // then touched only by the one path that took it out; the rest is immutable.
  let job: UnownedJob
  let priority: UInt8
  /// The platform hand-over: called at most once, by whoever takes the job out.
  let handOn: @Sendable () -> Void
  var timer: RunLoopTimer?

  init(_ job: UnownedJob, priority: UInt8, handOn: @escaping @Sendable () -> Void) {
    self.job = job
    self.priority = priority
    self.handOn = handOn
  }
}
