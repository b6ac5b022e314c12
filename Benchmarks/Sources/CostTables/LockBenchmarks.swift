// Lock rows: the mutex family (mutex, LockedValue, recursive mutex, read-write lock, spin
// lock), uncontended and contended over 1-16 threads, against raw pthread, Synchronization
// and Foundation; the guide's Table 4-2 mutex acquisition is the first row.
//
// Every subject is a final class with one `increment()` that takes the lock, bumps a
// counter in allocated storage (no exclusivity check, no Swift property access cost that
// the peers would not pay) and releases. Loops are generic over the class so each is
// specialised; counters are checked afterwards, so no loop can be optimised away.
//
// Data layout: a counter apart is on a 64-byte line of its own, and a pthread lock on a
// 64-byte block of its own, so no subject's counter shares its lock's line by accident of
// the allocator. Two layouts, compared like for like in the contended mutex rows
// (`mutexContendedLikeForLike`):
//   - counter apart: Sync.Lock, pthread, Foundation.NSLock, and
//     "Synchronization.Mutex<Void> (counter apart)", a Mutex guarding nothing beside a
//     counter (how a Mutex guards state it does not hold);
//   - counter beside the lock word, one allocation: Sync.LockedValue,
//     Synchronization.Mutex (a `Mutex<Int>`), and "pthread (counter beside)" (a
//     pthread_mutex_t and the counter in one 64-byte block, NIOLockedValueBox's layout:
//     `PthreadMutexSubject(counterBeside: true)`).
// The contended rows make a fresh subject for every sample (SubjectPlacement).

import CBenchmarkShims
import Foundation
import Sync
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

// MARK: - Subjects

/// A lock guarding one counter: lock, increment, unlock.
protocol CountingLock: AnyObject, Sendable {
  /// Takes the lock, adds one to the counter, releases the lock.
  func increment()
  /// The counter; read only when no thread is incrementing.
  var count: Int { get }
}

/// A zeroed counter on a 64-byte line of its own, shared by the subjects of every lock table:
/// stable address, no exclusivity checks, and no other data on its line.
func makeCounter() -> UnsafeMutablePointer<Int> {
  let raw = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
  raw.initializeMemory(as: UInt8.self, repeating: 0, count: 64)
  return raw.assumingMemoryBound(to: Int.self)
}

/// Zeroed storage for one `T` (a pthread lock) on a 64-byte block of its own.
func makeLine<T>(of type: T.Type) -> UnsafeMutablePointer<T> {
  precondition(MemoryLayout<T>.size <= 64 && MemoryLayout<T>.alignment <= 64)
  let raw = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
  raw.initializeMemory(as: UInt8.self, repeating: 0, count: 64)
  return raw.bindMemory(to: T.self, capacity: 1)
}

func checkPthread(_ result: Int32, _ call: String) {
  if result != 0 { fatalError("cost-tables: \(call) failed with errno \(result)") }
}

final class SyncMutexSubject: CountingLock, @unchecked Sendable {
  let lock = Sync.Lock(checked: false)
  let counter = makeCounter()
  func increment() {
    lock.lock()
    counter.pointee &+= 1
    lock.unlock()
  }
  var count: Int { counter.pointee }
}

private final class SyncMutexWithLockSubject: CountingLock, @unchecked Sendable {
  let lock = Sync.Lock(checked: false)
  let counter = makeCounter()
  func increment() {
    lock.withLock { counter.pointee &+= 1 }
  }
  var count: Int { counter.pointee }
}

private final class SyncRecursiveMutexSubject: CountingLock, @unchecked Sendable {
  let lock = Sync.RecursiveLock()
  let counter = makeCounter()
  func increment() {
    lock.lock()
    counter.pointee &+= 1
    lock.unlock()
  }
  var count: Int { counter.pointee }
}

private final class SyncSpinLockSubject: CountingLock, @unchecked Sendable {
  let lock = Sync.SpinLock(checked: false)
  let counter = makeCounter()
  func increment() {
    lock.lock()
    counter.pointee &+= 1
    lock.unlock()
  }
  var count: Int { counter.pointee }
}

private final class SyncReadWriteLockSubject: CountingLock, @unchecked Sendable {
  let lock = Sync.ReadWriteLock()
  let counter = makeCounter()
  func increment() {
    lock.writeLock()
    counter.pointee &+= 1
    lock.unlock()
  }
  /// Read lock, read the counter, unlock.
  func read() -> Int {
    lock.readLock()
    let value = counter.pointee
    lock.unlock()
    return value
  }
  var count: Int { counter.pointee }
}

