// Executor rows: Swift concurrency on run-loop threads, beside the usual Linux recipe (an
// executor that wraps a DispatchQueue: `queue.async { job.runSynchronously(on:) }`) and the
// runtime's default actor. Dispatch is a peer here, never a dependency of the library.
//
//   executor.actor.roundtrip      an actor awaits a method of an actor on another thread
//                                 (run-loop thread / Dispatch queue / default actor, which
//                                 the runtime may run on the caller's thread); a ping-pong
//                                 row, unpinned and with the whole process on one CPU
//   executor.hop.roundtrip        the same call to an actor on a sleeping run-loop thread,
//                                 beside the raw eventfd ping-pong between two plain
//                                 threads (two wake-ups), the same round trip built from
//                                 the bare primitives (the caller parks in a continuation,
//                                 an eventfd wakes a plain thread that resumes it: the
//                                 pool's return leg included, no executor), and two
//                                 hand-written executors on a thread of their own: one
//                                 sleeping on a pthread condition, and the leanest
//                                 possible, sleeping on a futex word that an enqueue wakes
//                                 only while it sleeps (the floor for an actor hop)
//   executor.enqueue.throughput   jobs enqueued from two threads to one executor, until all ran
//   executor.enqueue.bytes-per-job  bytes allocated per enqueue (glibc's mallinfo2)
//
// The enqueue rows are unpinned. The hop row is a ping-pong row, measured in every
// placement (see `PingPongPlacement`): pinned, every subject's own thread is on the partner
// side's CPU and every other thread of the process, the runtime's pool included, on the
// measuring side's (the pool's threads cannot pin themselves, so the row pins them by their
// kernel ids before each sample). The actor round-trip row is a ping-pong row too, but
// unpinned and on one CPU only (see `registerExecutorActorBenchmarks`).

import CBenchmarkAllocationStats
import CBenchmarkShims
import Dispatch
import RunLoop
import RunLoopConcurrency
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

func registerExecutorBenchmarks(_ harness: Harness) {
  executorEnqueueRows(harness)
}

private func executorCheck(_ condition: Bool, _ what: String) {
  if !condition { fatalError("cost-tables (executor): \(what) failed: errno \(errno)") }
}

// MARK: - Executors and actors

/// The usual Linux recipe for an actor on a serial queue (`DispatchSerialQueue` does not
/// exist there): each job is a block on the queue.
private final class DispatchQueueExecutor: SerialExecutor, @unchecked Sendable {
  // @unchecked: the queue is thread-safe; the counter is atomic.
  let queue = DispatchQueue(label: "cost-tables.executor")
  /// Jobs enqueued: proves that every call hopped (one relaxed increment, a few ns beside
  /// the microseconds of a hop).
  let enqueued = AtomicInteger<Int>(0)

  func enqueue(_ job: consuming ExecutorJob) {
    _ = enqueued.increment(ordering: .relaxed)
    let unownedJob = UnownedJob(job)
    let executor = asUnownedSerialExecutor()
    queue.async { unownedJob.runSynchronously(on: executor) }
  }
}

/// An actor on a run-loop thread; each call checks that it runs there (so every call hops).
private actor LoopActor {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  init(executor: RunLoopExecutor) { self.executor = executor }
  var calls = 0
  func ping(_ value: Int) -> Int {
    executorCheck(executor.isIsolatingCurrentContext() == true, "the run-loop actor ran off its thread")
    calls &+= 1
    return value &+ 1
  }
}

/// An actor on a Dispatch queue.
private actor QueueActor {
  let executor: DispatchQueueExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  init(executor: DispatchQueueExecutor) { self.executor = executor }
  var calls = 0
  func ping(_ value: Int) -> Int {
    calls &+= 1
    return value &+ 1
  }
}

/// The smallest serial executor a user writes by hand on Linux: one thread that takes jobs
/// from an array under a pthread mutex and sleeps on a condition variable when it is empty
/// (signalled only then). The hop row's floor for "an executor on a thread of its own": it
/// has no modes, timers, sources, priorities or isolation bookkeeping.
private final class ConditionThreadExecutor: SerialExecutor, @unchecked Sendable {
  // @unchecked: `pending`, `waiting` and `stopping` are protected by `mutex`.
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
  private var pending: [UnownedJob] = []
  private var waiting = false
  private var stopping = false
  private var thread: JoinableThread<Void, Never>?
  /// The executor's thread, for the actor's check that every call runs there.
  private(set) var pthread = pthread_t()

