import RunLoop
import Sync
import Threads

/// A serial executor that runs Swift concurrency jobs on a run loop's thread, during that
/// loop's passes in the modes you choose (the common modes unless you say otherwise).
///
/// Give an actor this executor and all its code runs on the loop's thread:
///
/// ```swift
/// actor Connection {
///   let executor: RunLoopExecutor
///   nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
///   init(on runLoop: RunLoop) { executor = RunLoopExecutor(runLoop: runLoop) }
/// }
/// ```
///
/// **When jobs run.** The executor is an internal ``/RunLoop/RunLoopSource`` added to each
/// of its modes. Enqueueing a job (from any thread, including the loop's own) signals that
/// source and wakes the loop, so jobs run at the *source step* of the loop's next pass in
/// one of those modes, like any signalled custom source. A pass runs the jobs that were
/// queued when its source step began (and any that arrive meanwhile up to that number), at
/// most 512 and for about 2 ms at most (checked every 16 jobs); if jobs remain, the source is signalled again for the next pass, so neither a
/// stream of jobs nor a large backlog starves the loop's timers, ports and other sources. A loop that runs in a mode the
/// executor is not in runs none of its jobs until it runs in one of them again. A run nested
/// inside one of the executor's jobs runs none of its jobs either (the actor's synchronous
/// code is never interleaved); a run nested in other code of the loop's thread (a timer, a
/// perform block) runs them as usual.
///
/// **Order.** Higher `ExecutorJob.priority` first; first in, first out within a priority.
///
/// **Isolation checks.** ``checkIsolated()`` and ``isIsolatingCurrentContext()`` answer
/// from the calling thread: the loop's thread is isolated to this executor, every other
/// thread is not. So `actor.assumeIsolated { ... }` (and `preconditionIsolated`) pass on the
/// loop's thread, inside a job or in any callback of the loop, and stop the process with a
/// message elsewhere. The answer is known from the executor's creation (the run loop knows
/// its thread), before the loop's first pass, and asking never creates a run loop.
///
/// **Cost.** An enqueue takes the executor's lock once and allocates nothing once each
/// priority in use has seen its peak queue length (its ring doubles when full and never
/// shrinks); waking the loop follows the run loop's rule: a system call only when the loop
/// sleeps. A task that goes back and forth between the loop and its caller (its job is the
/// one enqueued last) hands the loop its CPU: when the loop is watching for work on the
/// enqueuing thread's own CPU (see ``/RunLoop/RunLoop/spinsBeforeSleeping``), the enqueue
/// yields that CPU to it, so the job runs at once instead of after the enqueuing thread
/// blocks; with every thread on one CPU of a 2-vCPU KVM guest, an actor hop there and back
/// then took 0.83-0.85x the time of two threads answering each other through eventfds
/// (1.32x without). Jobs of other tasks never yield, so a burst of calls from many tasks
/// stays a batch the loop runs in one pass (yielding for each made such a burst 5x slower
/// on one CPU). Each job costs its thread one lock round trip to dequeue.
///
/// **Delayed jobs** (`enqueue(_:after:tolerance:clock:)` and `enqueue(_:at:tolerance:clock:)`,
/// the toolchain's `SchedulingExecutor`, visible with `@_spi(ExperimentalScheduling)`) run on
/// the loop's timers: never early, at most their tolerance late; see that extension.
/// `Task.sleep` in an actor on this executor is not one of them on Swift 6.3: the runtime
/// times it with the task's preferred task executor, else the default executor, and the
/// wake-up is then enqueued here like any job. So ``shutDown()`` does not wait for a
/// sleeping actor method, and one that wakes after the shutdown is an enqueue after it (the
/// misuse below): let such methods return before shutting down. `Task.yield()` in such an
/// actor is alike on Swift 6.3: the runtime queues the yielding task elsewhere (on the global
/// executor, for a task that prefers no task executor), from where it is enqueued here
/// again; while it waits there it is not one of this executor's queued jobs.
///
/// **Shutting down** drains: `shutDown()` waits until the loop's thread has run every
/// queued job (and those they queue meanwhile) and no job runs, then closes the executor; an
/// enqueue after that stops the process with a message naming the misuse. Stop a ``/RunLoop/RunLoopThread``
/// after shutting down the executors of its loop:
///
/// ```swift
/// executor.shutDown()   // every queued job has run (`await executor.shutDown()` in async code)
/// worker.stop()         // the thread ends and is joined
/// ```
///
/// **The loop's thread ends.** Jobs need the loop's thread: an executor cannot move them to
/// another thread without breaking the isolation it promises, and dropping them would leave
/// their tasks suspended forever. So the process stops with a message naming the misuse:
/// - when the loop's thread ends (for example ``/RunLoop/RunLoopThread/stop()``) while jobs
///   are still queued: let the actors' work finish before stopping their thread;
/// - when a job is enqueued after the loop's thread has ended;
/// - when the executor is created for a run loop whose thread has already ended.
///
/// An actor with an `isolated deinit` enqueues its deinit as a job on its executor when its
/// last reference is released off the loop's thread, so the same rules apply to it: release
/// such actors before the executor is shut down (`shutDown()` then waits for their deinits)
/// or its loop's thread ends.
///
/// A loop that is never run keeps its jobs queued (their tasks wait) until it runs in one of
/// the executor's modes; if its thread ends first, the first rule applies.
///
/// **Effect on the loop.** The executor's source is in each of its modes for the executor's
/// lifetime, so a run in such a mode no longer ends with ``/RunLoop/RunLoopRunResult/finished``
/// for lack of sources (as with any source). It is invalidated when the executor is
/// released.
public final class RunLoopExecutor: SerialExecutor, @unchecked Sendable, CustomStringConvertible {
  // @unchecked: `queue`, `hasEnded`, `isShutDown` and the delayed-job state are protected
  // by `lock`; `isDraining` is the loop thread's alone; the rest is immutable. The fields a
  // job's path touches skip the runtime's dynamic exclusivity check (`@exclusivity(unchecked)`):
  // the lock, or the loop's thread, already makes each access exclusive, and the check's
  // thread-local lookup per access is a measurable part of a hop.

