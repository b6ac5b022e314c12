import CThreadingShims
import Sync

/// One worker thread of a pool. Its fields are guarded by the pool's lock, except `wakeWord`
/// (atomic) and `handle` once the worker is claimed for joining (see `ThreadPoolCore.retire`).
final class PoolWorker: @unchecked Sendable {
  /// Its number in the pool's name (`<pool>-<index>`): the lowest free one when it started.
  let index: Int
  /// Its idle wait's state (`WakeState`); the futex word the idle wait sleeps on.
  let wakeWord: UnsafeMutablePointer<UInt32>
  /// Its joinable handle, stored by the starter once `Thread.spawn` returned.
  var handle: JoinableThread<Void, Never>?
  /// Its `Thread`, set by the worker itself before it takes a job (for exit requests).
  var thread: Thread?
  /// A job handed to it while it slept idle.
  var assigned: PoolJob?
  /// Whether it is in the pool's idle stack.
  var isIdle = false
  /// Set when the job it runs was cancelled (its exit request is set): it ends after the job,
  /// since an exit request cannot be withdrawn.
  var retireAfterJob = false
  /// Claimed by a joiner (its handle is taken outside the lock by that joiner only).
  var isClaimedForJoin = false
  /// It has left its loop (`ThreadPoolCore.retire`).
  var hasRetired = false

  init(index: Int) {
    self.index = index
    wakeWord = .allocate(capacity: 1)
    wakeWord.initialize(to: 0)
  }

  deinit {
    wakeWord.deallocate()
  }

  /// `wakeWord` values.
  ///
  /// | value | meaning | set by |
  /// |---|---|---|
  /// | 0 | idle, awake (spinning before it sleeps) | the worker, under the lock, as it goes idle |
  /// | 1 | woken: handed a job, or the pool shuts down | the waker (`wake`) |
  /// | 2 | asleep in the kernel (futex wait) | the worker, by compare-and-swap from 0 |
  ///
  /// The waker exchanges in 1 and calls the kernel only when it took a 2, so a hand-off to a
  /// worker still spinning costs no system call. No wake-up is lost: the worker sleeps only
  /// after its compare-and-swap 0 -> 2 succeeded, and the kernel re-checks the word (2)
  /// before it sleeps; a waker's exchange either comes before the CAS (the CAS fails, the
  /// worker sees 1) or after it (the waker sees 2 and wakes the futex). Both are
  /// read-modify-writes on one word, totally ordered on x86 and arm64 alike.
  enum WakeState {
    static let idle: UInt32 = 0
    static let woken: UInt32 = 1
    static let asleep: UInt32 = 2
  }

  /// How long an idle worker checks its word (with a spin-wait hint between checks) before
  /// it sleeps in the kernel: about the time a task takes to be resumed and submit its next
  /// job, so back-to-back round trips skip the futex wake and the sleep. Bounded, so an
  /// idle pool costs no CPU beyond that; on the monotonic clock, read every 32 checks (the
  /// hint's length varies tenfold between processors).
  static let spinDuration: Duration = .microseconds(20)

  /// Ends the idle wait. The word only ends the wait: the job itself is published under the
  /// pool's lock, which the worker takes once awake. The exchange is releasing, paired with
  /// the worker's acquiring reads; the kernel's futex wake is a full barrier before it looks
  /// for sleepers.
  func wake() {
    if UInt32.atomicExchange(WakeState.woken, at: wakeWord, ordering: .releasing) == WakeState.asleep {
      Futex.wake(wakeWord, count: 1)
    }
  }

  /// Waits until woken or `deadline`: spins briefly, then sleeps in the kernel. Returns
  /// false when the deadline passed unwoken. The caller has stored `WakeState.idle`.
  func sleepIdle(until deadline: MonotonicInstant) -> Bool {
    let spinEnd = MonotonicInstant.after(PoolWorker.spinDuration)
    spinning: while true {
      for _ in 0..<32 {
        if UInt32.atomicLoad(at: wakeWord, ordering: .acquiring) == WakeState.woken { return true }
        tk_cpu_relax()
      }
      if MonotonicInstant.now >= spinEnd { break spinning }
    }
    // Acquiring on success too: a woken value seen on failure must make the waker's writes
    // visible (the job is read under the lock anyway).
    if !UInt32.atomicCompareAndSwap(
      expected: WakeState.idle, desired: WakeState.asleep, at: wakeWord, ordering: .full)
    {
      return true  // woken meanwhile
    }
    while UInt32.atomicLoad(at: wakeWord, ordering: .acquiring) == WakeState.asleep {
      if !Futex.wait(wakeWord, expected: WakeState.asleep, deadline: deadline) {
        return UInt32.atomicLoad(at: wakeWord, ordering: .acquiring) == WakeState.woken
      }
    }
    return true
  }
}