  init(_ partners: HopPartners) {
    executorCheck(pthread_mutex_init(mutex, nil) == 0, "pthread_mutex_init")
    executorCheck(pthread_cond_init(condition, nil) == 0, "pthread_cond_init")
    pending.reserveCapacity(64)
    thread = startServingThread(named: "cost-tables-cond", partners: partners, pthread: &pthread) { self.serve() }
  }

  private func serve() {
    var batch: [UnownedJob] = []
    batch.reserveCapacity(64)
    let executor = asUnownedSerialExecutor()
    while true {
      executorCheck(pthread_mutex_lock(mutex) == 0, "pthread_mutex_lock")
      while pending.isEmpty && !stopping {
        waiting = true
        executorCheck(pthread_cond_wait(condition, mutex) == 0, "pthread_cond_wait")
        waiting = false
      }
      if pending.isEmpty {
        executorCheck(pthread_mutex_unlock(mutex) == 0, "pthread_mutex_unlock")
        return
      }
      swap(&batch, &pending)
      executorCheck(pthread_mutex_unlock(mutex) == 0, "pthread_mutex_unlock")
      for job in batch { job.runSynchronously(on: executor) }
      batch.removeAll(keepingCapacity: true)
    }
  }

  func enqueue(_ job: consuming ExecutorJob) {
    let unownedJob = UnownedJob(job)
    executorCheck(pthread_mutex_lock(mutex) == 0, "pthread_mutex_lock")
    pending.append(unownedJob)
    if waiting { executorCheck(pthread_cond_signal(condition) == 0, "pthread_cond_signal") }
    executorCheck(pthread_mutex_unlock(mutex) == 0, "pthread_mutex_unlock")
  }

  /// Lets the thread finish the jobs queued and joins it.
  func stop() {
    executorCheck(pthread_mutex_lock(mutex) == 0, "pthread_mutex_lock")
    stopping = true
    executorCheck(pthread_cond_signal(condition) == 0, "pthread_cond_signal")
    executorCheck(pthread_mutex_unlock(mutex) == 0, "pthread_mutex_unlock")
    thread.take()?.join()
  }
}

/// Starts `serve` on a thread of its own named `name`; returns the thread once `serve` is
/// about to run, having stored its `pthread_t` in `pthread` (which an executor's actor
/// compares with the thread each call runs on).
private func startServingThread(
  named name: String, partners: HopPartners, pthread: inout pthread_t, _ serve: @escaping @Sendable () -> Void
) -> JoinableThread<Void, Never> {
  let started = Semaphore(value: 0)
  let handle = AtomicInteger<UInt>(0)
  let thread: JoinableThread<Void, Never>
  do {
    thread = try Thread.spawn(name: name) { () throws(Never) in
      partners.enter()
      handle.store(pthread_self(), ordering: .relaxed)
      started.signal()
      serve()
    }
  } catch {
    fatalError("cost-tables (executor): Thread.spawn failed: \(error)")
  }
  // The semaphore orders the store before this load.
  started.wait()
  pthread = handle.load(ordering: .relaxed)
  return thread
}

/// The leanest serial executor on a thread of its own: jobs in an array under a `Sync.Lock`,
/// and the thread sleeps on a futex word (`AtomicInteger.wait`) that an enqueue wakes only
/// while the thread sleeps (the run loop's rule, with nothing around it: no modes, timers,
/// sources, priorities or isolation bookkeeping). The hop row's floor for an actor hop to a
/// sleeping thread: the runtime's part of the hop (running the job, the task's switch back
/// to the pool) and two futex wake-ups.
private final class FutexThreadExecutor: SerialExecutor, @unchecked Sendable {
  // @unchecked: `pending` and `stopping` are protected by `lock`; `sleeping` is atomic.
  private let lock = Sync.Lock()
  private var pending: [UnownedJob] = []
  private var stopping = false
  /// 1 once the thread, holding `lock`, found no job and is going to sleep; set back to 0
  /// by the enqueue that then wakes it. The futex wait compares it, so a wake-up between
  /// the thread's unlock and its wait is not lost.
  private let sleeping = AtomicInteger<UInt32>(0)
  private var thread: JoinableThread<Void, Never>?
  /// The executor's thread, for the actor's check that every call runs there.
  private(set) var pthread = pthread_t()