  /// The run loop whose thread runs the jobs.
  public let runLoop: RunLoop
  /// The modes in which the loop runs the jobs (``/RunLoop/RunLoopMode/common`` means every
  /// common mode, as for sources).
  public let modes: [RunLoopMode]

  private let source: RunLoopSource
  private let lock = Lock()
  /// Queued jobs. Protected by `lock`.
  @exclusivity(unchecked) private var queue = JobQueue()
  /// Set when the loop dropped the executor's source (its thread ended). Protected by `lock`.
  @exclusivity(unchecked) private var hasEnded = false
  /// True while `drain` runs jobs. Touched only on the loop's thread (the source's perform
  /// callback), so it needs no lock.
  @exclusivity(unchecked) private var isDraining = false
  /// Opened when the running `drain` ends: set by a shutdown's check that ran inside one of
  /// the jobs (a job running the loop nested). Touched only on the loop's thread, as
  /// `isDraining`.
  @exclusivity(unchecked) private var drainEnded: Latch?
  /// The identity of the job enqueued last (its address). Protected by `lock`.
  @exclusivity(unchecked) private var lastJobIdentity: UInt = 0
  /// Set by `shutDown` once the queue was empty. Protected by `lock`.
  @exclusivity(unchecked) private var isShutDown = false
  /// Delayed jobs whose timers have not fired yet. Protected by `lock`.
  private var delayedJobCount = 0
  /// Set by a `shutDown` waiting for the delayed jobs; opened when the last one is enqueued.
  /// Protected by `lock`.
  private var delayedJobsDone: Latch?
  /// The executor the jobs run as (`runSynchronously(on:)`): nil for this one; the main
  /// executor that forwards its jobs here sets itself, so the runtime sees the jobs on the
  /// main actor's executor. Written once, before the first job is enqueued (the enqueue's
  /// lock orders the write before `drain` reads it).
  var jobExecutor: UnownedSerialExecutor?

