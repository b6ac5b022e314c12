// Locks under real contention (the model is ordo-one's "synchronization-benchmarks"): every
// lock of the toolkit beside its peers, with the same data layout for every subject of a
// family, in five scenarios, each measured in three runs per report.
//
//   contention.scaling-N            N threads (1...64) take the lock back-to-back and bump the
//                                   shared counter; ns per acquisition (wall time / total)
//   contention.scaling-with-work-N  the same with about 50 ns of private work between
//                                   acquisitions (real hand-offs between cores)
//   contention.asymmetric-N         one producer taking the lock back-to-back beside N
//                                   consumers that take it with private work between; ns per
//                                   *producer* acquisition (a lock that starves one thread
//                                   shows here). Samples of 200 ms, not 20: with 33 runnable
//                                   threads on 2 CPUs the scheduler's round is about 20 ms
//                                   here, so a producer that left its CPU once (preempted, or
//                                   one futex sleep) lost a whole 20-ms sample whatever the
//                                   lock, and the row read 0.6-1.6 ms per acquisition for
//                                   pthread mutexes and NSLock too; over 200 ms such a loss
//                                   costs a tenth, and a lock that starves the producer for
//                                   longer still shows
//   contention.bursty-N             N threads, bursts of 64 acquisitions separated by 200 us
//                                   idle gaps (sleepers must be woken); ns per acquisition,
//                                   timed inside the bursts. Samples of 200 ms too: one
//                                   thread kept off the CPUs for a scheduler's round inside
//                                   a burst adds about 100 ns per acquisition to a 20-ms
//                                   sample at 32 threads, so the row read whether such a
//                                   stall fell in two of three samples
//   contention.background-load-N    N contenders beside 2 CPU-bound threads that never touch
//                                   the lock; ns per acquisition
//   fairness.max-wait-N, fairness.p99-wait-N, fairness.p50-wait-N
//                                   N threads hammer for 500 ms (20 ms with --quick); the
//                                   longest / 99th / 50th percentile time one acquisition
//                                   took (lock + bump + unlock, timed around the call)
//   fairness.gini-N                 the Gini coefficient of the per-thread acquisition
//                                   counts of that run, in percent (0 = every thread got the
//                                   same share, 100 = one thread got everything)
//   fairness.throughput-N           ns per acquisition over that run (what the bound costs)
//                                   The fairness rows add two references compared with
//                                   nothing: "Sync.Lock, hand-over bound off", the same lock
//                                   with the bounded wait switched off (LockBenchmarkSwitches,
//                                   SPI), so every report measures what the bound costs and
//                                   what it buys; and "no lock (atomic add)", the same loop
//                                   around an atomic add, whose longest "wait" is the
//                                   scheduler's alone (more threads than cores: a thread
//                                   preempted anywhere in its loop waits for its turn), the
//                                   floor under every lock at that count. N = 2 (one thread
//                                   per core here) shows a lock's own waits.
//   fairness.sleeps-N, fairness.preemptions-N
//                                   the threads' voluntary context switches (sleeps in the
//                                   kernel) and involuntary ones (the scheduler took the
//                                   processor away) per million acquisitions in that run:
//                                   whether a long wait was spent asleep in the lock or
//                                   runnable, waiting for a CPU
//
// Three runs: every row's samples are three values, one per run, the subjects interleaved
// within each run in rotating order. Every sample's subject is a fresh object at a fresh
// address (SubjectPlacement: a lock's speed on a VM depends on where its line is). A
// throughput run's value is the median of three samples of 20 ms; a fairness run is one
// 500 ms sample. The report's median is then the median of the run medians, and its min/max
// the spread between runs, so a single noisy run cannot decide a row. --quick makes one run
// of one 2 ms sample (20 ms for fairness): it only proves the rows run. The full set adds
// about 2 minutes to the report on 2 cores.
//
// Data layout, like for like (the peers a toolkit row should be compared with):
//   - value beside the lock, one allocation (the counter on the lock word's cache line):
//     Sync.LockedValue<Int>, Synchronization.Mutex<Int>, "pthread_mutex (counter beside)"
//     (a pthread_mutex_t and the counter in one 64-byte block, the layout of SwiftNIO's
//     NIOLockedValueBox).
//   - a lock object and a counter in a separate 64-byte block: Sync.Lock, pthread_mutex,
//     Foundation.NSLock, "Synchronization.Mutex<Void> (counter apart)" (a Mutex guarding
//     nothing beside the counter: how a Mutex guards state it does not hold);
//     Sync.SpinLock, pthread_spinlock; Sync.RecursiveLock, Foundation.NSRecursiveLock;
//     Sync.ReadWriteLock (write), pthread_rwlock (write, writer-preferring). Linux has no
//     os_unfair_lock.
// The subjects with a lock-row twin are the lock rows' own (LockBenchmarks.swift).