/// A snapshot of a pool's counters (see `ThreadPool.Statistics`).
struct PoolCounts {
  var threads = 0
  var idleThreads = 0
  var runningJobs = 0
  var queuedJobs = 0
  var waitingJobs = 0
  var isShutDown = false
}

/// The shared state of a `ThreadPool`: its lock, run queues, waiting lists and workers.
///
/// Everything mutable is guarded by one word lock (`lockWord`). Sections under it are
/// short and never call user code or release a user's closure: jobs are claimed under the
/// lock and run, rejected or resumed after it is released; threads are started, woken and
/// joined outside it.
///
/// Invariants (under the lock):
/// - An idle worker exists only while every run queue is empty (a submission goes to an
///   idle worker first; a worker goes idle only after finding the queues empty).
/// - A waiting list is non-empty only while the run queues hold `queueCapacity` jobs
///   (a slot freed by a dequeue or a cancellation admits the oldest waiting job of the
///   highest level).
/// - `liveWorkers` counts workers reserved or started and not yet retired;
///   `startingWorkers` those reserved that have not entered their loop yet (each will take
///   a queued job, so a submission starts another worker only for work beyond them);
///   `unstoredHandles` those whose `Thread.spawn` has not returned (a shutdown's joiner
///   waits for their handles).
@usableFromInline
final class ThreadPoolCore: @unchecked Sendable {
  // @unchecked: the mutable state below is only touched with the lock held.

  /// The number of priority levels (see `ThreadPool`'s priority rule).
  static let levels = 3

  let name: String
  let configuration: ThreadPool.Configuration
  private let lockWord: UnsafeMutablePointer<UInt32>

  // Guarded by the lock.
  @exclusivity(unchecked) private var queues = [PoolJobList](repeating: PoolJobList(), count: ThreadPoolCore.levels)
  @exclusivity(unchecked) private var waiting = [PoolJobList](repeating: PoolJobList(), count: ThreadPoolCore.levels)
  @exclusivity(unchecked) private var queuedCount = 0
  @exclusivity(unchecked) private var waitingCount = 0
  @exclusivity(unchecked) private var runningCount = 0
  /// Idle workers, the most recently idle last: it is woken first, so the longest idle ones
  /// reach their idle timeout and retire while the load is low.
  @exclusivity(unchecked) private var idle: [PoolWorker] = []
  @exclusivity(unchecked) private var liveWorkers = 0
  @exclusivity(unchecked) private var startingWorkers = 0
  @exclusivity(unchecked) private var unstoredHandles = 0
  /// Workers whose closure has returned, resuming its submitter, back in their loop next.
  @exclusivity(unchecked) private var finishingCount = 0
  @exclusivity(unchecked) private var usedIndices: [Bool] = []
  /// Workers that left their loop and are not joined yet.
  @exclusivity(unchecked) private var retired: [PoolWorker] = []
  @exclusivity(unchecked) private var isShutDown = false
  /// A shutdown caller is joining the last workers (it resumes the other callers after).
  @exclusivity(unchecked) private var isJoiningForShutdown = false
  /// Every worker is joined after a shutdown.
  @exclusivity(unchecked) private var isTerminated = false
  @exclusivity(unchecked) private var shutdownWaiters: [UnsafeContinuation<Void, Never>] = []

  init(name: String, configuration: ThreadPool.Configuration) {
    self.name = name
    self.configuration = configuration
    lockWord = .allocate(capacity: 1)
    lockWord.initialize(to: 0)
    // Room for the idle stack up front so going idle rarely allocates under the lock, but
    // no more than the default maximum: `maximumThreads` may be far beyond any number of
    // threads the system can run (`Int.max` for "no limit"), and a reservation that large
    // cannot be made (its byte count overflows).
    idle.reserveCapacity(Swift.min(configuration.maximumThreads, ThreadPool.defaultMaximumThreads))
  }

  deinit {
    // Only reached once no worker runs (each holds the core): the handles left in `retired`
    // belong to threads that have left their loop; dropping a handle detaches its thread.
    lockWord.deallocate()
  }

  @inline(__always)
  private func lock() { WordLock.lock(lockWord) }
  @inline(__always)
  private func unlock() { WordLock.unlock(lockWord) }

  // MARK: Submitting and cancelling