  /// Creates an executor whose jobs `runLoop`'s thread runs during its passes in `modes`.
  /// Callable from any thread; never blocks.
  ///
  /// Stops the process (misuse) when `runLoop`'s thread has already ended, or `modes` is
  /// empty.
  public init(runLoop: RunLoop, modes: [RunLoopMode] = [.common]) {
    checkModesNotEmpty(modes, "RunLoopExecutor", "its jobs could never run")
    self.runLoop = runLoop
    self.modes = modes
    // The source's callbacks reach the executor through a weak box: the run loop holds the
    // source, and must not keep the executor alive.
    let box = WeakExecutor()
    source = RunLoopSource(
      order: 0,
      name: "RunLoopExecutor jobs",
      cancel: { _, _ in box.executor?.loopDroppedSource() },
      perform: { box.executor?.drain() })
    box.executor = self
    for mode in modes { runLoop.add(source, forMode: mode) }
    // Finds out whether the loop's thread has already ended: such a loop drops a queued
    // block at once, unrun. Queued after the source was added, so a thread ending in between
    // either drops this block or cancels the source (both under the loop's lock, in one
    // step).
    let probe = StartProbe()
    runLoop.perform(inModes: modes) { [token = StartProbe.Token(probe)] in
      token.probe.ran.store(true, ordering: .releasing)
    }
    if probe.isDroppedUnrun {
      concurrencyMisuse("RunLoopExecutor", "created for a run loop whose thread has ended")
    }
    runLoop.wakeUp()
  }

  deinit {
    // Jobs keep their actors, and the actors keep this executor, so none is queued here.
    source.invalidate()
  }

  /// Queues `job` to run on the loop's thread; see the type's "When jobs run" and "Order".
  /// Callable from any thread; never blocks (beyond the executor's short lock). Stops the
  /// process when the loop's thread has ended (misuse).
  public func enqueue(_ job: consuming ExecutorJob) {
    let priority = job.priority.rawValue
    let unownedJob = UnownedJob(job)
    lock.lock()
    if hasEnded || isShutDown {
      let ended = hasEnded
      lock.unlock()
      if ended {
        concurrencyMisuse("RunLoopExecutor", "job enqueued after the run loop's thread ended (\(runLoop))")
      }
      concurrencyMisuse(
        "RunLoopExecutor", "job enqueued after the executor was shut down (\(runLoop)); its task could never resume")
    }
    let wasEmpty = queue.isEmpty
    queue.push(unownedJob, priority: priority)
    // The job's identity (a task is its own job): the same as the last one means one task
    // going back and forth between the loop and its caller (see "Cost").
    let identity = withUnsafeBytes(of: unownedJob) { $0.load(as: UInt.self) }
    let sameTaskAgain = identity == lastJobIdentity
    lastJobIdentity = identity
    lock.unlock()
    if wasEmpty { JobSourceQueue.signal(source, runLoop, yielding: sameTaskAgain) }
  }

  /// Runs queued jobs on the loop's thread (the source's perform callback): as many as were
  /// queued when it started, highest priority first, each outside the lock.
  ///
  /// Not re-entered: a job that runs the loop nested (in one of the executor's modes) must
  /// not see another job of its actor start inside it, which would break the actor's
  /// promise that its synchronous code is never interleaved. The nested fire returns at once
  /// (having consumed the signal); the outer drain signals again when it leaves jobs queued.
  /// Core Foundation likewise does not service the main dispatch queue from a run nested in
  /// one of that queue's blocks.
  private func drain() {
    if isDraining { return }
    isDraining = true
    defer {
      isDraining = false
      if let latch = drainEnded {
        drainEnded = nil
        latch.countDown()
      }
    }
    let unownedExecutor = jobExecutor ?? asUnownedSerialExecutor()
    JobSourceQueue.drainPass(
      lock: lock, source: source, runLoop: runLoop,
      count: { queue.count }, pop: { queue.popHighest() },
      run: { $0.runSynchronously(on: unownedExecutor) })
  }