import CBenchmarkShims
import Foundation
@_spi(Benchmarking) import Sync
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

// MARK: - Subjects

/// No lock at all: one atomic fetch-add on a counter of its own line. The fairness rows'
/// control: its longest "wait" is what the scheduler alone makes a thread of that loop wait
/// (a thread preempted anywhere in the loop waits for its turn on a core), the floor under
/// every lock's row at the same thread count.
private final class NoLockContention: CountingLock, Sendable {
  let counter = Synchronization.Atomic<Int>(0)
  func increment() { counter.wrappingAdd(1, ordering: .relaxed) }
  var count: Int { counter.load(ordering: .relaxed) }
}

/// A lock object of the toolkit or Foundation, taken the way its rows take it (the
/// read-write lock for writing); the calls are the type's own, so once `LockObjectContention`
/// is specialized for it each row runs the code it always ran.
protocol ContentionLockObject: AnyObject, Sendable {
  func acquire()
  func release()
}

extension Sync.Lock: ContentionLockObject {
  @inline(__always) func acquire() { lock() }
  @inline(__always) func release() { unlock() }
}

extension NSLock: ContentionLockObject {
  @inline(__always) func acquire() { lock() }
  @inline(__always) func release() { unlock() }
}

extension Sync.SpinLock: ContentionLockObject {
  @inline(__always) func acquire() { lock() }
  @inline(__always) func release() { unlock() }
}

extension Sync.RecursiveLock: ContentionLockObject {
  @inline(__always) func acquire() { lock() }
  @inline(__always) func release() { unlock() }
}

extension NSRecursiveLock: ContentionLockObject {
  @inline(__always) func acquire() { lock() }
  @inline(__always) func release() { unlock() }
}

extension Sync.ReadWriteLock: ContentionLockObject {
  @inline(__always) func acquire() { writeLock() }
  @inline(__always) func release() { unlock() }
}

/// A lock object and a counter on a 64-byte line of its own.
private final class LockObjectContention<Lock: ContentionLockObject>: CountingLock, @unchecked Sendable {
  let lock: Lock
  let counter = makeCounter()
  init(_ lock: Lock) { self.lock = lock }
  func increment() {
    lock.acquire()
    counter.pointee &+= 1
    lock.release()
  }
  var count: Int { counter.pointee }
}

/// A pthread lock type as the contention rows use it: its C type, how it is set up, taken
/// (for writing, for the read-write lock) and released.
private protocol PthreadContentionPrimitive {
  associatedtype Storage
  static func initialize(_ primitive: UnsafeMutablePointer<Storage>)
  static func acquire(_ primitive: UnsafeMutablePointer<Storage>)
  static func release(_ primitive: UnsafeMutablePointer<Storage>)
}

private enum PthreadMutexPrimitive: PthreadContentionPrimitive {
  static func initialize(_ primitive: UnsafeMutablePointer<pthread_mutex_t>) {
    checkPthread(pthread_mutex_init(primitive, nil), "pthread_mutex_init")
  }
  @inline(__always) static func acquire(_ primitive: UnsafeMutablePointer<pthread_mutex_t>) {
    pthread_mutex_lock(primitive)
  }
  @inline(__always) static func release(_ primitive: UnsafeMutablePointer<pthread_mutex_t>) {
    pthread_mutex_unlock(primitive)
  }
}

private enum PthreadSpinPrimitive: PthreadContentionPrimitive {
  static func initialize(_ primitive: UnsafeMutablePointer<pthread_spinlock_t>) {
    checkPthread(pthread_spin_init(primitive, Int32(PTHREAD_PROCESS_PRIVATE)), "pthread_spin_init")
  }
  @inline(__always) static func acquire(_ primitive: UnsafeMutablePointer<pthread_spinlock_t>) {
    pthread_spin_lock(primitive)
  }
  @inline(__always) static func release(_ primitive: UnsafeMutablePointer<pthread_spinlock_t>) {
    pthread_spin_unlock(primitive)
  }
}