  init(_ partners: HopPartners) {
    pending.reserveCapacity(64)
    thread = startServingThread(named: "cost-tables-futex", partners: partners, pthread: &pthread) { self.serve() }
  }

  private func serve() {
    var batch: [UnownedJob] = []
    batch.reserveCapacity(64)
    let executor = asUnownedSerialExecutor()
    while true {
      let finished: Bool = lock.withLock {
        swap(&batch, &pending)
        if batch.isEmpty && !stopping { sleeping.store(1, ordering: .relaxed) }
        return batch.isEmpty && stopping
      }
      if finished { return }
      if batch.isEmpty {
        // Returns at once when an enqueue has cleared the word since the unlock.
        _ = sleeping.wait(whileEqualTo: 1)
        continue
      }
      for job in batch { job.runSynchronously(on: executor) }
      batch.removeAll(keepingCapacity: true)
    }
  }

  func enqueue(_ job: consuming ExecutorJob) {
    let unownedJob = UnownedJob(job)
    let wake: Bool = lock.withLock {
      pending.append(unownedJob)
      guard sleeping.load(ordering: .relaxed) == 1 else { return false }
      sleeping.store(0, ordering: .relaxed)
      return true
    }
    if wake { _ = sleeping.wake() }
  }

  /// Lets the thread finish the jobs queued and joins it.
  func stop() {
    lock.withLock {
      stopping = true
      sleeping.store(0, ordering: .relaxed)
    }
    _ = sleeping.wake()
    thread.take()?.join()
  }
}

/// An actor on a `ConditionThreadExecutor`; each call checks that it runs on its thread.
private actor ConditionThreadActor {
  let executor: ConditionThreadExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  init(executor: ConditionThreadExecutor) { self.executor = executor }
  var calls = 0
  func ping(_ value: Int) -> Int {
    executorCheck(pthread_equal(pthread_self(), executor.pthread) != 0, "the condition-thread actor ran off its thread")
    calls &+= 1
    return value &+ 1
  }
}

/// An actor on a `FutexThreadExecutor`; each call checks that it runs on its thread.
private actor FutexThreadActor {
  let executor: FutexThreadExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  init(executor: FutexThreadExecutor) { self.executor = executor }
  var calls = 0
  func ping(_ value: Int) -> Int {
    executorCheck(pthread_equal(pthread_self(), executor.pthread) != 0, "the futex-thread actor ran off its thread")
    calls &+= 1
    return value &+ 1
  }
}

/// The primitives under any executor on a thread of its own, with nothing between them: the
/// caller parks its task in a continuation and writes an eventfd; a plain thread blocked in
/// `read` wakes and resumes the continuation, which sends the task back to the pool exactly
/// as an actor's answer does.
private final class EventfdResumer: @unchecked Sendable {
  // @unchecked: `parked` is protected by `lock`; the descriptor is written once, before the
  // thread starts.
  private let lock = Sync.Lock()
  private var parked: UnsafeContinuation<Int, Never>?
  private var parkedValue = 0
  private let descriptor: Int32
  private var thread: JoinableThread<Void, Never>?
  private static let stopValue = UInt64.max - 1

  init(_ partners: HopPartners) {
    descriptor = bench_eventfd()
    executorCheck(descriptor >= 0, "eventfd")
    executorCheck(fcntl(descriptor, F_SETFL, 0) == 0, "fcntl")
    do {
      thread = try Thread.spawn(name: "cost-tables-resume") { () throws(Never) in
        partners.enter()
        self.serve()
      }
    } catch {
      fatalError("cost-tables (executor): Thread.spawn failed: \(error)")
    }
  }

  private func serve() {
    var signal: UInt64 = 0
    while true {
      executorCheck(read(descriptor, &signal, 8) == 8, "read(eventfd)")
      if signal == EventfdResumer.stopValue { return }
      let (continuation, value) = lock.withLock { (parked.take(), parkedValue) }
      continuation?.resume(returning: value &+ 1)
    }
  }