/// Raw `pthread_mutex_t` in allocated storage: the default type, or recursive; its counter on
/// a line of its own, or with `counterBeside` in the mutex's 64-byte block
/// (NIOLockedValueBox's layout, the one `Sync.LockedValue` and `Synchronization.Mutex<Int>`
/// have).
final class PthreadMutexSubject: CountingLock, @unchecked Sendable {
  let mutex: UnsafeMutablePointer<pthread_mutex_t>
  let counter: UnsafeMutablePointer<Int>
  init(recursive: Bool = false, counterBeside: Bool = false) {
    mutex = makeLine(of: pthread_mutex_t.self)
    if counterBeside {
      precondition(MemoryLayout<pthread_mutex_t>.size + MemoryLayout<Int>.size <= 64)
      counter = (UnsafeMutableRawPointer(mutex) + 64 - MemoryLayout<Int>.size).bindMemory(to: Int.self, capacity: 1)
    } else {
      counter = makeCounter()
    }
    if recursive {
      var attributes = pthread_mutexattr_t()
      checkPthread(pthread_mutexattr_init(&attributes), "pthread_mutexattr_init")
      checkPthread(
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE)), "pthread_mutexattr_settype")
      checkPthread(pthread_mutex_init(mutex, &attributes), "pthread_mutex_init")
      checkPthread(pthread_mutexattr_destroy(&attributes), "pthread_mutexattr_destroy")
    } else {
      checkPthread(pthread_mutex_init(mutex, nil), "pthread_mutex_init")
    }
  }
  func increment() {
    pthread_mutex_lock(mutex)
    counter.pointee &+= 1
    pthread_mutex_unlock(mutex)
  }
  var count: Int { counter.pointee }
}

private final class PthreadSpinSubject: CountingLock, @unchecked Sendable {
  let spin = makeLine(of: pthread_spinlock_t.self)
  let counter = makeCounter()
  init() {
    checkPthread(pthread_spin_init(spin, Int32(PTHREAD_PROCESS_PRIVATE)), "pthread_spin_init")
  }
  func increment() {
    pthread_spin_lock(spin)
    counter.pointee &+= 1
    pthread_spin_unlock(spin)
  }
  var count: Int { counter.pointee }
}

/// Raw `pthread_rwlock_t`: the default (reader-preferring) kind, or glibc's
/// writer-preferring kind that `Sync.ReadWriteLock` is built on.
private final class PthreadRWLockSubject: CountingLock, @unchecked Sendable {
  let rwlock = makeLine(of: pthread_rwlock_t.self)
  let counter = makeCounter()
  init(preferWriter: Bool = false) {
    if preferWriter {
      checkPthread(bench_rwlock_init_prefer_writer(rwlock), "pthread_rwlock_init")
    } else {
      checkPthread(pthread_rwlock_init(rwlock, nil), "pthread_rwlock_init")
    }
  }
  func increment() {
    pthread_rwlock_wrlock(rwlock)
    counter.pointee &+= 1
    pthread_rwlock_unlock(rwlock)
  }
  func read() -> Int {
    pthread_rwlock_rdlock(rwlock)
    let value = counter.pointee
    pthread_rwlock_unlock(rwlock)
    return value
  }
  var count: Int { counter.pointee }
}

private final class NSLockSubject: CountingLock, @unchecked Sendable {
  let lock = NSLock()
  let counter = makeCounter()
  func increment() {
    lock.lock()
    counter.pointee &+= 1
    lock.unlock()
  }
  var count: Int { counter.pointee }
}

private final class NSRecursiveLockSubject: CountingLock, @unchecked Sendable {
  let lock = NSRecursiveLock()
  let counter = makeCounter()
  func increment() {
    lock.lock()
    counter.pointee &+= 1
    lock.unlock()
  }
  var count: Int { counter.pointee }
}

/// `Synchronization.Mutex` guards its own value; closure-only, so `withLock`.
/// The toolkit's lock with the counter inside it (one cache line): the layout
/// `Synchronization.Mutex<Int>` has.
final class SyncLockedValueSubject: CountingLock, Sendable {
  let locked = LockedValue<Int>(0)
  func increment() {
    locked.withLock { $0 &+= 1 }
  }
  var count: Int { locked.withLock { $0 } }
}

