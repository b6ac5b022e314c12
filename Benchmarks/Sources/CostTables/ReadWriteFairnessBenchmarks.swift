// Read-write locks under mixed contention: readers and writers hammering one lock, each
// acquisition timed, to show the writers' bounded wait and what it leaves the readers.
//
//   fairness.rw-mixed-writer-max-wait-N  N threads for 500 ms (20 ms with --quick), one in
//                                        four a writer (at least one), the rest readers; the
//                                        longest time one *write* acquisition took (lock +
//                                        bump + unlock, timed around the call)
//   fairness.rw-mixed-reader-max-wait-N  the same run: the longest *read* acquisition
//   fairness.rw-mixed-throughput-N       the same run: ns per acquisition, reads and writes
//
// Three runs per report (one with --quick), the subjects interleaved in rotating order; a
// row's samples are the runs' values. Like for like: a lock object and a counter in a separate
// 64-byte block, Sync.ReadWriteLock beside pthread_rwlock of the writer-preferring kind
// (`PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`), the kind Sync.ReadWriteLock replaces.

import CBenchmarkShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// A read-write lock guarding one counter: writers bump it, readers read it.
private protocol ReadWriteSubject: AnyObject, Sendable {
  func write()
  func read() -> Int
  var count: Int { get }
}

private final class SyncReadWriteMixed: ReadWriteSubject, @unchecked Sendable {
  let lock = Sync.ReadWriteLock()
  let counter = makeCounter()
  func write() {
    lock.writeLock()
    counter.pointee &+= 1
    lock.unlock()
  }
  func read() -> Int {
    lock.readLock()
    let value = counter.pointee
    lock.unlock()
    return value
  }
  var count: Int { counter.pointee }
}

private final class PthreadReadWriteMixed: ReadWriteSubject, @unchecked Sendable {
  let rwlock = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64).bindMemory(
    to: pthread_rwlock_t.self, capacity: 1)
  let counter = makeCounter()
  init() {
    let result = bench_rwlock_init_prefer_writer(rwlock)
    if result != 0 { fatalError("cost-tables: pthread_rwlock_init failed with errno \(result)") }
  }
  func write() {
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

private struct MixedFigures {
  var writerMaxWait: Double
  var readerMaxWait: Double
  var nanosecondsPerAcquisition: Double
}

/// Per-thread results on lines of their own: [0] acquisitions, [1] longest wait, [2] writes.
private final class MixedSlots: @unchecked Sendable {
  let words: UnsafeMutablePointer<UInt64>
  init(threads: Int) {
    words = .allocate(capacity: threads * 8)
    words.initialize(repeating: 0, count: threads * 8)
  }
  deinit { words.deallocate() }
  func slot(_ index: Int) -> UnsafeMutablePointer<UInt64> { words + index * 8 }
}

/// Thread `index` of `threads` writes if it is one of the first quarter (at least one).
private func isWriter(_ index: Int, of threads: Int) -> Bool { index < Swift.max(1, threads / 4) }

private func mixedRun(_ subject: some ReadWriteSubject, threads: Int, duration: UInt64) -> MixedFigures {
  let slots = MixedSlots(threads: threads)
  let before = subject.count
  let elapsed = BenchThreads.timedRun(count: threads) { index in
    let slot = slots.slot(index)
    let writes = isWriter(index, of: threads)
    let deadline = Harness.now() + duration
    var done: UInt64 = 0
    var longest: UInt64 = 0
    var seen = 0
    var now = Harness.now()
    while now < deadline {
      if writes { subject.write() } else { seen &+= subject.read() }
      let after = Harness.now()
      longest = Swift.max(longest, after - now)
      done += 1
      now = after
    }
    opaqueSink(seen)
    slot[0] = done
    slot[1] = longest
  }
  var total: UInt64 = 0
  var writes: UInt64 = 0
  var writerLongest: UInt64 = 0
  var readerLongest: UInt64 = 0
  for index in 0..<threads {
    let slot = slots.slot(index)
    total += slot[0]
    if isWriter(index, of: threads) {
      writes += slot[0]
      writerLongest = Swift.max(writerLongest, slot[1])
    } else {
      readerLongest = Swift.max(readerLongest, slot[1])
    }
  }
  if subject.count &- before != Int(writes) {
    fatalError("cost-tables: \(type(of: subject)) lost increments in the mixed read-write run")
  }
  return MixedFigures(
    writerMaxWait: Double(writerLongest), readerMaxWait: Double(readerLongest),
    nanosecondsPerAcquisition: Double(elapsed) / Double(Swift.max(1, total)))
}

private struct MixedEntry: Sendable {
  let subject: Subject
  let run: @Sendable (_ threads: Int, _ duration: UInt64) -> MixedFigures
}

private let mixedEntries: [MixedEntry] = [
  MixedEntry(subject: .toolkit("Sync.ReadWriteLock")) { mixedRun(SyncReadWriteMixed(), threads: $0, duration: $1) },
  MixedEntry(subject: .peer("pthread_rwlock (prefer writer)")) {
    mixedRun(PthreadReadWriteMixed(), threads: $0, duration: $1)
  },
]

/// Registers the mixed read-write fairness rows.
func registerReadWriteFairnessBenchmarks(_ harness: Harness) {
  let counts = harness.quick ? [4] : [4, 16]
  let duration: UInt64 = harness.quick ? 20_000_000 : 500_000_000
  let runs = harness.quick ? 1 : 3
  for threads in counts {
    let ids = ["writer-max-wait", "reader-max-wait", "throughput"].map { "fairness.rw-mixed-\($0)-\(threads)" }
    guard ids.contains(where: { harness.wants($0) }) else { continue }
    let began = Harness.now()
    var figures = [[MixedFigures]](repeating: [], count: mixedEntries.count)
    for run in 0..<runs {
      for offset in 0..<mixedEntries.count {
        let index = (run + offset) % mixedEntries.count
        figures[index].append(mixedEntries[index].run(threads, duration))
      }
    }
    let group = "Fairness, readers and writers (\(threads) threads, one in four writing)"
    for (index, entry) in mixedEntries.enumerated() {
      harness.record(id: ids[0], subject: entry.subject, group: group, nanoseconds: figures[index].map(\.writerMaxWait))
      harness.record(id: ids[1], subject: entry.subject, group: group, nanoseconds: figures[index].map(\.readerMaxWait))
      harness.record(
        id: ids[2], subject: entry.subject, group: group, nanoseconds: figures[index].map(\.nanosecondsPerAcquisition))
    }
    harness.progress("fairness.rw-mixed-*-\(threads)", since: began)
  }
}