  /// Parks the calling task, wakes the thread, and returns `value + 1` from it.
  func ping(_ value: Int) async -> Int {
    await withUnsafeContinuation { continuation in
      lock.withLock {
        parked = continuation
        parkedValue = value
      }
      var one: UInt64 = 1
      executorCheck(write(descriptor, &one, 8) == 8, "write(eventfd)")
    }
  }

  func stop() {
    var stop = EventfdResumer.stopValue
    executorCheck(write(descriptor, &stop, 8) == 8, "write(eventfd)")
    thread.take()?.join()
    close(descriptor)
  }
}

/// A default actor (the runtime's own executor; it may run a call on the caller's pool
/// thread without a thread switch).
private actor DefaultActor {
  var calls = 0
  func ping(_ value: Int) -> Int {
    calls &+= 1
    return value &+ 1
  }
}

/// The calling side: a default actor that uses each answer in its own state, so each answer
/// must come back to the caller's isolation; each target also mutates its own state, so
/// each call must reach the target's. (Without that, the optimizer removes the hops that no
/// code needs: a nonisolated caller, or one that does not touch its state, keeps running on
/// the target's executor after the first call, and the row measures a plain call.)
private actor Caller {
  var seen = 0
  func roundTrips(_ count: Int, to target: LoopActor) async {
    var value = 0
    for _ in 0..<count {
      value = await target.ping(value)
      seen &+= value
    }
    executorCheck(value == count, "round trips")
  }

  func roundTrips(_ count: Int, to target: QueueActor) async {
    let before = target.executor.enqueued.load(ordering: .relaxed)
    var value = 0
    for _ in 0..<count {
      value = await target.ping(value)
      seen &+= value
    }
    executorCheck(value == count, "round trips")
    let hops = target.executor.enqueued.load(ordering: .relaxed) - before
    executorCheck(hops >= count, "a hop per call (\(hops) enqueues for \(count) calls)")
  }

  func roundTrips(_ count: Int, to target: ConditionThreadActor) async {
    var value = 0
    for _ in 0..<count {
      value = await target.ping(value)
      seen &+= value
    }
    executorCheck(value == count, "round trips")
  }

  func roundTrips(_ count: Int, to target: FutexThreadActor) async {
    var value = 0
    for _ in 0..<count {
      value = await target.ping(value)
      seen &+= value
    }
    executorCheck(value == count, "round trips")
  }

  func roundTrips(_ count: Int, to target: EventfdResumer) async {
    var value = 0
    for _ in 0..<count {
      value = await target.ping(value)
      seen &+= value
    }
    executorCheck(value == count, "round trips")
  }

  func roundTrips(_ count: Int, to target: DefaultActor) async {
    var value = 0
    for _ in 0..<count {
      value = await target.ping(value)
      seen &+= value
    }
    executorCheck(value == count, "round trips")
  }
}

/// Runs `body` in a task on the cooperative pool and blocks the calling (benchmark) thread
/// until it is done; returns the nanoseconds `body` took, timed inside the task.
private func timeInPoolTask(_ body: @escaping @Sendable () async -> Void) -> UInt64 {
  let done = Semaphore(value: 0)
  let elapsed = AtomicInteger<UInt64>(0)
  Task.detached {
    let start = Harness.now()
    await body()
    elapsed.store(Harness.now() - start, ordering: .releasing)
    done.signal()
  }
  done.wait()
  return elapsed.load(ordering: .acquiring)
}

private func startLoopThread(_ name: String) -> RunLoopThread {
  do {
    return try RunLoopThread.start(name: name)
  } catch {
    fatalError("cost-tables (executor): RunLoopThread.start failed: \(error)")
  }
}

// MARK: - Actor round trips

/// Registers the actor round-trip row as a ping-pong row (main.swift measures it in each
/// placement): unpinned (the headline, many runs) and with every thread of the process on
/// one CPU. Not in the two-CPU placement: the Dispatch-backed actor's jobs run on the
/// runtime's pool threads, which that placement keeps on the measuring side's CPU while the
/// run-loop actor's thread is on the partner's, so the subjects would not be placed alike.
func registerExecutorActorBenchmarks(_ harness: Harness) {
  guard harness.wants("executor.actor.roundtrip"), PingPongPlacement.mode != .twoCPUs else { return }
  executorActorRows(harness)
}