  /// Publishes `job` (its continuation is set): hands it to an idle worker, or queues it
  /// (starting a worker when none is free and the maximum allows), or parks it in a waiting
  /// list when the queue is full. Rejects it at once after a shutdown or a cancellation.
  func submit(_ job: PoolJob) {
    lock()
    if job.cancelledBeforeSubmission {
      job.phase = .done
      unlock()
      job.reject(.cancelled)
      return
    }
    if isShutDown {
      job.phase = .done
      unlock()
      job.reject(.shutDown)
      return
    }
    if let worker = idle.popLast() {
      worker.isIdle = false
      worker.assigned = job
      job.worker = worker
      job.phase = .assigned
      unlock()
      worker.wake()
      return
    }
    if queuedCount < configuration.queueCapacity {
      queues[job.level].append(job)
      queuedCount += 1
      job.phase = .queued
    } else {
      waiting[job.level].append(job)
      waitingCount += 1
      job.phase = .waiting
    }
    let start = reserveWorkerIfNeeded()
    unlock()
    if let start { startWorker(index: start) }
  }

  /// Called by the submitting task's cancellation handler (on the cancelling thread).
  /// Queued, waiting or handed-over work is removed and rejected with a cancellation at
  /// once; running work gets its worker's exit request, and the worker retires after it.
  func cancel(_ job: PoolJob) {
    lock()
    switch job.phase {
    case .new:
      job.cancelledBeforeSubmission = true
      unlock()
    case .waiting:
      waiting[job.level].remove(job)
      waitingCount -= 1
      job.phase = .done
      unlock()
      job.reject(.cancelled)
    case .queued:
      queues[job.level].remove(job)
      queuedCount -= 1
      admitWaitingJob()
      job.phase = .done
      unlock()
      job.reject(.cancelled)
    case .assigned:
      // Its worker has not woken yet: take the job back; the worker finds nothing and goes
      // back to sleep (it is no longer in the idle stack, so it re-enters it).
      job.worker?.assigned = nil
      job.worker = nil
      job.phase = .done
      unlock()
      job.reject(.cancelled)
    case .running:
      let worker = job.worker
      worker?.retireAfterJob = true
      let thread = worker?.thread
      unlock()
      // Outside the lock: requestExit runs the thread's exit-request handlers (user code).
      // Harmless if the job has finished meanwhile: the worker retires after it anyway.
      thread?.requestExit()
    case .done:
      unlock()
    }
  }

  /// Moves the oldest waiting job of the highest level into its run queue when a slot is
  /// free. Lock held.
  private func admitWaitingJob() {
    guard waitingCount > 0, queuedCount < configuration.queueCapacity else { return }
    for level in 0..<ThreadPoolCore.levels {
      if let job = waiting[level].popFirst() {
        waitingCount -= 1
        queues[level].append(job)
        queuedCount += 1
        job.phase = .queued
        return
      }
    }
  }

  /// The oldest job of the highest non-empty level, claimed for running. Lock held.
  private func dequeue() -> PoolJob? {
    guard queuedCount > 0 else { return nil }
    for level in 0..<ThreadPoolCore.levels {
      if let job = queues[level].popFirst() {
        queuedCount -= 1
        admitWaitingJob()
        return job
      }
    }
    return nil
  }

  // MARK: Workers

  /// Reserves a new worker (its count and index) when work is queued that no starting or
  /// finishing worker will take, and the maximum allows; returns its index. Lock held.
  /// Also after a shutdown: queued and waiting work must still run when the last worker
  /// retires early (its job was cancelled), and no new work is accepted then, so this only
  /// replaces a worker the remaining work needs.
  private func reserveWorkerIfNeeded() -> Int? {
    guard liveWorkers < configuration.maximumThreads,
      queuedCount + waitingCount > startingWorkers + finishingCount
    else { return nil }
    liveWorkers += 1
    startingWorkers += 1
    unstoredHandles += 1
    if let free = usedIndices.firstIndex(of: false) {
      usedIndices[free] = true
      return free
    }
    usedIndices.append(true)
    return usedIndices.count - 1
  }

  /// The worker's full name: `<pool>-<index>`.
  func workerName(index: Int) -> String { "\(name)-\(index)" }

