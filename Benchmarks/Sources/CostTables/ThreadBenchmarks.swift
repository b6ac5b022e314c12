// Table 2-1, thread creation costs: the toolkit's threads beside raw pthread and Foundation's
// Thread, measured in the same run, plus stack and kernel memory per thread.
//
// Rows (times in ns; rows whose id ends in "-bytes" hold bytes, not ns):
//   thread.create-to-start       one sample per thread: from just before the create call
//                                until the first statement of the entry routine (the guide's
//                                definition); median over all threads
//   thread.create-to-start.mean  the same, one sample per batch of threads = the batch mean
//   thread.create-join           create + run an empty body + join (Foundation has no join:
//                                start + wait for the body's signal)
//   thread.current              the calling thread's object (beside Foundation and a raw key)
//   thread.exit-request-check   reading the exit-request flag (Listing 2-3's loop test)
//   thread.dictionary-read      one thread-dictionary read through the current thread
//   thread.stack-reserved-bytes  the thread's stack size (pthread_getattr_np) and, as
//                                stack-resident-bytes, its resident part (mincore), for the 512 KiB default and 2 MiB
//   thread.stack-resident-bytes  that mapping's Rss after the body started (pages touched)
//   thread.kernel-stack-bytes    per parked thread: /proc/meminfo KernelStack delta / N
//   thread.kernel-slab-bytes     per parked thread: /proc/meminfo SUnreclaim delta / N (the
//                                task_struct and friends; noisy, other activity counts too)
//   thread.kernel-objects-bytes  the same objects by their slab sizes (/proc/slabinfo, root)
//   thread.process-resident-bytes per parked thread: VmRSS delta / N (user side: stack pages
//                                touched, TLS, the toolkit's objects)
// All subjects use a 512 KiB stack except where a row says otherwise. glibc caches freed
// stacks, so create loops reuse mappings (as real programs do).

import CBenchmarkShims
import Dispatch
import Foundation
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