  /// The source's cancel callback: the loop dropped it because its thread ended (or the
  /// executor invalidated it while being released, with no job queued).
  private func loopDroppedSource() {
    let (queued, delayed): (Int, Int) = lock.withLock {
      hasEnded = true
      return (queue.count, delayedJobCount)
    }
    if delayed > 0 {
      // Counted timers the ended loop will never fire, including one added to the loop
      // after it dropped its items, which it would keep unfired and unreleased.
      concurrencyMisuse(
        "RunLoopExecutor",
        "the run loop's thread ended with a delayed job still waiting for its timer (let the actors' work finish before stopping the thread)"
      )
    }
    if queued > 0 {
      concurrencyMisuse(
        "RunLoopExecutor",
        "the run loop's thread ended with \(queued) job(s) still queued on its executor (let the actors' work finish before stopping the thread)"
      )
    }
  }

  /// Shuts the executor down once its queue is empty: blocks until the loop's thread has run
  /// every queued job and every delayed job (see the scheduling extension), including jobs
  /// those jobs enqueue meanwhile (a steady stream of
  /// enqueues delays the return), and until no job runs (a job that runs the loop nested,
  /// where the loop's thread serves the shutdown, may still queue jobs: the call waits for it
  /// to return), then closes the executor. Any later enqueue stops the
  /// process (misuse: its task could never resume). Returns at once when already shut down.
  ///
  /// The loop must make passes in one of ``modes`` for the call to return (it waits for the
  /// loop as ``/RunLoop/RunLoop/performAndWait(inModes:_:)`` does). When the loop's thread
  /// ends meanwhile, the call returns (the thread's end with jobs queued stops the process,
  /// see "The loop's thread ends"). Calling it on the loop's thread stops the process
  /// (misuse: the thread would wait for itself).
  @available(*, noasync, message: "blocks until the loop's thread has run every queued job")
  public func shutDown() {
    if isIsolatingCurrentContext() == true {
      concurrencyMisuse("RunLoopExecutor", "shutDown() called on the run loop's own thread (it would wait for itself)")
    }
    shutDownBlocking()
  }

  /// The shutdown's waiting (see `shutDown()`), meant for a thread other than the loop's.
  private func shutDownBlocking() {
    // Already closed: nothing can be queued any more, so there is nothing to ask the loop
    // (which may be busy, or running in another mode, and would keep this call waiting).
    if lock.withLock({ isShutDown }) { return }
    while true {
      let outcome = LockedValue<ShutDownCheck>(.jobsQueued)
      do throws(PerformError) {
        // Runs at the loop's block step; when jobs are still queued, the source step of the
        // same or the next pass drains them and the next request checks again.
        try runLoop.performAndWait(inModes: modes) { [self] in
          // Nested in a job (one that runs the loop): it may still queue jobs, so the executor
          // stays open until that job, and the drain running it, have returned.
          if isDraining {
            let latch = drainEnded ?? Latch(count: 1)
            drainEnded = latch
            outcome.withLock { $0 = .jobRunning(latch) }
            return
          }
          let check: ShutDownCheck = lock.withLock {
            if isShutDown { return .closed }
            if !queue.isEmpty { return .jobsQueued }
            if delayedJobCount > 0 {
              let latch = delayedJobsDone ?? Latch(count: 1)
              delayedJobsDone = latch
              return .delayedJobsPending(latch)
            }
            isShutDown = true
            return .closed
          }
          outcome.withLock { $0 = check }
        }
      } catch {
        lock.withLock { isShutDown = true }
        return
      }
      switch outcome.withLock({ $0 }) {
      case .closed: return
      case .jobsQueued: continue
      case .delayedJobsPending(let latch), .jobRunning(let latch): latch.wait()
      }
    }
  }

  /// Shuts the executor down as `shutDown()` does, suspending the calling task instead of
  /// blocking its thread (the waiting happens on a short-lived helper thread). Calling it
  /// from code isolated to this executor stops the process (misuse: the caller's own
  /// resumption would be a job enqueued after the shutdown). Code that runs on the loop's
  /// thread but is isolated elsewhere (an actor on another executor of the same loop, a
  /// task of a ``RunLoopThreadGroup`` that owns the loop) resumes elsewhere, and may call it.
  ///
  /// - Parameter isolation: The caller's isolation (filled in by the compiler): the caller
  ///   resumes on its executor, which is what the check looks at (not the thread).
  public func shutDown(isolation: isolated (any Actor)? = #isolation) async {
    if let isolation, isolation.withSerialExecutor({ ($0 as AnyObject) === self }) {
      concurrencyMisuse(
        "RunLoopExecutor",
        "shutDown() called from code isolated to the executor (its resumption would be enqueued after the shutdown)")
    }
    await runOffPool(name: "executor-shutdown") { self.shutDownBlocking() }
  }

