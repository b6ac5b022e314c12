import Sync

/// An elastic pool of threads for blocking work awaited from async code: file I/O, C
/// libraries, database drivers, locks held for long - the calls that must not run on Swift's
/// cooperative pool, which has one thread per CPU and stalls every task once they all block
/// (`Task.detached` runs on that same pool).
///
/// ```swift
/// let text = try await ThreadPool.shared.run { try readWholeFile(path) }
/// ```
///
/// ``run(_:)`` suspends the calling task (no thread waits), runs the closure on a pool thread
/// and resumes the task with the closure's value, or throws ``ThreadPoolError``: the
/// closure's own error with its static type (``ThreadPoolError/failed(_:)``), or what the
/// pool did instead of running it. ``shared`` is ready to use; create pools of your own for
/// work that needs its own limits, names or thread settings, and ``shutDown()`` them.
///
/// **Threads.** Each worker is a toolkit ``Thread`` named `<pool name>-<index>` (the lowest
/// index free when it started), configured by ``Configuration/threadConfiguration`` (stack
/// size, priority, affinity). The kernel keeps 15 bytes of a name: when `<name>-<index>` is
/// longer, the kernel name (what `ps`, `top -H` and `/proc/self/task/*/comm` show) is the
/// pool's name cut on whole characters so that `-<index>` still fits (`"image-decoder"`
/// worker 12 is `"image-decode-12"`), and cut before a NUL character the same way;
/// ``Thread/name`` keeps the full name. Threads start on demand, when work is queued that
/// no idle or starting thread will take, up to
/// ``Configuration/maximumThreads``; a thread idle for ``Configuration/idleTimeout`` ends
/// while more than ``Configuration/minimumThreads`` run. The most recently idle thread is
/// woken first, so under a light load the others retire.
///
/// **Default sizes.** ``usableProcessorCount`` is the number of CPUs the process may use:
/// its affinity mask (`sched_getaffinity`) capped by its cgroup's CPU quota (`cpu.max` for
/// cgroup v2, `cpu.cfs_quota_us / cpu.cfs_period_us` for v1, rounded up), not the machine's
/// core count. Blocking work mostly waits, so the default maximum leaves room for it:
/// `max(16, 4 * usableProcessorCount)` threads (``defaultMaximumThreads``).
///
/// **Priority.** Work is queued at its submitting task's priority (`Task.currentPriority`)
/// in one of three levels: high (`.high`/`.userInitiated` and above), medium (above
/// `.utility`, which includes `.medium`), low (`.utility`/`.low` and below, `.background`).
/// A free thread takes the oldest job of the highest non-empty level, so high-priority work
/// never waits behind queued lower-priority work (only behind work already running). The
/// rule is strict: low-priority work waits as long as higher work is queued. A job's level
/// is fixed when it is submitted (a later priority escalation of the task does not move it).
///
/// **Back-pressure.** At most ``Configuration/queueCapacity`` jobs are queued. A `run` that
/// finds the queue full suspends its task (a parked continuation: no thread blocks, the
/// cooperative pool is not touched) in a waiting list until a queued job starts or is
/// cancelled; then the oldest waiting job of the highest level is queued. Cancelling a task
/// that waits there throws ``ThreadPoolError/cancelled`` at once.
///
/// **Cancellation.** A task cancelled while its work is queued (or waiting, or handed to a
/// thread that has not started it) gets ``ThreadPoolError/cancelled`` at once; the closure
/// never runs. A task cancelled while its closure runs sets that worker thread's exit request
/// (``Thread/requestExit()``) and still waits for the closure's outcome; the worker ends
/// after the closure returns (an exit request cannot be withdrawn, so the thread is not
/// reused; a new one starts when needed). What notices the exit request while the closure
/// runs:
/// - the closure's own checks of `Thread.current.isExitRequested`;
/// - exit-request handlers the closure added with ``Thread/addExitRequestHandler(_:)``: they
///   run on the cancelling thread and can close a descriptor or signal a condition the
///   closure waits on (remove them before the closure returns, with
///   ``Thread/removeExitRequestHandler(_:)``: the thread object outlives the job);
/// - a run loop run on the worker (the `RunLoop` module): its `run` calls return `.stopped`.
///
/// Nothing else is interrupted: Sync's locks, conditions, semaphores and latches,
/// ``Thread/sleep(for:)`` and blocking system calls wait on as usual.
///
/// **Shutdown.** ``shutDown()`` rejects work submitted from then on with
/// ``ThreadPoolError/shutDown``, lets the queued and waiting work run to its end, and returns
/// once every worker thread has been joined. (A thread that retired earlier, after its idle
/// timeout or a cancelled job, detached itself as it left; it had no work left.) A closure that blocks past the shutdown keeps it
/// waiting (its own task still gets its value); a pool dropped without ``shutDown()`` shuts
/// down the same way without anyone waiting, and its threads end once the work is done.
///
/// **Costs.** A job costs one heap allocation, its record (the continuation lives in the
/// task), plus the closure's context when the closure captures values (Swift allocates it
/// when the escaping closure is formed, as for any escaping closure); one lock section to
/// submit and one to take the job; a futex wake when a thread sleeps idle.
public final class ThreadPool: Sendable {
  /// The pool's limits and its threads' configuration.
  public struct Configuration: Sendable, Hashable {
    /// Threads kept through idle periods once started (default 0: an idle pool ends all its
    /// threads). Threads still start only when work needs them.
    public var minimumThreads: Int = 0