func registerThreadBenchmarks(_ harness: Harness) {
  let group = "Table 2-1"
  let stackSize = ThreadConfiguration.defaultStackSize

  // Make the process multithreaded before measuring anything: glibc skips the atomic
  // instructions of its locks while a process has one thread, which no real user sees.
  _ = try? Threads.Thread.spawn {}.join()

  // MARK: create-to-start, interleaved subject by subject

  if harness.wants("thread.create-to-start") {
    let batches = harness.quick ? 3 : 21
    let perBatch = harness.quick ? 5 : 50
    var samples: [Subject: [Double]] = [:]
    var means: [Subject: [Double]] = [:]
    let subjects: [(Subject, () -> Double)] = [
      (.toolkit("Threads.Thread"), { toolkitCreateToStart() }),
      (.peer("pthread"), { rawPthreadCreateToStart(stackSize: stackSize) }),
      (.peer("Foundation.Thread"), { foundationCreateToStart(stackSize: stackSize) }),
    ]
    for batchIndex in 0..<batches {
      var batch: [Subject: [Double]] = [:]
      for index in 0..<perBatch {
        // Rotate the order so no subject always follows the same one.
        for offset in 0..<subjects.count {
          let (subject, sample) = subjects[(batchIndex + index + offset) % subjects.count]
          batch[subject, default: []].append(sample())
        }
      }
      for (subject, values) in batch {
        samples[subject, default: []] += values
        means[subject, default: []].append(values.reduce(0, +) / Double(values.count))
      }
    }
    for (subject, _) in subjects {
      harness.record(id: "thread.create-to-start", subject: subject, group: group, nanoseconds: samples[subject]!)
      harness.record(id: "thread.create-to-start.mean", subject: subject, group: group, nanoseconds: means[subject]!)
    }
  }

  // MARK: create + join, interleaved: one sample of each subject in turn

  if harness.wants("thread.create-join") {
    let perSample = harness.quick ? 5 : 50
    let sampleCount = harness.quick ? 3 : 21
    let subjects: [(Subject, () -> Void)] = [
      (.toolkit("Threads.Thread"), { try! Threads.Thread.spawn {}.join() }),
      (.peer("pthread"), { rawPthreadCreateJoin(stackSize: stackSize) }),
      (.peer("Foundation.Thread"), { foundationStartAndWait(stackSize: stackSize) }),
    ]
    var samples: [Subject: [Double]] = [:]
    for round in 0..<(sampleCount + 1) {  // round 0 warms up
      for offset in 0..<subjects.count {
        let (subject, operation) = subjects[(round + offset) % subjects.count]
        let start = Harness.now()
        for _ in 0..<perSample { operation() }
        let elapsed = Double(Harness.now() - start) / Double(perSample)
        if round > 0 { samples[subject, default: []].append(elapsed) }
      }
    }
    for (subject, _) in subjects {
      harness.record(id: "thread.create-join", subject: subject, group: group, nanoseconds: samples[subject]!)
    }
  }

  // MARK: per-thread state (beyond the guide)

  let lookups = 1_000_000
  harness.measure(id: "thread.current", subject: .toolkit("Threads.Thread"), group: "Threads", operations: lookups) {
    count in
    for _ in 0..<count { blackHole(Threads.Thread.current) }
  }
  harness.measure(id: "thread.current", subject: .peer("Foundation.Thread"), group: "Threads", operations: lookups) {
    count in
    for _ in 0..<count { blackHole(Foundation.Thread.current) }
  }
  harness.measure(
    id: "thread.current", subject: .peer("pthread (pthread_getspecific)"), group: "Threads", operations: lookups
  ) { count in
    let key = rawKey
    for _ in 0..<count { blackHole(pthread_getspecific(key)) }
  }
  harness.measure(
    id: "thread.exit-request-check", subject: .toolkit("Threads.Thread"), group: "Threads", operations: lookups
  ) { count in
    let thread = Threads.Thread.current
    for _ in 0..<count { blackHole(thread.isExitRequested) }
  }
  Threads.Thread.current.threadDictionary["bench"] = 1
  harness.measure(
    id: "thread.dictionary-read", subject: .toolkit("Threads.Thread"), group: "Threads", operations: lookups / 10
  ) { count in
    for _ in 0..<count { blackHole(Threads.Thread.current.threadDictionary["bench"]) }
  }
  Foundation.Thread.current.threadDictionary["bench"] = 1
  harness.measure(
    id: "thread.dictionary-read", subject: .peer("Foundation.Thread"), group: "Threads", operations: lookups / 10
  ) { count in
    for _ in 0..<count { blackHole(Foundation.Thread.current.threadDictionary["bench"]) }
  }

  // MARK: memory

  if harness.wants("thread.stack") {
    // A configured size is a minimum: glibc hands a new thread a cached stack of a finished
    // thread when it is at least the size asked for and at most four times it, so a 2 MiB
    // request in a process that has run 8 MiB threads (Foundation's) may get 8 MiB.
    for (label, size) in [("512 KiB default", stackSize), ("2 MiB configured", 2 * 1024 * 1024)] {
      var configuration = ThreadConfiguration()
      configuration.stackSize = size
      let sizes = (0..<(harness.quick ? 1 : 5)).map { _ in
        try! Threads.Thread.spawn(configuration: configuration) { currentStackMapping() }.join()
      }
      let subject = Subject.toolkit("Threads.Thread (\(label))")
      harness.record(
        id: "thread.stack-reserved-bytes", subject: subject, group: group, nanoseconds: sizes.map { Double($0.size) })
      harness.record(
        id: "thread.stack-resident-bytes", subject: subject, group: group, nanoseconds: sizes.map { Double($0.rss) })
    }
  }

  if harness.wants("thread.kernel") {
    let count = harness.quick ? 20 : 200
    var stackPerThread: [Double] = []
    var slabPerThread: [Double] = []
    var rssPerThread: [Double] = []
    for _ in 0..<(harness.quick ? 1 : 3) {
      let before = memoryCounters()
      let release = AtomicInteger<UInt32>(0)
      let started = AtomicInteger<Int>(0)
      let threads = SpawnedThreads(count: count) {
        _ = started.increment(ordering: .full)
        while release.load(ordering: .acquiring) == 0 { Threads.Thread.sleep(for: .milliseconds(1)) }
      }
      while started.load(ordering: .acquiring) < count { Threads.Thread.yield() }
      let after = memoryCounters()
      release.store(1, ordering: .releasing)
      threads.joinAll()
      stackPerThread.append(Double(after.kernelStack - before.kernelStack) / Double(count))
      slabPerThread.append(Double(after.unreclaimableSlab - before.unreclaimableSlab) / Double(count))
      rssPerThread.append(Double(after.residentSet - before.residentSet) / Double(count))
    }
    harness.record(
      id: "thread.kernel-stack-bytes", subject: .peer("Linux (KernelStack / thread)"), group: group,
      nanoseconds: stackPerThread)
    // The per-thread kernel objects by their slab sizes (root only): the task_struct, its pid,
    // and the two VMAs of the stack (stack and guard). Signal, file and mm structures are
    // shared by the threads of a process.
    if let slab = slabObjectSizes(["task_struct", "pid", "vm_area_struct"]), slab.count == 3 {
      let bytes = Double(slab["task_struct"]! + slab["pid"]! + 2 * slab["vm_area_struct"]!)
      harness.record(
        id: "thread.kernel-objects-bytes", subject: .peer("Linux (task_struct + pid + 2 VMAs, /proc/slabinfo)"),
        group: group, nanoseconds: [bytes])
    }
    harness.record(
      id: "thread.kernel-slab-bytes", subject: .peer("Linux (SUnreclaim / thread)"), group: group,
      nanoseconds: slabPerThread)
    harness.record(
      id: "thread.process-resident-bytes", subject: .toolkit("Threads.Thread (VmRSS / parked thread)"), group: group,
      nanoseconds: rssPerThread)
  }
}