private func executorActorRows(_ harness: Harness) {
  let worker = startLoopThread("cost-tables-actor")
  let loopExecutor = RunLoopExecutor(runLoop: worker.runLoop)
  let loopActor = LoopActor(executor: loopExecutor)
  let queueActor = QueueActor(executor: DispatchQueueExecutor())
  let defaultActor = DefaultActor()
  let caller = Caller()

  harness.sampleInterleaved(
    id: "executor.actor.roundtrip", group: "Executors: actor round trip from another actor",
    operations: 20_000,
    [
      (
        .toolkit("RunLoopExecutor actor"),
        { iterations in
          placeAll()
          return timeInPoolTask { await caller.roundTrips(iterations, to: loopActor) }
        }
      ),
      (
        .peer("DispatchQueue executor actor"),
        { iterations in
          placeAll()
          return timeInPoolTask { await caller.roundTrips(iterations, to: queueActor) }
        }
      ),
      (
        .peer("default actor"),
        { iterations in
          placeAll()
          return timeInPoolTask { await caller.roundTrips(iterations, to: defaultActor) }
        }
      ),
    ])

  loopExecutor.shutDown()
  worker.stop()
  PingPongPlacement.unpinProcessThreads()
}

/// Before each actor round-trip sample: in the one-CPU placement, every thread of the
/// process (the run-loop actor's, the pool's, Dispatch's) on that CPU, so every subject runs
/// placed alike (the pool starts threads as it likes, hence before each sample); nothing
/// when unpinned.
private func placeAll() {
  PingPongPlacement.pinProcessThreads(excluding: [])
}

// MARK: - Hop latency

/// Registers the hop row (a ping-pong row: main.swift measures it in every placement, see
/// `PingPongPlacement`). The measuring side is the runtime's pool threads (the callers) and
/// the main thread (the raw peer's caller); the partner side is each subject's own thread.
func registerExecutorHopBenchmarks(_ harness: Harness) {
  guard harness.wants("executor.hop.roundtrip") else { return }
  PingPongPlacement.withMainPinned { executorHopRows(harness) }
}

/// The threads of the hop row's partner side, which pin themselves there; every other
/// thread of the process (the pool's included) is pinned to the measuring side before each
/// sample, since the pool cannot be pinned from inside and starts threads as it likes.
private final class HopPartners: Sendable {
  private let ids = LockedValue<Set<Int32>>([])

  /// Called first thing on a partner thread: pins it and records it.
  func enter() {
    PingPongPlacement.pinPartner()
    let id = bench_thread_id()
    ids.withLock { _ = $0.insert(id) }
  }

  /// Pins every other thread of the process to the measuring side's CPU (nothing when
  /// unpinned).
  func placePool() {
    let partners = ids.withLock { $0 }
    PingPongPlacement.pinProcessThreads(excluding: partners)
  }

  /// A subject's sample: the pool placed, then `roundTrips(iterations)` timed in a pool task.
  func sample(_ roundTrips: @escaping @Sendable (Int) async -> Void) -> (Int) -> UInt64 {
    { iterations in
      self.placePool()
      return timeInPoolTask { await roundTrips(iterations) }
    }
  }
}