  /// The worker's kernel name when the full name is longer than the kernel keeps (or holds a
  /// NUL): the pool's name cut on whole characters, and before any NUL (without a separator
  /// left at the cut), so that `-<index>` still fits in 15 bytes.
  static func kernelWorkerName(pool: String, index: Int) -> String {
    let suffix = "-\(index)"
    // The part of the pool's name the kernel can keep at all: cut before a NUL, which would
    // end the C string there and drop the index.
    let base = ThreadConfiguration.kernelName(for: pool)
    let full = base + suffix
    if base == pool && full.utf8.count <= ThreadConfiguration.kernelNameLimit { return full }
    var prefix = ""
    var bytes = 0
    let room = ThreadConfiguration.kernelNameLimit - suffix.utf8.count
    for character in base {
      let length = character.utf8.count
      if bytes + length > room { break }
      prefix.append(character)
      bytes += length
    }
    // A separator left at the cut would double the one before the index.
    while let last = prefix.last, last == "-" || last == "_" || last == "." || last == " " { prefix.removeLast() }
    return prefix + suffix
  }

  /// Starts the reserved worker `index` (outside the lock). On failure releases the
  /// reservation, and when no worker is left to run them, rejects the queued and waiting
  /// jobs with the error.
  private func startWorker(index: Int) {
    let worker = PoolWorker(index: index)
    var configuration = self.configuration.threadConfiguration
    configuration.name = workerName(index: index)
    do throws(ThreadStartError) {
      let handle = try Thread.spawn(configuration: configuration) { () throws(Never) in
        self.workerMain(worker)
      }
      lock()
      var lateHandle: JoinableThread<Void, Never>? = nil
      if worker.hasRetired && !isShutDown && !worker.isClaimedForJoin {
        // It ended before its handle was stored: nobody will join it.
        retired.removeAll { $0 === worker }
        lateHandle = consume handle
      } else {
        worker.handle = consume handle
      }
      unstoredHandles -= 1
      let completion = takeShutdownCompletion()
      unlock()
      completion?.resume()
      lateHandle.take()?.detach()
    } catch {
      lock()
      liveWorkers -= 1
      startingWorkers -= 1
      unstoredHandles -= 1
      usedIndices[index] = false
      var rejected: [PoolJob] = []
      if liveWorkers == 0 {
        for level in 0..<ThreadPoolCore.levels {
          while let job = queues[level].popFirst() { rejected.append(job) }
          while let job = waiting[level].popFirst() { rejected.append(job) }
        }
        queuedCount = 0
        waitingCount = 0
        for job in rejected { job.phase = .done }
      }
      let completion = takeShutdownCompletion()
      unlock()
      for job in rejected { job.reject(.threadStart(error)) }
      completion?.resume()
    }
  }

  /// A worker's loop: runs jobs while there are any, sleeps idle (most recently idle woken
  /// first) up to the idle timeout, and retires when the timeout passes with more than the
  /// minimum number of threads, after a job whose task was cancelled (its exit request is
  /// set), or once the pool is shut down and no work is left.
  private func workerMain(_ worker: PoolWorker) {
    let thread = Thread.current
    let kernelName = ThreadPoolCore.kernelWorkerName(pool: name, index: worker.index)
    if kernelName != ThreadConfiguration.kernelName(for: workerName(index: worker.index)) {
      shimCallOrDie("pthread_setname_np") { kernelName.withCString { tk_thread_set_name($0) } }
    }
    lock()
    worker.thread = thread
    startingWorkers -= 1
    while true {
      var job = worker.assigned
      worker.assigned = nil
      if job == nil { job = dequeue() }
      if let job {
        job.phase = .running
        job.worker = worker
        runningCount += 1
        unlock()
        job.execute {
          // The closure has returned; the submitter is resumed next. Counted as finishing,
          // this worker takes a job queued meanwhile instead of a new thread being started
          // for it (a task resumed on another CPU can submit its next job before this
          // thread is back in its loop).
          lock()
          runningCount -= 1
          finishingCount += 1
          job.phase = .done
          job.worker = nil
          unlock()
        }
        lock()
        finishingCount -= 1
        if worker.retireAfterJob || thread.isExitRequested { break }
        continue
      }
      if isShutDown { break }
      // Idle: sleep until handed a job, woken by a shutdown, or the idle timeout.
      // Published by the unlock below, before any waker can pop this worker.
      UInt32.atomicStore(PoolWorker.WakeState.idle, at: worker.wakeWord, ordering: .relaxed)
      worker.isIdle = true
      idle.append(worker)
      unlock()
      let woken = worker.sleepIdle(until: .after(configuration.idleTimeout))
      lock()
      if worker.assigned != nil { continue }
      if worker.isIdle {
        // Not popped by a submitter: leave the idle stack (a shutdown empties it itself).
        worker.isIdle = false
        if let position = idle.lastIndex(where: { $0 === worker }) { idle.remove(at: position) }
      }
      if !woken && liveWorkers > configuration.minimumThreads && queuedCount == 0 { break }
    }
    retire(worker)
  }