// MARK: - Subjects

/// Keeps a value alive so the optimizer cannot delete the work that produced it.
@inline(never)
private func blackHole<T>(_ value: T) {
  withExtendedLifetime(value) {}
}

/// A pthread key holding a non-nil value on the measuring thread.
private let rawKey: pthread_key_t = {
  var key = pthread_key_t()
  precondition(pthread_key_create(&key, nil) == 0)
  precondition(pthread_setspecific(key, UnsafeRawPointer(bitPattern: 1)) == 0)
  return key
}()

private func toolkitCreateToStart() -> Double {
  let start = Harness.now()
  let started = try! Threads.Thread.spawn { Harness.now() }.join()
  return Double(started - start)
}

private func rawPthreadCreateToStart(stackSize: Int) -> Double {
  let slot = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
  defer { slot.deallocate() }
  var attributes = pthread_attr_t()
  precondition(pthread_attr_init(&attributes) == 0)
  defer { precondition(pthread_attr_destroy(&attributes) == 0) }
  precondition(pthread_attr_setstacksize(&attributes, stackSize) == 0)
  var handle = pthread_t()
  let start = Harness.now()
  let result = pthread_create(
    &handle, &attributes,
    { slot in
      slot!.assumingMemoryBound(to: UInt64.self).pointee = Harness.now()
      return nil
    }, slot)
  precondition(result == 0)
  precondition(pthread_join(handle, nil) == 0)
  return Double(slot.pointee - start)
}

private func rawPthreadCreateJoin(stackSize: Int) {
  var attributes = pthread_attr_t()
  precondition(pthread_attr_init(&attributes) == 0)
  precondition(pthread_attr_setstacksize(&attributes, stackSize) == 0)
  var handle = pthread_t()
  precondition(pthread_create(&handle, &attributes, { _ in nil }, nil) == 0)
  precondition(pthread_attr_destroy(&attributes) == 0)
  precondition(pthread_join(handle, nil) == 0)
}

/// Foundation has no join: start a thread and wait until it reports finished.
private func foundationStartAndWait(stackSize: Int) {
  let done = DispatchSemaphore(value: 0)
  let thread = Foundation.Thread { done.signal() }
  thread.stackSize = stackSize
  thread.start()
  done.wait()
  while !thread.isFinished { sched_yield() }  // the rest of its exit, as a join would wait
}