    /// The most threads running at once (default ``ThreadPool/defaultMaximumThreads``). Work
    /// beyond them is queued. Any value from ``minimumThreads`` (and 1) up is allowed,
    /// `Int.max` included for no limit of the pool's own (the system's still applies: see
    /// ``ThreadPoolError/threadStartFailed(_:)``).
    public var maximumThreads: Int = ThreadPool.defaultMaximumThreads

    /// How long a thread waits idle before it ends, while more than ``minimumThreads`` run
    /// (default 10 seconds, on the monotonic clock).
    public var idleTimeout: Duration = .seconds(10)

    /// The most jobs queued at once (default 4,096); further `run` calls wait, suspended,
    /// until a queued job starts (see the back-pressure rule on ``ThreadPool``).
    public var queueCapacity: Int = 4096

    /// Stack size, priority, affinity and the other settings of every worker thread. Its
    /// `name` is replaced by `<pool name>-<index>`. ``ThreadConfiguration/finishBeforeExit``
    /// must stay false (a pool refuses it): an idle worker waits for work that never comes,
    /// so `exit()` would wait for ever; to have queued work finish before the process ends,
    /// call ``ThreadPool/shutDown()`` first.
    public var threadConfiguration = ThreadConfiguration()

    /// The defaults: no minimum, ``ThreadPool/defaultMaximumThreads`` threads, 10 s idle
    /// timeout, 4,096 queued jobs, default thread settings (512 KiB stack).
    public init() {}
  }

  /// A snapshot of a pool's load, read atomically (all counters at one instant).
  public struct Statistics: Sendable, Hashable {
    /// Threads running or starting (idle ones included).
    public var threads: Int
    /// Threads sleeping idle, waiting for work.
    public var idleThreads: Int
    /// Closures running now.
    public var runningJobs: Int
    /// Jobs queued, not started.
    public var queuedJobs: Int
    /// Jobs waiting to be queued because the queue is full.
    public var waitingJobs: Int
    /// Whether ``ThreadPool/shutDown()`` has been called (new work is rejected).
    public var isShutDown: Bool
  }

  /// The number of CPUs this process may use: its affinity mask capped by its cgroup CPU
  /// quota (rounded up), at least 1. Read once, on first use, from the first thread that
  /// asks (its affinity mask is the process's unless that thread changed it).
  public static let usableProcessorCount: Int = ProcessorLimits.usableProcessorCount()

  /// The default ``Configuration/maximumThreads``: `max(16, 4 * usableProcessorCount)`.
  /// Blocking work mostly waits, so a pool needs more threads than CPUs to keep them busy;
  /// at least 16 so that a small container still overlaps many waits.
  public static var defaultMaximumThreads: Int { max(16, 4 * usableProcessorCount) }

  /// The process-wide pool, named `"blocking"` (threads `blocking-0`, `blocking-1`...), with
  /// the default configuration. Created on first use; never shut down (calling
  /// ``shutDown()`` on it stops the process: other code relies on it).
  public static let shared = ThreadPool(name: "blocking", configuration: Configuration(), isShared: true)

  /// The pool's name, the prefix of its threads' names.
  public let name: String

  /// The limits the pool was created with.
  public var configuration: Configuration { core.configuration }

  @usableFromInline
  let core: ThreadPoolCore
  private let isShared: Bool

  /// Creates a pool. No thread starts until work arrives; threads start as queued work needs
  /// them, and once started, ``Configuration/minimumThreads`` of them stay through idle
  /// periods.
  ///
  /// A configuration out of range is a programming error and stops the process, naming the
  /// field: a negative ``Configuration/minimumThreads``, a ``Configuration/maximumThreads``
  /// below 1 or below the minimum, a ``Configuration/queueCapacity`` below 1, a negative
  /// ``Configuration/idleTimeout``, or a ``Configuration/threadConfiguration`` that
  /// ``ThreadConfiguration/validate()`` refuses (call it first to check settings read from
  /// outside the program) or that sets ``ThreadConfiguration/finishBeforeExit``.
  public convenience init(name: String, configuration: Configuration = Configuration()) {
    self.init(name: name, configuration: configuration, isShared: false)
  }

  private init(name: String, configuration: Configuration, isShared: Bool) {
    ThreadPool.check(configuration)
    self.name = name
    self.isShared = isShared
    core = ThreadPoolCore(name: name, configuration: configuration)
  }

  deinit {
    core.shutdownWithoutWaiting()
  }

