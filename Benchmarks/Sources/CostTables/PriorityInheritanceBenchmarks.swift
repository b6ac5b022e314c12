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

// The subjects conform to `CountingLock` and run in the lock rows' loops (`uncontendedLoop`,
// `contendedRun`), so both tables measure the same increment the same way.

private final class SyncPriorityInheritanceSubject: CountingLock, @unchecked Sendable {
  let lock: PriorityInheritanceLock
  let counter = makeCounter()
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

private final class PthreadPriorityInheritSubject: CountingLock, @unchecked Sendable {
  let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  let counter = makeCounter()
  init() {
    var attributes = pthread_mutexattr_t()
    checkPthread(pthread_mutexattr_init(&attributes), "pthread_mutexattr_init")
    checkPthread(
      pthread_mutexattr_setprotocol(&attributes, Int32(PTHREAD_PRIO_INHERIT)), "pthread_mutexattr_setprotocol")
    checkPthread(pthread_mutex_init(mutex, &attributes), "pthread_mutex_init")
    checkPthread(pthread_mutexattr_destroy(&attributes), "pthread_mutexattr_destroy")
  }
  func increment() {
    pthread_mutex_lock(mutex)
    counter.pointee &+= 1
    pthread_mutex_unlock(mutex)
  }
  var count: Int { counter.pointee }
}

/// Registers the `pilock.` rows.
func registerPriorityInheritanceBenchmarks(_ harness: Harness) {
  BenchThreads.makeProcessMultithreaded()
  let toolkit = SyncPriorityInheritanceSubject()
  let baseline = SyncMutexSubject()
  let pthread = PthreadPriorityInheritSubject()
  harness.measureInterleaved(
    id: "pilock.uncontended", group: "Priority inheritance", operations: 200_000,
    [
      (.toolkit("Sync.PriorityInheritanceLock"), { uncontendedLoop(toolkit, $0) }),
      (.peer("Sync.Lock (reference: no inheritance)"), { uncontendedLoop(baseline, $0) }),
      (.peer("pthread (PTHREAD_PRIO_INHERIT)"), { uncontendedLoop(pthread, $0) }),
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
          { contendedRun(toolkit, threads: threads, perThread: $0 / threads, $0, timeLimit: limit) }
        ),
        (
          .peer("Sync.Lock (reference: no inheritance)"),
          { contendedRun(baseline, threads: threads, perThread: $0 / threads, $0, timeLimit: limit) }
        ),
        (
          .peer("pthread (PTHREAD_PRIO_INHERIT)"),
          { contendedRun(pthread, threads: threads, perThread: $0 / threads, $0, timeLimit: limit) }
        ),
      ])
  }
}