/// Hop latency: each subject's thread sleeps between calls (it has nothing else to do once
/// the answer is sent), so each call wakes it; the answer wakes a pool thread. The raw peer
/// is the same two wake-ups with blocking eventfds between two threads.
private func executorHopRows(_ harness: Harness) {
  let partners = HopPartners()
  let worker = startLoopThread("cost-tables-hop")
  do throws(PerformError) {
    try worker.performAndWait { partners.enter() }
  } catch {
    fatalError("cost-tables (executor): the hop row's loop thread ran no request: \(error)")
  }
  let loopActor = LoopActor(executor: RunLoopExecutor(runLoop: worker.runLoop))
  let caller = Caller()
  let toPeer = bench_eventfd()
  let fromPeer = bench_eventfd()
  executorCheck(toPeer >= 0 && fromPeer >= 0, "eventfd")
  for descriptor in [toPeer, fromPeer] { executorCheck(fcntl(descriptor, F_SETFL, 0) == 0, "fcntl") }
  let conditionExecutor = ConditionThreadExecutor(partners)
  let conditionActor = ConditionThreadActor(executor: conditionExecutor)
  let futexExecutor = FutexThreadExecutor(partners)
  let futexActor = FutexThreadActor(executor: futexExecutor)
  let resumer = EventfdResumer(partners)
  let stopValue = UInt64.max - 1
  let peer: JoinableThread<Void, Never>
  do {
    peer = try Thread.spawn(name: "cost-tables-eventfd") { () throws(Never) in
      partners.enter()
      var value: UInt64 = 0
      while true {
        executorCheck(read(toPeer, &value, 8) == 8, "read(eventfd)")
        if value == stopValue { return }
        executorCheck(write(fromPeer, &value, 8) == 8, "write(eventfd)")
      }
    }
  } catch {
    fatalError("cost-tables (executor): Thread.spawn failed: \(error)")
  }
  harness.sampleInterleaved(
    id: "executor.hop.roundtrip", group: "Executors: hop to a sleeping run-loop thread and back",
    operations: 10_000,
    [
      (
        .toolkit("RunLoopExecutor actor (pool -> loop -> pool)"),
        partners.sample { await caller.roundTrips($0, to: loopActor) }
      ),
      (
        .peer("pthread-condition thread executor actor (pool -> thread -> pool)"),
        partners.sample { await caller.roundTrips($0, to: conditionActor) }
      ),
      (
        .peer("futex thread executor actor (pool -> thread -> pool)"),
        partners.sample { await caller.roundTrips($0, to: futexActor) }
      ),
      (
        .peer("eventfd thread resuming a continuation (pool -> thread -> pool)"),
        partners.sample { await caller.roundTrips($0, to: resumer) }
      ),
      (
        .peer("raw eventfd round trip"),
        { iterations in
          partners.placePool()
          let start = Harness.now()
          var value: UInt64 = 1
          for _ in 0..<iterations {
            value = 1
            executorCheck(write(toPeer, &value, 8) == 8, "write(eventfd)")
            executorCheck(read(fromPeer, &value, 8) == 8, "read(eventfd)")
          }
          return Harness.now() - start
        }
      ),
    ])
  var stop = stopValue
  executorCheck(write(toPeer, &stop, 8) == 8, "write(eventfd)")
  peer.join()
  conditionExecutor.stop()
  futexExecutor.stop()
  resumer.stop()
  close(toPeer)
  close(fromPeer)
  loopActor.executor.shutDown()
  worker.stop()
  // Back to every usable CPU for the rows that follow.
  PingPongPlacement.unpinProcessThreads()
}

// MARK: - Enqueue throughput and allocations

/// Stores the jobs the runtime gives it, so they can be enqueued elsewhere, timed.
private final class JobCapture: SerialExecutor, @unchecked Sendable {
  // @unchecked: `jobs` and `expected` are protected by `lock`.
  private let lock = Sync.Lock()
  private var jobs: [UnownedJob] = []
  private var expected = 0
  private let complete = Semaphore(value: 0)

  /// Creates `count` tasks whose first job is captured here, and returns those jobs. Each
  /// job, when run by any executor, counts down `ran`.
  func capture(_ count: Int, counting ran: Countdown) -> [UnownedJob] {
    lock.withLock {
      jobs = []
      jobs.reserveCapacity(count)
      expected = count
    }
    let target = CapturedTarget(capture: self)
    for _ in 0..<count { Task.detached { await target.run(ran) } }
    complete.wait()
    return lock.withLock { jobs }
  }

  func enqueue(_ job: consuming ExecutorJob) {
    let unownedJob = UnownedJob(job)
    let done = lock.withLock {
      jobs.append(unownedJob)
      return jobs.count == expected
    }
    if done { complete.signal() }
  }
}

private actor CapturedTarget {
  let capture: JobCapture
  nonisolated var unownedExecutor: UnownedSerialExecutor { capture.asUnownedSerialExecutor() }
  init(capture: JobCapture) { self.capture = capture }
  func run(_ ran: Countdown) { ran.countDown() }
}