  /// Stops the process when `configuration` is out of range (see `init`).
  private static func check(_ configuration: Configuration) {
    if configuration.minimumThreads < 0 {
      reportMisuse("ThreadPool", "minimumThreads must be at least 0 (got \(configuration.minimumThreads))")
    }
    if configuration.maximumThreads < max(1, configuration.minimumThreads) {
      reportMisuse(
        "ThreadPool",
        "maximumThreads must be at least 1 and at least minimumThreads (\(configuration.minimumThreads)); got \(configuration.maximumThreads)"
      )
    }
    if configuration.queueCapacity < 1 {
      reportMisuse("ThreadPool", "queueCapacity must be at least 1 (got \(configuration.queueCapacity))")
    }
    if configuration.idleTimeout < .zero {
      reportMisuse("ThreadPool", "idleTimeout must not be negative (got \(configuration.idleTimeout))")
    }
    if configuration.threadConfiguration.finishBeforeExit {
      reportMisuse(
        "ThreadPool",
        "threadConfiguration.finishBeforeExit is not supported (idle workers would make exit() wait for ever); call shutDown() before exiting to finish queued work"
      )
    }
    do throws(ThreadConfigurationError) {
      try configuration.threadConfiguration.validate()
    } catch {
      reportMisuse("ThreadPool", "invalid threadConfiguration: \(error)")
    }
  }

  /// Runs `body` on one of the pool's threads and returns its value; the calling task is
  /// suspended meanwhile (it holds no thread).
  ///
  /// ```swift
  /// let rows = try await pool.run { () throws(DatabaseError) in try connection.query(sql) }
  /// ```
  ///
  /// The closure may block as long as it needs to: it runs on a pool thread, never on
  /// Swift's cooperative pool. The pool releases it before `run` returns (on a pool thread
  /// after it ran, or on the cancelling or submitting thread when it never runs).
  ///
  /// - Throws: ``ThreadPoolError``:
  ///   - ``ThreadPoolError/failed(_:)`` with the error `body` threw;
  ///   - ``ThreadPoolError/cancelled`` when the task was cancelled before a thread started
  ///     `body` (it never runs); a task cancelled while `body` runs waits for its outcome
  ///     and gets it, and the thread's exit request is set (see "Cancellation" on
  ///     ``ThreadPool``);
  ///   - ``ThreadPoolError/shutDown`` after ``shutDown()``;
  ///   - ``ThreadPoolError/threadStartFailed(_:)`` when no thread runs and none could be
  ///     started.
  @inlinable
  public func run<Value: Sendable, Failure: Error>(
    _ body: @escaping @Sendable () throws(Failure) -> Value
  ) async throws(ThreadPoolError<Failure>) -> Value {
    if Task.isCancelled { throw .cancelled }
    let job = TypedPoolJob<Value, Failure>(core: core, level: ThreadPool.level(of: Task.currentPriority))
    let outcome = await job.submit(body)
    return try outcome.get()
  }

  /// The queue level of a task priority: 0 for `.high` (25) and above, 1 above `.utility`
  /// (17), 2 for `.utility` and below.
  @usableFromInline
  static func level(of priority: TaskPriority) -> Int {
    if priority.rawValue >= TaskPriority.high.rawValue { return 0 }
    if priority.rawValue > TaskPriority.utility.rawValue { return 1 }
    return 2
  }

  /// Shuts the pool down: work submitted from now on throws ``ThreadPoolError/shutDown``;
  /// queued and waiting work still runs; returns once every closure has returned and every
  /// worker thread still running at the call has been joined (the calling task is suspended meanwhile, no thread
  /// blocks; the joins themselves only wait for threads that have left their work loop).
  ///
  /// A closure that blocks past the shutdown keeps `shutDown()` waiting until it returns;
  /// cancelling the task that awaits `shutDown()` does not shorten it (cancel the tasks that
  /// submitted the work, which sets their threads' exit requests). Calling it again, or from
  /// several tasks, is allowed: each call returns once the pool is fully stopped.
  ///
  /// Calling it on ``shared`` stops the process (misuse).
  public func shutDown() async {
    if isShared { reportMisuse("ThreadPool", "the shared pool cannot be shut down (other code relies on it)") }
    await core.shutdown()
  }

  /// The former spelling of ``shutDown()``, which the toolkit's other types
  /// (`RunLoopExecutor`, `RunLoopThreadGroup`) and ``ThreadPoolError/shutDown`` use.
  @available(*, deprecated, renamed: "shutDown()")
  public func shutdown() async {
    await shutDown()
  }

  /// The pool's current load: threads, idle threads, running, queued and waiting jobs.
  public var statistics: Statistics {
    let counts = core.counts()
    return Statistics(
      threads: counts.threads, idleThreads: counts.idleThreads, runningJobs: counts.runningJobs,
      queuedJobs: counts.queuedJobs, waitingJobs: counts.waitingJobs,
      isShutDown: counts.isShutDown)
  }
}