final class SynchronizationMutexSubject: CountingLock, Sendable {
  let mutex = Synchronization.Mutex<Int>(0)
  func increment() {
    mutex.withLock { $0 &+= 1 }
  }
  var count: Int { mutex.withLock { $0 } }
}

/// `Synchronization.Mutex<Void>` guarding a counter on a line of its own: the layout
/// `Sync.Lock`'s subject has, so its like-for-like peer in the contended rows.
final class SynchronizationMutexApartSubject: CountingLock, @unchecked Sendable {
  let mutex = Synchronization.Mutex<Void>(())
  let counter = makeCounter()
  func increment() {
    mutex.withLock { _ in counter.pointee &+= 1 }
  }
  var count: Int { mutex.withLock { _ in counter.pointee } }
}

// MARK: - Loops

/// `iterations` lock+increment+unlock rounds on one thread; checks the counter moved.
func uncontendedLoop<Subject: CountingLock>(_ subject: Subject, _ iterations: Int) {
  let before = subject.count
  for _ in 0..<iterations { subject.increment() }
  if subject.count &- before != iterations {
    fatalError("cost-tables: \(Subject.self) lost increments")
  }
}

/// `threads` threads each doing up to `perThread` increments at once; returns the
/// nanoseconds from the start gate to the last join, scaled to `iterations` increments, and
/// checks no increment was lost. A lock that collapses (a priority-inheritance futex under
/// contention can take tens of microseconds per hand-off) would make one sample last minutes,
/// so every thread stops at `timeLimit` nanoseconds after the gate and the cost is taken over
/// the increments actually done.
func contendedRun<Subject: CountingLock>(
  _ subject: Subject, threads: Int, perThread: Int, _ iterations: Int, timeLimit: UInt64,
  work: Int = 0
) -> UInt64 {
  let perThread = Swift.max(1, perThread)
  let before = subject.count
  let done = AtomicInteger<Int>(0)
  let elapsed = BenchThreads.timedRun(count: threads) { _ in
    let deadline = Harness.now() + timeLimit
    var mine = 0
    var local = UInt64(truncatingIfNeeded: mine &+ 1)
    while mine < perThread {
      let chunk = Swift.min(1_024, perThread - mine)
      if work == 0 {
        for _ in 0..<chunk { subject.increment() }
      } else {
        for _ in 0..<chunk {
          subject.increment()
          local = localWork(local, rounds: work)
        }
      }
      mine += chunk
      if Harness.now() > deadline { break }
    }
    _ = done.add(mine, ordering: .relaxed)
    opaqueSink(local)
  }
  let completed = subject.count &- before
  if completed <= 0 || completed != done.load(ordering: .relaxed) {
    fatalError("cost-tables: \(Subject.self) lost increments under contention")
  }
  return elapsed * UInt64(iterations) / UInt64(completed)
}

/// Work outside the lock: a chain of `rounds` dependent xor-shift-multiply steps (about
/// 1.5 ns each; the shift keeps the optimiser from folding the chain into one multiply), so
/// threads leave the lock and come back, forcing real hand-offs between cores.
@inline(__always)
private func localWork(_ seed: UInt64, rounds: Int) -> UInt64 {
  var value = seed
  for _ in 0..<rounds { value = (value ^ (value >> 29)) &* 0xbf58_476d_1ce4_e5b9 }
  return value
}

// MARK: - Registration

/// Thread counts for the contention series.
let contentionThreadCounts = [1, 2, 4, 8, 16]