  /// Called by a worker leaving its loop, lock held; releases the lock.
  ///
  /// Before a shutdown the worker detaches itself (nobody will wait for it; its resources
  /// are reclaimed as it ends). After one, it leaves itself to the shutdown's joiner, which
  /// runs once every worker has left its loop. A worker whose handle its starter has not
  /// stored yet is left in `retired` too, for its starter (which detaches it), a later
  /// retiring worker or the joiner. Workers found in `retired` with a handle are joined here
  /// (they have left their loops, so the joins only wait for their threads' own ends).
  private func retire(_ worker: PoolWorker) {
    liveWorkers -= 1
    usedIndices[worker.index] = false
    worker.thread = nil
    worker.hasRetired = true
    var toJoin: [PoolWorker] = []
    for earlier in retired where earlier.handle != nil && !earlier.isClaimedForJoin {
      earlier.isClaimedForJoin = true
      toJoin.append(earlier)
    }
    retired.removeAll { $0.isClaimedForJoin }
    var ownHandle: JoinableThread<Void, Never>? = nil
    if !isShutDown && worker.handle != nil {
      ownHandle = worker.handle.take()
    } else {
      retired.append(worker)
    }
    let start = reserveWorkerIfNeeded()
    let completion = takeShutdownCompletion()
    unlock()
    for earlier in toJoin { join(earlier) }
    if let start { startWorker(index: start) }
    completion?.resume()
    ownHandle.take()?.detach()
  }

  /// Joins a worker claimed for joining (its handle is no longer touched by anyone else).
  private func join(_ worker: PoolWorker) {
    guard let handle = worker.handle.take() else { return }
    handle.join()
  }

  // MARK: Shutdown

  /// After a shutdown, once no worker runs or starts: the first shutdown waiter, which will
  /// join the workers. Lock held.
  private func takeShutdownCompletion() -> UnsafeContinuation<Void, Never>? {
    guard isShutDown, !isJoiningForShutdown, !isTerminated, liveWorkers == 0, unstoredHandles == 0,
      !shutdownWaiters.isEmpty
    else { return nil }
    isJoiningForShutdown = true
    return shutdownWaiters.removeFirst()
  }

  /// Stops accepting work and takes the idle workers out of the idle stack; the caller wakes
  /// them after unlocking (they end, since no work is queued while a worker is idle). Lock
  /// held.
  private func beginShutdown() -> [PoolWorker] {
    isShutDown = true
    let sleepers = idle
    for worker in sleepers { worker.isIdle = false }
    idle.removeAll()
    return sleepers
  }

  /// `ThreadPool.shutdown()`: rejects new work, lets queued work run, and returns once every
  /// worker has been joined. The first caller resumed joins the workers; later callers (and
  /// callers that were waiting too) return once it has.
  func shutdown() async {
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      lock()
      if isTerminated {
        unlock()
        continuation.resume()
        return
      }
      let sleepers = isShutDown ? [] : beginShutdown()
      shutdownWaiters.append(continuation)
      let completion = takeShutdownCompletion()
      unlock()
      for worker in sleepers { worker.wake() }
      completion?.resume()
    }
    lock()
    if isTerminated {
      unlock()
      return
    }
    // The joiner: every worker has left its loop; a worker claimed by another retiring
    // worker is joined by that one before it ends, so joining the rest covers all.
    let toJoin = retired.filter { !$0.isClaimedForJoin }
    for worker in toJoin { worker.isClaimedForJoin = true }
    retired.removeAll()
    unlock()
    for worker in toJoin { join(worker) }
    lock()
    isTerminated = true
    let followers = shutdownWaiters
    shutdownWaiters.removeAll()
    unlock()
    for follower in followers { follower.resume() }
  }

  /// `ThreadPool`'s deinitializer: stops accepting work and lets the workers end once no work
  /// is left; nobody waits, and the last handles are detached when the core is released.
  func shutdownWithoutWaiting() {
    lock()
    let sleepers = isShutDown ? [] : beginShutdown()
    unlock()
    for worker in sleepers { worker.wake() }
  }

  /// The counters, read together under the lock.
  func counts() -> PoolCounts {
    lock()
    defer { unlock() }
    return PoolCounts(
      threads: liveWorkers, idleThreads: idle.count, runningJobs: runningCount, queuedJobs: queuedCount,
      waitingJobs: waitingCount, isShutDown: isShutDown)
  }
}
