// Priority-inheritance lock rows (`pilock.`): the throughput price of priority inheritance.
// `Sync.PriorityInheritanceLock` beside the toolkit's `Sync.Lock` (no inheritance: it spins,
// then parks on a plain futex) and glibc's `PTHREAD_PRIO_INHERIT` mutex (the same kernel
// calls as the toolkit's PI lock), uncontended and with 2, 4 and 16 threads on one lock.
// Like-for-like: each subject is a final class holding its lock and a counter in allocated
// storage; the increment is the same. All threads run at normal priority, so these rows
// show the cost of the protocol (a system call on both sides of every contended hand-off,
// no spinning), not the benefit, which only real-time threads see. `Sync.Lock` stands in the
// peer role as the reference without inheritance, so "vs best peer" is the price of
// inheritance wherever the plain lock is the faster of the two.

import Sync

#if canImport(Glibc)
  import Glibc
#endif

private protocol PICountingLock: AnyObject, Sendable {
  func increment()
  var count: Int { get }
}

private func makePICounter() -> UnsafeMutablePointer<Int> {
  let counter = UnsafeMutablePointer<Int>.allocate(capacity: 1)
  counter.initialize(to: 0)
  return counter
}

private final class SyncPriorityInheritanceSubject: PICountingLock, @unchecked Sendable {
  let lock: PriorityInheritanceLock
  let counter = makePICounter()
  init() {
    do {
      lock = try PriorityInheritanceLock()
    } catch {
      fatalError("cost-tables: PriorityInheritanceLock: \(error)")
    }
  }
  func increment() {
    lock.lock()
    counter.pointee &+= 1
    lock.unlock()
  }
  var count: Int { counter.pointee }
}

private final class SyncLockBaselineSubject: PICountingLock, @unchecked Sendable {
  let lock = Lock(checked: false)
  let counter = makePICounter()
  func increment() {
    lock.lock()
    counter.pointee &+= 1
    lock.unlock()
  }
  var count: Int { counter.pointee }
}

private final class PthreadPriorityInheritSubject: PICountingLock, @unchecked Sendable {
  let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  let counter = makePICounter()
  init() {
    var attributes = pthread_mutexattr_t()
    check(pthread_mutexattr_init(&attributes), "pthread_mutexattr_init")
    check(pthread_mutexattr_setprotocol(&attributes, Int32(PTHREAD_PRIO_INHERIT)), "pthread_mutexattr_setprotocol")
    check(pthread_mutex_init(mutex, &attributes), "pthread_mutex_init")
    check(pthread_mutexattr_destroy(&attributes), "pthread_mutexattr_destroy")
  }
  func increment() {
    pthread_mutex_lock(mutex)
    counter.pointee &+= 1
    pthread_mutex_unlock(mutex)
  }
  var count: Int { counter.pointee }
  private func check(_ result: Int32, _ call: String) {
    if result != 0 { fatalError("cost-tables: \(call) failed with errno \(result)") }
  }
}

private func piUncontendedLoop<Subject: PICountingLock>(_ subject: Subject, _ iterations: Int) {
  let before = subject.count
  for _ in 0..<iterations { subject.increment() }
  if subject.count &- before != iterations { fatalError("cost-tables: \(Subject.self) lost increments") }
}

/// `threads` threads incrementing at once until each did `perThread` or `timeLimit`
/// nanoseconds passed; nanoseconds scaled to `iterations` increments.
private func piContendedRun<Subject: PICountingLock>(
  _ subject: Subject, threads: Int, perThread: Int, _ iterations: Int, timeLimit: UInt64
) -> UInt64 {
  let perThread = Swift.max(1, perThread)
  let before = subject.count
  let done = AtomicInteger<Int>(0)
  let elapsed = BenchThreads.timedRun(count: threads) { _ in
    let deadline = Harness.now() + timeLimit
    var mine = 0
    while mine < perThread {
      let chunk = Swift.min(1_024, perThread - mine)
      for _ in 0..<chunk { subject.increment() }
      mine += chunk
      if Harness.now() > deadline { break }
    }
    _ = done.add(mine, ordering: .relaxed)
  }
  let completed = subject.count &- before
  if completed <= 0 || completed != done.load(ordering: .relaxed) {
    fatalError("cost-tables: \(Subject.self) lost increments under contention")
  }
  return elapsed * UInt64(iterations) / UInt64(completed)
}

/// Registers the `pilock.` rows.
func registerPriorityInheritanceBenchmarks(_ harness: Harness) {
  BenchThreads.makeProcessMultithreaded()
  let toolkit = SyncPriorityInheritanceSubject()
  let baseline = SyncLockBaselineSubject()
  let pthread = PthreadPriorityInheritSubject()
  harness.measureInterleaved(
    id: "pilock.uncontended", group: "Priority inheritance", operations: 200_000,
    [
      (.toolkit("Sync.PriorityInheritanceLock"), { piUncontendedLoop(toolkit, $0) }),
      (.peer("Sync.Lock (reference: no inheritance)"), { piUncontendedLoop(baseline, $0) }),
      (.peer("pthread (PTHREAD_PRIO_INHERIT)"), { piUncontendedLoop(pthread, $0) }),
    ])
  // A contended hand-off of a PI lock is a kernel round trip on both sides: fewer
  // increments per thread than the other contended rows, and five samples, keep the rows
  // short; a sample still stops after four sample budgets.
  let perThread = 50_000
  let limit = UInt64(4 * harness.sampleBudget * 1e9)
  for threads in [2, 4, 16] {
    harness.sampleInterleaved(
      id: "pilock.contended-\(threads)", group: "Priority inheritance", operations: perThread * threads,
      samples: 5,
      [
        (
          .toolkit("Sync.PriorityInheritanceLock"),
          { piContendedRun(toolkit, threads: threads, perThread: $0 / threads, $0, timeLimit: limit) }
        ),
        (
          .peer("Sync.Lock (reference: no inheritance)"),
          { piContendedRun(baseline, threads: threads, perThread: $0 / threads, $0, timeLimit: limit) }
        ),
        (
          .peer("pthread (PTHREAD_PRIO_INHERIT)"),
          { piContendedRun(pthread, threads: threads, perThread: $0 / threads, $0, timeLimit: limit) }
        ),
      ])
  }
}