/// Opens a semaphore when its count reaches zero.
private final class Countdown: Sendable {
  private let remaining: AtomicInteger<Int>
  let done = Semaphore(value: 0)
  init(_ count: Int) { remaining = AtomicInteger(count) }
  func countDown() {
    // Full: the last decrement sees every other job's effects before it signals.
    if remaining.decrement(ordering: .full) == 0 { done.signal() }
  }
}

private func executorEnqueueRows(_ harness: Harness) {
  let wantsThroughput = harness.wants("executor.enqueue.throughput")
  let wantsBytes = harness.wants("executor.enqueue.bytes-per-job")
  guard wantsThroughput || wantsBytes else { return }
  let worker = startLoopThread("cost-tables-enqueue")
  let loopExecutor = RunLoopExecutor(runLoop: worker.runLoop)
  let queueExecutor = DispatchQueueExecutor()
  let capture = JobCapture()
  let producers = 2

  /// Enqueues `jobs` to `enqueue` from `producers` threads and returns the nanoseconds until
  /// the last job ran (job capture is set-up, outside the time).
  func timeEnqueues(_ iterations: Int, _ enqueue: @escaping @Sendable (UnownedJob) -> Void) -> UInt64 {
    let ran = Countdown(iterations)
    let jobs = capture.capture(iterations, counting: ran)
    let start = Harness.now()
    func produce(_ producer: Int) -> JoinableThread<Void, Never> {
      do {
        return try Thread.spawn(name: "cost-tables-producer") { () throws(Never) in
          var index = producer
          while index < jobs.count {
            enqueue(jobs[index])
            index += producers
          }
        }
      } catch {
        fatalError("cost-tables (executor): Thread.spawn failed: \(error)")
      }
    }
    let first = produce(0)
    let second = produce(1)
    first.join()
    second.join()
    ran.done.wait()
    return Harness.now() - start
  }

  if wantsThroughput {
    harness.sampleInterleaved(
      id: "executor.enqueue.throughput", group: "Executors: jobs enqueued from two threads, until all ran",
      operations: 20_000,
      [
        (
          .toolkit("RunLoopExecutor"),
          { iterations in timeEnqueues(iterations) { loopExecutor.enqueue(ExecutorJob($0)) } }
        ),
        (
          .peer("DispatchQueue executor"),
          { iterations in timeEnqueues(iterations) { queueExecutor.enqueue(ExecutorJob($0)) } }
        ),
      ])
  }

  if wantsBytes {
    // Bytes allocated (all arenas) while one thread enqueues jobs to an executor that cannot
    // run them yet (its thread or queue is held), after a first round reached the peak
    // queue length. One allocation per enqueue would show as 16 bytes or more.
    func bytesPerJob(_ count: Int, hold: (@escaping @Sendable () -> Void) -> Void, _ enqueue: (UnownedJob) -> Void)
      -> Double
    {
      var perJob = 0.0
      for _ in 0..<2 {
        let ran = Countdown(count)
        let jobs = capture.capture(count, counting: ran)
        let release = Semaphore(value: 0)
        let holding = Semaphore(value: 0)
        hold {
          holding.signal()
          release.wait()
        }
        holding.wait()
        let before = bench_allocated_bytes()
        for job in jobs { enqueue(job) }
        let after = bench_allocated_bytes()
        release.signal()
        ran.done.wait()
        perJob = (Double(after) - Double(before)) / Double(count)
      }
      return perJob
    }
    let count = harness.quick ? 1_000 : 10_000
    var loopSamples: [Double] = []
    var queueSamples: [Double] = []
    for _ in 0..<(harness.quick ? 1 : 5) {
      loopSamples.append(
        bytesPerJob(count, hold: { worker.runLoop.performAndWakeUp($0) }) { loopExecutor.enqueue(ExecutorJob($0)) })
      queueSamples.append(
        bytesPerJob(count, hold: { queueExecutor.queue.async(execute: $0) }) { queueExecutor.enqueue(ExecutorJob($0)) })
    }
    let group = "Executors: bytes allocated per enqueued job"
    harness.record(
      id: "executor.enqueue.bytes-per-job", subject: .toolkit("RunLoopExecutor"), group: group, values: loopSamples,
      unit: "bytes")
    harness.record(
      id: "executor.enqueue.bytes-per-job", subject: .peer("DispatchQueue executor"), group: group,
      values: queueSamples, unit: "bytes")
  }
  worker.stop()
}