/// Registers Table 4-2's mutex acquisition and its variant through `withLock`.
func registerMutexBenchmarks(_ harness: Harness) {
  BenchThreads.makeProcessMultithreaded()

  // Table 4-2: mutex acquisition (lock + unlock, uncontended).
  let syncMutex = SyncMutexSubject()
  let syncMutexWithLock = SyncMutexWithLockSubject()
  let pthreadMutex = PthreadMutexSubject()
  let nsLock = NSLockSubject()
  let nsRecursiveLockAsMutex = NSRecursiveLockSubject()
  let synchronizationMutex = SynchronizationMutexSubject()
  let syncLockedValue = SyncLockedValueSubject()
  harness.measureInterleaved(
    id: "mutex.uncontended", group: "Table 4-2", operations: 200_000,
    [
      (.toolkit("Sync.Lock"), { uncontendedLoop(syncMutex, $0) }),
      (.toolkit("Sync.LockedValue"), { uncontendedLoop(syncLockedValue, $0) }),
      (.peer("pthread"), { uncontendedLoop(pthreadMutex, $0) }),
      (.peer("Foundation.NSLock"), { uncontendedLoop(nsLock, $0) }),
      (.peer("Foundation.NSRecursiveLock"), { uncontendedLoop(nsRecursiveLockAsMutex, $0) }),
      (.peer("Synchronization.Mutex"), { uncontendedLoop(synchronizationMutex, $0) }),
    ])
  harness.measureInterleaved(
    id: "mutex.uncontended-withlock", group: "Locks, uncontended", operations: 200_000,
    [
      (.toolkit("Sync.Lock"), { uncontendedLoop(syncMutexWithLock, $0) }),
      (.peer("Synchronization.Mutex"), { uncontendedLoop(synchronizationMutex, $0) }),
    ])

}