/// Writer-preferring, taken for writing.
private enum PthreadRWLockPrimitive: PthreadContentionPrimitive {
  static func initialize(_ primitive: UnsafeMutablePointer<pthread_rwlock_t>) {
    checkPthread(bench_rwlock_init_prefer_writer(primitive), "pthread_rwlock_init")
  }
  @inline(__always) static func acquire(_ primitive: UnsafeMutablePointer<pthread_rwlock_t>) {
    pthread_rwlock_wrlock(primitive)
  }
  @inline(__always) static func release(_ primitive: UnsafeMutablePointer<pthread_rwlock_t>) {
    pthread_rwlock_unlock(primitive)
  }
}

/// A pthread lock on a 64-byte block of its own and a counter on another.
private final class PthreadContention<Primitive: PthreadContentionPrimitive>: CountingLock, @unchecked Sendable {
  let primitive = makeLine(of: Primitive.Storage.self)
  let counter = makeCounter()
  init() { Primitive.initialize(primitive) }
  func increment() {
    Primitive.acquire(primitive)
    counter.pointee &+= 1
    Primitive.release(primitive)
  }
  var count: Int { counter.pointee }
}

// MARK: - Scenarios

/// What one run of a scenario does.
private enum Scenario {
  /// Everyone back-to-back, with `work` rounds of private work between acquisitions.
  case scaling(work: Int)
  /// Thread 0 back-to-back, the others with private work.
  case asymmetric
  /// Bursts of 64 acquisitions, 200 us idle between.
  case bursty
  /// Two extra CPU-bound threads that never take the lock.
  case backgroundLoad
}

/// Per-thread slots on lines of their own (8 words each): [0] acquisitions, [1] timed
/// nanoseconds (bursts) or the longest wait, then a wait histogram for fairness runs.
private final class ThreadSlots: @unchecked Sendable {
  static let stride = 8
  let words: UnsafeMutablePointer<UInt64>
  let threads: Int
  init(threads: Int) {
    self.threads = threads
    let raw = UnsafeMutableRawPointer.allocate(byteCount: threads * Self.stride * 8, alignment: 64)
    words = raw.initializeMemory(as: UInt64.self, repeating: 0, count: threads * Self.stride)
  }
  deinit { words.deallocate() }
  func slot(_ index: Int) -> UnsafeMutablePointer<UInt64> { words + index * Self.stride }
}

/// Log-linear histogram of wait times: 8 buckets per power of two (12.5% resolution),
/// exact below 8 ns. One per thread, merged after the run.
private final class WaitHistogram: @unchecked Sendable {
  static let bucketCount = 512
  let counts: UnsafeMutablePointer<UInt64>
  init() {
    counts = .allocate(capacity: Self.bucketCount)
    counts.initialize(repeating: 0, count: Self.bucketCount)
  }
  deinit { counts.deallocate() }

  @inline(__always)
  static func index(_ nanoseconds: UInt64) -> Int {
    if nanoseconds < 8 { return Int(nanoseconds) }
    let top = 63 - nanoseconds.leadingZeroBitCount
    return (top - 2) * 8 + Int((nanoseconds >> UInt64(top - 3)) & 7)
  }

  /// The middle of bucket `index`.
  static func value(_ index: Int) -> Double {
    if index < 8 { return Double(index) }
    let top = index / 8 + 2
    let low = Double(8 + index % 8) * Double(UInt64(1) << UInt64(top - 3))
    return low + Double(UInt64(1) << UInt64(top - 3)) / 2
  }

  @inline(__always)
  func add(_ nanoseconds: UInt64) { counts[Self.index(nanoseconds)] += 1 }

  /// The `quantile` (0...1) of the merged histograms.
  static func quantile(_ quantile: Double, of histograms: [WaitHistogram]) -> Double {
    var total: UInt64 = 0
    for histogram in histograms { for index in 0..<bucketCount { total += histogram.counts[index] } }
    if total == 0 { return .nan }
    let target = UInt64((Double(total) * quantile).rounded(.up))
    var seen: UInt64 = 0
    for index in 0..<bucketCount {
      for histogram in histograms { seen += histogram.counts[index] }
      if seen >= Swift.max(1, target) { return value(index) }
    }
    return value(bucketCount - 1)
  }
}