private final class StartStamp: @unchecked Sendable {
  var value: UInt64 = 0  // written by the thread before `done.signal()`, read after `wait()`
  let done = DispatchSemaphore(value: 0)
}

private func foundationCreateToStart(stackSize: Int) -> Double {
  let stamp = StartStamp()
  let start = Harness.now()
  let thread = Foundation.Thread {
    stamp.value = Harness.now()
    stamp.done.signal()
  }
  thread.stackSize = stackSize
  thread.start()
  stamp.done.wait()
  // Foundation threads are detached: let this one finish exiting before the next sample, so
  // its teardown does not land in another subject's measurement.
  while !thread.isFinished { sched_yield() }
  return Double(stamp.value - start)
}

// MARK: - /proc readers

/// The smaps entry (size and Rss in bytes) of the mapping that holds the calling thread's stack.
/// The calling thread's own stack: its size from `pthread_getattr_np` and how much of it is
/// resident (`mincore`). (Reading the mapping from /proc/self/smaps is unreliable: the kernel
/// merges a thread stack with an adjacent cached stack of the same flags into one mapping.)
private func currentStackMapping() -> (size: Int, rss: Int) {
  var low: UnsafeMutableRawPointer?
  var size = 0
  guard bench_thread_get_stack_range(&low, &size) == 0, let low else { return (0, 0) }
  let pages = bench_resident_pages(low, size)
  return (size, pages < 0 ? 0 : pages * Int(sysconf(Int32(_SC_PAGESIZE))))
}

private func memoryCounters() -> (kernelStack: Int, unreclaimableSlab: Int, residentSet: Int) {
  var kernelStack = 0
  var slab = 0
  for line in readProcFile("/proc/meminfo").split(separator: "\n") {
    if line.hasPrefix("KernelStack:") { kernelStack = kilobytes(line) * 1024 }
    if line.hasPrefix("SUnreclaim:") { slab = kilobytes(line) * 1024 }
  }
  var rss = 0
  for line in readProcFile("/proc/self/status").split(separator: "\n") where line.hasPrefix("VmRSS:") {
    rss = kilobytes(line) * 1024
  }
  return (kernelStack, slab, rss)
}

/// Object sizes of the named slab caches from /proc/slabinfo (readable by root), or nil.
private func slabObjectSizes(_ names: Set<String>) -> [String: Int]? {
  let text = readProcFile("/proc/slabinfo")
  if text.isEmpty { return nil }
  var sizes: [String: Int] = [:]
  for line in text.split(separator: "\n") {
    let fields = line.split(separator: " ", omittingEmptySubsequences: true)
    guard fields.count > 3, names.contains(String(fields[0])), let size = Int(fields[3]) else { continue }
    sizes[String(fields[0])] = size
  }
  return sizes
}

private func kilobytes(_ line: Substring) -> Int {
  Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
}

private func readProcFile(_ path: String) -> String {
  let descriptor = open(path, O_RDONLY)
  guard descriptor >= 0 else { return "" }
  defer { close(descriptor) }
  var bytes: [UInt8] = []
  var buffer = [UInt8](repeating: 0, count: 65536)
  while true {
    let count = read(descriptor, &buffer, buffer.count)
    if count <= 0 { break }
    bytes += buffer[0..<count]
  }
  return String(decoding: bytes, as: UTF8.self)
}

/// Toolkit thread handles kept in a list (an `Array` cannot hold the noncopyable
/// `JoinableThread`), joined in order.
final class SpawnedThreads {
  private final class Slot {
    var handle: JoinableThread<Void, Never>?
    init(_ handle: consuming JoinableThread<Void, Never>) { self.handle = consume handle }
  }
  private var slots: [Slot] = []

  /// Starts `count` toolkit threads running `body`.
  init(count: Int, configuration: ThreadConfiguration = ThreadConfiguration(), _ body: @escaping @Sendable () -> Void) {
    slots.reserveCapacity(count)
    for _ in 0..<count {
      slots.append(Slot(try! Threads.Thread.spawn(configuration: configuration) { () throws(Never) in body() }))
    }
  }

  /// Joins every thread, in the order started.
  func joinAll() {
    for slot in slots { slot.handle.take()?.join() }
  }
}