/// Registers the rest of the lock family, uncontended, and every lock under contention.
func registerLockBenchmarks(_ harness: Harness) {
  // The rest of the lock family, uncontended.
  let syncRecursive = SyncRecursiveMutexSubject()
  let pthreadRecursive = PthreadMutexSubject(recursive: true)
  let nsRecursive = NSRecursiveLockSubject()
  harness.measureInterleaved(
    id: "recursive-mutex.uncontended", group: "Locks, uncontended", operations: 200_000,
    [
      (.toolkit("Sync.RecursiveLock"), { uncontendedLoop(syncRecursive, $0) }),
      (.peer("pthread"), { uncontendedLoop(pthreadRecursive, $0) }),
      (.peer("Foundation.NSRecursiveLock"), { uncontendedLoop(nsRecursive, $0) }),
    ])

  let syncRW = SyncReadWriteLockSubject()
  let pthreadRW = PthreadRWLockSubject()
  let pthreadRWWriter = PthreadRWLockSubject(preferWriter: true)
  harness.measureInterleaved(
    id: "rwlock.read-uncontended", group: "Locks, uncontended", operations: 200_000,
    [
      (
        .toolkit("Sync.ReadWriteLock"),
        { iterations in
          var sum = 0
          for _ in 0..<iterations { sum &+= syncRW.read() }
          opaqueSink(sum)
        }
      ),
      (
        .peer("pthread"),
        { iterations in
          var sum = 0
          for _ in 0..<iterations { sum &+= pthreadRW.read() }
          opaqueSink(sum)
        }
      ),
      (
        .peer("pthread (writer-preferring)"),
        { iterations in
          var sum = 0
          for _ in 0..<iterations { sum &+= pthreadRWWriter.read() }
          opaqueSink(sum)
        }
      ),
    ])
  harness.measureInterleaved(
    id: "rwlock.write-uncontended", group: "Locks, uncontended", operations: 200_000,
    [
      (.toolkit("Sync.ReadWriteLock"), { uncontendedLoop(syncRW, $0) }),
      (.peer("pthread"), { uncontendedLoop(pthreadRW, $0) }),
      (.peer("pthread (writer-preferring)"), { uncontendedLoop(pthreadRWWriter, $0) }),
    ])

  let syncSpin = SyncSpinLockSubject()
  let pthreadSpin = PthreadSpinSubject()
  harness.measureInterleaved(
    id: "spinlock.uncontended", group: "Locks, uncontended", operations: 200_000,
    [
      (.toolkit("Sync.SpinLock"), { uncontendedLoop(syncSpin, $0) }),
      (.peer("pthread"), { uncontendedLoop(pthreadSpin, $0) }),
    ])

  // Contention: N threads share one lock and one counter; ns per increment (wall time over
  // all increments), so a flat line is constant throughput.
  // Each thread does K increments (K = 200,000; 2,000 with --quick), long enough (over a
  // scheduler time slice) that the threads really overlap on few cores; the harness passes
  // iterations = K x threads and gets ns per increment back. 11 samples: each is long.
  // Every sample (the probe and the warm-up too) runs a fresh subject at a fresh address,
  // kept until its row is done (SubjectPlacement), so a row's median is taken over eleven
  // placements, not one per process.
  let perThread = 200_000
  // One sample stops after four sample budgets at most (1 s; 80 ms with --quick).
  let limit = UInt64(4 * harness.sampleBudget * 1e9)
  /// A row's body: `threads` threads on a fresh subject from `make`, `work` rounds of private
  /// work between acquisitions.
  func contended<Subject: CountingLock>(
    _ make: @escaping () -> Subject, threads: Int, work: Int = 0
  ) -> (Int) -> UInt64 {
    { iterations in
      contendedRun(
        SubjectPlacement.place(make), threads: threads, perThread: iterations / threads, iterations, timeLimit: limit,
        work: work)
    }
  }
  for threads in contentionThreadCounts {
    harness.sampleInterleaved(
      id: "mutex.contended-\(threads)", group: "Locks, contended", operations: perThread * threads, samples: 11,
      [
        (.toolkit("Sync.Lock"), contended(SyncMutexSubject.init, threads: threads)),
        (.toolkit("Sync.LockedValue"), contended(SyncLockedValueSubject.init, threads: threads)),
        (.peer("pthread"), contended({ PthreadMutexSubject() }, threads: threads)),
        (.peer("Foundation.NSLock"), contended(NSLockSubject.init, threads: threads)),
        (.peer("Synchronization.Mutex"), contended(SynchronizationMutexSubject.init, threads: threads)),
        (
          .peer("Synchronization.Mutex<Void> (counter apart)"),
          contended(SynchronizationMutexApartSubject.init, threads: threads)
        ),
        (.peer("pthread (counter beside)"), contended({ PthreadMutexSubject(counterBeside: true) }, threads: threads)),
      ])
    SubjectPlacement.releaseRow()
    // The same with about 50 ns of private work (32 rounds) between acquisitions: the lock is handed
    // between threads far more often, as in real code.
    harness.sampleInterleaved(
      id: "mutex.contended-with-work-\(threads)", group: "Locks, contended", operations: perThread / 4 * threads,
      samples: 11,
      [
        (.toolkit("Sync.Lock"), contended(SyncMutexSubject.init, threads: threads, work: 32)),
        (.toolkit("Sync.LockedValue"), contended(SyncLockedValueSubject.init, threads: threads, work: 32)),
        (.peer("pthread"), contended({ PthreadMutexSubject() }, threads: threads, work: 32)),
        (.peer("Foundation.NSLock"), contended(NSLockSubject.init, threads: threads, work: 32)),
        (.peer("Synchronization.Mutex"), contended(SynchronizationMutexSubject.init, threads: threads, work: 32)),
        (
          .peer("Synchronization.Mutex<Void> (counter apart)"),
          contended(SynchronizationMutexApartSubject.init, threads: threads, work: 32)
        ),
        (
          .peer("pthread (counter beside)"),
          contended({ PthreadMutexSubject(counterBeside: true) }, threads: threads, work: 32)
        ),
      ])
    SubjectPlacement.releaseRow()
    harness.sampleInterleaved(
      id: "recursive-mutex.contended-\(threads)", group: "Locks, contended", operations: perThread * threads,
      samples: 11,
      [
        (.toolkit("Sync.RecursiveLock"), contended(SyncRecursiveMutexSubject.init, threads: threads)),
        (.peer("pthread"), contended({ PthreadMutexSubject(recursive: true) }, threads: threads)),
        (.peer("Foundation.NSRecursiveLock"), contended(NSRecursiveLockSubject.init, threads: threads)),
      ])
    SubjectPlacement.releaseRow()
    harness.sampleInterleaved(
      id: "rwlock.write-contended-\(threads)", group: "Locks, contended", operations: perThread * threads, samples: 11,
      [
        (.toolkit("Sync.ReadWriteLock"), contended(SyncReadWriteLockSubject.init, threads: threads)),
        (.peer("pthread"), contended({ PthreadRWLockSubject() }, threads: threads)),
        (
          .peer("pthread (writer-preferring)"),
          contended({ PthreadRWLockSubject(preferWriter: true) }, threads: threads)
        ),
      ])
    SubjectPlacement.releaseRow()
    harness.sampleInterleaved(
      id: "spinlock.contended-\(threads)", group: "Locks, contended", operations: perThread * threads, samples: 11,
      [
        (.toolkit("Sync.SpinLock"), contended(SyncSpinLockSubject.init, threads: threads)),
        (.peer("pthread"), contended(PthreadSpinSubject.init, threads: threads)),
      ])
    SubjectPlacement.releaseRow()
  }
}