/// Work outside the lock: `rounds` dependent xor-shift-multiply steps (about 1.5 ns each).
@inline(__always)
private func privateWork(_ seed: UInt64, rounds: Int) -> UInt64 {
  var value = seed
  for _ in 0..<rounds { value = (value ^ (value >> 29)) &* 0xbf58_476d_1ce4_e5b9 }
  return value
}

/// Sleeps `nanoseconds` (a benchmark's idle gap, not synchronization).
private func idle(nanoseconds: Int) {
  var request = timespec(tv_sec: 0, tv_nsec: nanoseconds)
  var remaining = timespec()
  while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

/// One throughput sample of `scenario` for `duration` nanoseconds: ns per acquisition (per
/// producer acquisition for `.asymmetric`). Checks no increment was lost.
private func throughputSample<S: CountingLock>(
  _ subject: S, threads: Int, scenario: Scenario, duration: UInt64
) -> Double {
  let slots = ThreadSlots(threads: threads)
  let before = subject.count
  let stop = AtomicInteger<Int>(0)
  var spinners: [pthread_t] = []
  if case .backgroundLoad = scenario {
    for index in 0..<2 {
      spinners.append(
        BenchThreads.start {
          var value = UInt64(index + 1)
          while stop.load(ordering: .relaxed) == 0 { value = privateWork(value, rounds: 256) }
          opaqueSink(value)
        })
    }
  }
  let elapsed = BenchThreads.timedRun(count: threads) { index in
    let slot = slots.slot(index)
    let deadline = Harness.now() + duration
    var local = UInt64(index + 1)
    var done: UInt64 = 0
    var timed: UInt64 = 0
    switch scenario {
    case .scaling(let work):
      while true {
        for _ in 0..<32 {
          subject.increment()
          if work > 0 { local = privateWork(local, rounds: work) }
        }
        done += 32
        if Harness.now() >= deadline { break }
      }
    case .asymmetric:
      while true {
        for _ in 0..<32 {
          subject.increment()
          if index != 0 { local = privateWork(local, rounds: 32) }
        }
        done += 32
        if Harness.now() >= deadline { break }
      }
    case .bursty:
      while true {
        let start = Harness.now()
        for _ in 0..<64 { subject.increment() }
        let end = Harness.now()
        timed += end - start
        done += 64
        if end >= deadline { break }
        idle(nanoseconds: 200_000)
      }
    case .backgroundLoad:
      while true {
        for _ in 0..<32 { subject.increment() }
        done += 32
        if Harness.now() >= deadline { break }
      }
    }
    slot[0] = done
    slot[1] = timed
    opaqueSink(local)
  }
  stop.store(1, ordering: .relaxed)
  for spinner in spinners { BenchThreads.join(spinner) }
  var total: UInt64 = 0
  var timedTotal: UInt64 = 0
  for index in 0..<threads {
    total += slots.slot(index)[0]
    timedTotal += slots.slot(index)[1]
  }
  if subject.count &- before != Int(total) {
    fatalError("cost-tables: \(S.self) lost increments under contention")
  }
  switch scenario {
  case .asymmetric: return Double(elapsed) / Double(Swift.max(1, slots.slot(0)[0]))
  case .bursty: return Double(timedTotal) / Double(Swift.max(1, total))
  default: return Double(elapsed) / Double(Swift.max(1, total))
  }
}

/// The figures of one fairness run.
private struct FairnessFigures {
  var maxWait: Double
  var p99Wait: Double
  var p50Wait: Double
  var giniPercent: Double
  var nanosecondsPerAcquisition: Double
  var sleepsPerMillion: Double
  var preemptionsPerMillion: Double
}

/// One fairness run: `threads` threads hammer for `duration`; every acquisition is timed.
private func fairnessRun<S: CountingLock>(_ subject: S, threads: Int, duration: UInt64) -> FairnessFigures {
  let slots = ThreadSlots(threads: threads)
  let histograms = (0..<threads).map { _ in WaitHistogram() }
  let before = subject.count
  let elapsed = BenchThreads.timedRun(count: threads) { index in
    let slot = slots.slot(index)
    let histogram = histograms[index]
    let deadline = Harness.now() + duration
    var done: UInt64 = 0
    var longest: UInt64 = 0
    let usageBefore = threadUsage()
    var now = Harness.now()
    while now < deadline {
      subject.increment()
      let after = Harness.now()
      let wait = after - now
      histogram.add(wait)
      if wait > longest { longest = wait }
      done += 1
      now = after
    }
    let usageAfter = threadUsage()
    slot[0] = done
    slot[1] = longest
    slot[2] = UInt64(usageAfter.sleeps - usageBefore.sleeps)
    slot[3] = UInt64(usageAfter.preemptions - usageBefore.preemptions)
  }
  var counts: [Double] = []
  var longest: UInt64 = 0
  var sleeps: UInt64 = 0
  var preemptions: UInt64 = 0
  for index in 0..<threads {
    counts.append(Double(slots.slot(index)[0]))
    longest = Swift.max(longest, slots.slot(index)[1])
    sleeps += slots.slot(index)[2]
    preemptions += slots.slot(index)[3]
  }
  let total = counts.reduce(0, +)
  if subject.count &- before != Int(total) {
    fatalError("cost-tables: \(S.self) lost increments in the fairness run")
  }
  return FairnessFigures(
    maxWait: Double(longest),
    p99Wait: WaitHistogram.quantile(0.99, of: histograms),
    p50Wait: WaitHistogram.quantile(0.5, of: histograms),
    giniPercent: 100 * gini(counts),
    nanosecondsPerAcquisition: Double(elapsed) / Swift.max(1, total),
    sleepsPerMillion: 1_000_000 * Double(sleeps) / Swift.max(1, total),
    preemptionsPerMillion: 1_000_000 * Double(preemptions) / Swift.max(1, total))
}

/// The Gini coefficient of `values` (0 = all equal, 1 = one has everything).
private func gini(_ values: [Double]) -> Double {
  let total = values.reduce(0, +)
  guard values.count > 1, total > 0 else { return 0 }
  var differences = 0.0
  for a in values { for b in values { differences += abs(a - b) } }
  return differences / (2 * Double(values.count) * total)
}

/// A subject of the contention rows: its name and role, and its runs, specialized.
private struct ContentionEntry: Sendable {
  let subject: Subject
  let throughput: @Sendable (_ threads: Int, _ scenario: Scenario, _ duration: UInt64) -> Double
  let fairness: @Sendable (_ threads: Int, _ duration: UInt64) -> FairnessFigures

  /// `handOverBound: false` runs the subject with the toolkit's bounded wait switched off
  /// (process-wide, for that run only: the subjects run one at a time).
  init<S: CountingLock>(
    _ subject: Subject, handOverBound: Bool = true, _ make: @escaping @Sendable () -> S
  ) {
    self.subject = subject
    throughput = { threads, scenario, duration in
      throughputSample(SubjectPlacement.place(make), threads: threads, scenario: scenario, duration: duration)
    }
    fairness = { threads, duration in
      LockBenchmarkSwitches.handOverBound = handOverBound
      defer { LockBenchmarkSwitches.handOverBound = true }
      return fairnessRun(SubjectPlacement.place(make), threads: threads, duration: duration)
    }
  }
}

/// The fairness rows' subjects: the contention subjects and two references compared with
/// nothing: `Sync.Lock` without the bound (what the bound is judged against) and the same loop
/// with no lock (what the scheduler alone makes a thread wait).
private let fairnessEntries: [ContentionEntry] =
  contentionEntries + [
    ContentionEntry(.peer("Sync.Lock, hand-over bound off"), handOverBound: false) {
      LockObjectContention(Sync.Lock(checked: false))
    },
    ContentionEntry(.peer("no lock (atomic add)"), NoLockContention.init),
  ]

private let contentionEntries: [ContentionEntry] = [
  ContentionEntry(.toolkit("Sync.LockedValue<Int>"), SyncLockedValueSubject.init),
  ContentionEntry(.peer("Synchronization.Mutex<Int>"), SynchronizationMutexSubject.init),
  ContentionEntry(.peer("pthread_mutex (counter beside)")) { PthreadMutexSubject(counterBeside: true) },
  ContentionEntry(.toolkit("Sync.Lock")) { LockObjectContention(Sync.Lock(checked: false)) },
  ContentionEntry(.peer("pthread_mutex"), PthreadContention<PthreadMutexPrimitive>.init),
  ContentionEntry(.peer("Foundation.NSLock")) { LockObjectContention(NSLock()) },
  ContentionEntry(.peer("Synchronization.Mutex<Void> (counter apart)"), SynchronizationMutexApartSubject.init),
  ContentionEntry(.toolkit("Sync.SpinLock")) { LockObjectContention(Sync.SpinLock(checked: false)) },
  ContentionEntry(.peer("pthread_spinlock"), PthreadContention<PthreadSpinPrimitive>.init),
  ContentionEntry(.toolkit("Sync.RecursiveLock")) { LockObjectContention(Sync.RecursiveLock()) },
  ContentionEntry(.peer("Foundation.NSRecursiveLock")) { LockObjectContention(NSRecursiveLock()) },
  ContentionEntry(.toolkit("Sync.ReadWriteLock (write)")) { LockObjectContention(Sync.ReadWriteLock()) },
  ContentionEntry(.peer("pthread_rwlock (write)"), PthreadContention<PthreadRWLockPrimitive>.init),
]

/// The like-for-like peers of each toolkit subject in the `contention.*` and `fairness.*`
/// rows (the families in this file's header): the same kind of lock with the same data
/// layout. Those rows' ratios are taken against the best of these, not against every peer
/// (a spinlock that never sleeps is no peer of a mutex).
let contentionLikeForLike: [String: [String]] = [
  "Sync.LockedValue<Int>": ["Synchronization.Mutex<Int>", "pthread_mutex (counter beside)"],
  "Sync.Lock": ["pthread_mutex", "Foundation.NSLock", "Synchronization.Mutex<Void> (counter apart)"],
  "Sync.SpinLock": ["pthread_spinlock"],
  "Sync.RecursiveLock": ["Foundation.NSRecursiveLock"],
  "Sync.ReadWriteLock (write)": ["pthread_rwlock (write)"],
]

/// The like-for-like peers in the `mutex.contended-N` and `mutex.contended-with-work-N` rows
/// (the layouts in LockBenchmarks.swift's header): `Sync.Lock` against the mutexes with the
/// counter apart, `Sync.LockedValue` against those with the counter beside the lock word.
let mutexContendedLikeForLike: [String: [String]] = [
  "Sync.Lock": ["pthread", "Foundation.NSLock", "Synchronization.Mutex<Void> (counter apart)"],
  "Sync.LockedValue": ["Synchronization.Mutex", "pthread (counter beside)"],
]

/// The peers a toolkit subject of row `id` is compared with: its like-for-like peers in the
/// rows that compare like for like (`comparesLikeForLike`), nil (every peer) elsewhere.
func likeForLikePeerNames(id: String, subject: String) -> [String]? {
  if id.hasPrefix("mutex.contended-") { return mutexContendedLikeForLike[subject] }
  return comparesLikeForLike(id) ? contentionLikeForLike[subject] : nil
}

/// Whether `id` is one of the rows whose toolkit subjects are compared with like-for-like
/// peers only (`likeForLikePeerNames`).
func comparesLikeForLike(_ id: String) -> Bool {
  id.hasPrefix("contention.") || (id.hasPrefix("fairness.") && !id.hasPrefix("fairness.rw-"))
    || id.hasPrefix("mutex.contended-")
}

// MARK: - Registration

/// How many runs every contention row is measured in (one with --quick, which only proves
/// the rows still run).
private func contentionRuns(_ harness: Harness) -> Int { harness.quick ? 1 : 3 }

/// The median of `values`.
private func medianOf(_ values: [Double]) -> Double {
  let sorted = values.sorted()
  if sorted.isEmpty { return .nan }
  return sorted.count % 2 == 1
    ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// Measures one throughput row: `contentionRuns` runs, each the median of three samples,
/// subjects interleaved in rotating order; records the run medians as the row's samples.
private func measureThroughputRow(_ harness: Harness, id: String, group: String, threads: Int, scenario: Scenario) {
  guard harness.wants(id) else { return }
  let began = Harness.now()
  // Ten times longer for the one-producer and bursts rows (see the file's header).
  let scale: UInt64
  switch scenario {
  case .asymmetric, .bursty: scale = 10
  default: scale = 1
  }
  let duration: UInt64 = (harness.quick ? 2_000_000 : 20_000_000) * scale
  var runs = [[Double]](repeating: [], count: contentionEntries.count)
  let samplesPerRun = harness.quick ? 1 : 3
  for run in 0..<contentionRuns(harness) {
    for offset in 0..<contentionEntries.count {
      let index = (run + offset) % contentionEntries.count
      let samples = (0..<samplesPerRun).map { _ in contentionEntries[index].throughput(threads, scenario, duration) }
      runs[index].append(medianOf(samples))
    }
  }
  SubjectPlacement.releaseRow()
  for (index, entry) in contentionEntries.enumerated() {
    harness.record(id: id, subject: entry.subject, group: group, nanoseconds: runs[index])
  }
  harness.progress(id, since: began)
}

/// Registers the contention scenarios and the fairness rows.
func registerContentionBenchmarks(_ harness: Harness) {
  let quick = harness.quick
  let scalingCounts = quick ? [1, 2, 4] : [1, 2, 4, 8, 16, 32, 64]
  for threads in scalingCounts {
    measureThroughputRow(
      harness, id: "contention.scaling-\(threads)", group: "Contention scaling", threads: threads,
      scenario: .scaling(work: 0))
  }
  for threads in scalingCounts {
    measureThroughputRow(
      harness, id: "contention.scaling-with-work-\(threads)", group: "Contention scaling, private work between",
      threads: threads, scenario: .scaling(work: 32))
  }
  let otherCounts = quick ? [2] : [2, 8, 32]
  for consumers in otherCounts {
    measureThroughputRow(
      harness, id: "contention.asymmetric-\(consumers)", group: "Contention: one producer, N consumers",
      threads: consumers + 1, scenario: .asymmetric)
  }
  for threads in otherCounts {
    measureThroughputRow(
      harness, id: "contention.bursty-\(threads)", group: "Contention: bursts with idle gaps", threads: threads,
      scenario: .bursty)
  }
  for threads in otherCounts {
    measureThroughputRow(
      harness, id: "contention.background-load-\(threads)", group: "Contention beside 2 CPU-bound threads",
      threads: threads, scenario: .backgroundLoad)
  }

  let fairnessCounts = quick ? [4] : [2, 4, 16, 64]
  let duration: UInt64 = quick ? 20_000_000 : 500_000_000
  for threads in fairnessCounts where harness.wantsAny(fairnessIds(threads)) {
    let began = Harness.now()
    var figures = [[FairnessFigures]](repeating: [], count: fairnessEntries.count)
    for run in 0..<contentionRuns(harness) {
      for offset in 0..<fairnessEntries.count {
        let index = (run + offset) % fairnessEntries.count
        figures[index].append(fairnessEntries[index].fairness(threads, duration))
      }
    }
    SubjectPlacement.releaseRow()
    let group = "Fairness (\(threads) threads hammering)"
    for (index, entry) in fairnessEntries.enumerated() {
      let runs = figures[index]
      harness.record(
        id: "fairness.max-wait-\(threads)", subject: entry.subject, group: group, nanoseconds: runs.map(\.maxWait))
      harness.record(
        id: "fairness.p99-wait-\(threads)", subject: entry.subject, group: group, nanoseconds: runs.map(\.p99Wait))
      harness.record(
        id: "fairness.p50-wait-\(threads)", subject: entry.subject, group: group, nanoseconds: runs.map(\.p50Wait))
      harness.record(
        id: "fairness.gini-\(threads)", subject: entry.subject, group: group, values: runs.map(\.giniPercent),
        unit: "% Gini")
      harness.record(
        id: "fairness.throughput-\(threads)", subject: entry.subject, group: group,
        nanoseconds: runs.map(\.nanosecondsPerAcquisition))
      harness.record(
        id: "fairness.sleeps-\(threads)", subject: entry.subject, group: group, values: runs.map(\.sleepsPerMillion),
        unit: "switches/1M")
      harness.record(
        id: "fairness.preemptions-\(threads)", subject: entry.subject, group: group,
        values: runs.map(\.preemptionsPerMillion), unit: "switches/1M")
    }
    harness.progress("fairness.*-\(threads)", since: began)
  }
}

/// The ids one fairness thread count records.
private func fairnessIds(_ threads: Int) -> [String] {
  ["max-wait", "p99-wait", "p50-wait", "gini", "throughput", "sleeps", "preemptions"].map {
    "fairness.\($0)-\(threads)"
  }
}

extension Harness {
  /// Whether any of `ids` passes the filter.
  fileprivate func wantsAny(_ ids: [String]) -> Bool { ids.contains { wants($0) } }
}