  /// What a shutdown's check on the loop's thread found.
  private enum ShutDownCheck: Sendable {
    case closed
    case jobsQueued
    /// The check ran nested in a job; opens when the drain running that job returns.
    case jobRunning(Latch)
    /// Opens when the last delayed job has been enqueued.
    case delayedJobsPending(Latch)
  }

  /// Counts a delayed job whose timer has not fired yet (see the scheduling extension).
  /// Stops the process, as `enqueue` does, when the loop's thread has ended or the executor
  /// was shut down: the timer would never fire (a loop whose thread has ended keeps the
  /// timers added to it unfired), so the job's task could never resume. A thread ending
  /// after the count is taken finds it in `loopDroppedSource`.
  func beginDelayedJob() {
    lock.lock()
    if hasEnded || isShutDown {
      let ended = hasEnded
      lock.unlock()
      if ended {
        concurrencyMisuse("RunLoopExecutor", "job delayed after the run loop's thread ended (\(runLoop))")
      }
      concurrencyMisuse(
        "RunLoopExecutor", "job delayed after the executor was shut down (\(runLoop)); its task could never resume")
    }
    delayedJobCount += 1
    lock.unlock()
  }

  /// The delayed job's timer fired and its job was enqueued.
  func endDelayedJob() {
    let latch: Latch? = lock.withLock {
      delayedJobCount -= 1
      guard delayedJobCount == 0, let latch = delayedJobsDone else { return nil }
      delayedJobsDone = nil
      return latch
    }
    latch?.countDown()
  }

  /// Whether the calling thread is the loop's thread (never nil: the run loop knows its
  /// thread from its creation). Never blocks, never creates a run loop.
  public func isIsolatingCurrentContext() -> Bool? {
    runLoop.isOwnedByCurrentThread
  }

  /// Returns when the calling thread is the loop's thread; otherwise stops the process with a
  /// message (what `assumeIsolated` and `preconditionIsolated` call).
  public func checkIsolated() {
    if runLoop.isOwnedByCurrentThread { return }
    concurrencyMisuse(
      "RunLoopExecutor",
      "code isolated to the executor of \(runLoop) ran on another thread (\(Thread.current)); it runs only on that run loop's thread"
    )
  }

  /// How many jobs are queued and not yet started (a snapshot: other threads may change it).
  public var queuedJobCount: Int {
    lock.withLock { queue.count }
  }

  /// `"RunLoopExecutor(modes: [...], queued: N)"`.
  public var description: String {
    let queued = lock.withLock { queue.count }
    return "RunLoopExecutor(modes: \(modes), queued: \(queued))"
  }
}

/// The executor as the run loop's source callbacks see it: weak, so the loop holding the
/// source does not keep the executor alive.
private final class WeakExecutor: @unchecked Sendable {
  // @unchecked: written once in the executor's init before the source can fire (the source
  // is added after), read after; `weak` loads are atomic in the Swift runtime.
  weak var executor: RunLoopExecutor?
}

/// Tells whether the start-up block was dropped unrun (the loop's thread had ended).
private final class StartProbe: @unchecked Sendable {
  // @unchecked: the flags are atomics.
  let ran = AtomicBool(false)
  let released = AtomicBool(false)
  /// True when the block was released without having run: the loop refused it.
  var isDroppedUnrun: Bool {
    released.load(ordering: .acquiring) && !ran.load(ordering: .acquiring)
  }

  /// Owned by the start-up block alone, so its release marks the block's.
  final class Token: Sendable {
    let probe: StartProbe
    init(_ probe: StartProbe) { self.probe = probe }
    deinit { probe.released.store(true, ordering: .releasing) }
  }
}
