import CAllocationStats
import ProcessTestSupport
import Sync
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

// ThreadPool tests that need the whole process to themselves (thread, descriptor and
// allocation counts, latencies of Swift's cooperative pool): each runs in a child process
// (an exit test), where no other test's threads or tasks interfere. The child prints its
// figures; the parent prints them again for the log.

@Suite("ThreadPool in a process of its own", .timeLimit(.minutes(3)))
struct ThreadPoolProcessTests {
  /// With `coreCount + 2` calls each blocking 200 ms, a task sleeping 1 ms in a loop keeps a
  /// p99 lateness under 20 ms when the calls go through the pool; through `Task.detached`
  /// the same calls occupy every thread of the cooperative pool and the sleeper stalls.
  /// The pool's half gets up to five attempts (the best counts): other processes on a
  /// loaded machine delay the sleeper now and then, while the detached stall is there every
  /// time (one attempt). The child prints the figures and the parent judges them.
  @Test(.runsExitTests) func blockingWorkInThePoolDoesNotStarveTheCooperativePoolButDetachedTasksDo() async throws {
    let result = try await #require(processExitsWith: .success, observing: [\.standardOutputContent]) {
      let blockers = sysconf(Int32(_SC_NPROCESSORS_ONLN)) + 2
      let pool = ThreadPool(name: "starvation")
      var throughPool = Lateness([])
      for attempt in 0..<5 {
        let lateness = await sleeperLateness {
          await withTaskGroup(of: Void.self) { group in
            for _ in 0..<blockers {
              group.addTask { try? await pool.run { Thread.sleep(for: .milliseconds(200)) } }
            }
          }
        }
        if attempt == 0 || lateness.p99 < throughPool.p99 { throughPool = lateness }
        if throughPool.p99 < .milliseconds(20) { break }
      }
      let throughDetached = await sleeperLateness {
        let tasks = (0..<blockers).map { _ in Task.detached { sleepBlocking(for: .milliseconds(200)) } }
        for task in tasks { await task.value }
      }
      await pool.shutDown()
      print("pool: \(throughPool.summary); detached: \(throughDetached.summary)")
      print("p99 us: \(throughPool.p99Microseconds) \(throughDetached.p99Microseconds)")
    }
    let output = String(decoding: result.standardOutputContent, as: UTF8.self)
    let p99 = try #require(printedFigures(result.standardOutputContent, after: "p99 us: ").last, "printed \(output)")
    try #require(p99.count == 2, "printed \(output)")
    #expect(p99[0] < 20_000, "the pool let the sleeper stall: \(output)")
    #expect(p99[1] > 20_000, "the detached tasks did not stall the sleeper: \(output)")
  }

  /// 10,000 pools (1,000 under ThreadSanitizer), each running work on a thread or two and
  /// shut down: afterwards the process has no pool thread, and no more threads, descriptors
  /// or memory mappings than the runtime and the allocator account for (an ended thread
  /// never joined keeps its stack mapped). The child prints the counts, and the descriptors
  /// opened meanwhile by name; the parent prints them for the log and judges them.
  @Test(.runsExitTests) func submitAndShutdownCyclesLeakNoThreadOrDescriptor() async throws {
    let result = try await #require(processExitsWith: .success, observing: [\.standardOutputContent]) {
      let cycles = isRunningUnderThreadSanitizer ? 1_000 : 10_000
      await runCycle()  // the runtime's own threads start here, before counting
      let threadsBefore = threadCount()
      let descriptorsBefore = stableOpenDescriptors()
      let mappingsBefore = mappingCount()
      for _ in 0..<cycles { await runCycle() }
      let threadsAfter = threadCount()
      let descriptorsAfter = stableOpenDescriptors()
      let mappingsAfter = mappingCount()
      let leftWorkers = threadNames(withPrefix: "cycle-").count
      let opened = descriptorsAfter.subtracting(descriptorsBefore).sorted()
      print(
        "\(cycles) cycles: threads \(threadsBefore) -> \(threadsAfter), descriptors \(descriptorsBefore.count) -> \(descriptorsAfter.count) (opened meanwhile: \(opened)), mappings \(mappingsBefore) -> \(mappingsAfter), pool threads left \(leftWorkers)"
      )
      print(
        "counts: \(leftWorkers) \(threadsBefore) \(threadsAfter) \(descriptorsBefore.count) \(descriptorsAfter.count) \(mappingsBefore) \(mappingsAfter) \(opened.count)"
      )
    }
    let output = String(decoding: result.standardOutputContent, as: UTF8.self)
    print(output)
    let counts = try #require(printedFigures(result.standardOutputContent, after: "counts: ").last, "printed \(output)")
    try #require(counts.count == 8, "printed \(output)")
    // Pool threads are counted by name, exactly; the process's thread count may grow by the
    // runtime's own threads (Dispatch starts a few under load). glibc may map up to 8 arenas
    // per CPU meanwhile (a couple of mappings each); leaked stacks would be thousands.
    #expect(counts[0] == 0, "pool threads left: \(output)")
    #expect(counts[2] <= counts[1] + 4, "threads: \(output)")
    // A leak adds a descriptor per cycle, or per few hundred: thousands here (a thousand
    // under ThreadSanitizer). The runtime may open one or two of its own meanwhile, on a
    // loaded machine; the child names every descriptor opened meanwhile, so a failure says
    // what it was.
    #expect(counts[7] <= 3, "descriptors: \(output)")
    #expect(counts[6] <= counts[5] + 64, "mappings: \(output)")
  }

  /// A queued job costs one allocation, its record: in a process of its own, the bytes
  /// allocated while 8,000 tasks each submit a non-capturing closure to a blocked pool, less
  /// the bytes allocated while as many tasks merely resume and park (the runtime's own cost
  /// of waking a task), stay within one record per job. A second allocation per job (a
  /// wrapped closure, a continuation box) would add at least 32 bytes each. The tasks run
  /// one round trip through another pool first, so their own async frames are allocated.
  @Test(.runsExitTests) func aQueuedJobCostsOneAllocation() async throws {
    let result = try await #require(processExitsWith: .success, observing: [\.standardOutputContent]) {
      await measureAllocationsPerQueuedJob()
    }
    let output = String(decoding: result.standardOutputContent, as: UTF8.self)
    // Under a sanitizer the child measures nothing (its allocator keeps no glibc statistics).
    guard !output.contains("skipped:") else { return }
    let figures = try #require(
      printedFigures(result.standardOutputContent, after: "per job: ").last, "printed \(output)")
    try #require(figures.count == 2, "printed \(output)")
    // One record (its usable bytes, 8 of malloc's header, and up to 24 of rounding), never a
    // second allocation.
    #expect(figures[0] <= figures[1] + 8 + 24, "bytes per queued job beyond waking its task: \(output)")
  }

  @Test(.runsExitTests) func anOutOfRangeConfigurationIsMisuse() async throws {
    let result = try await #require(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      var configuration = ThreadPool.Configuration()
      configuration.maximumThreads = 0
      _ = ThreadPool(name: "broken", configuration: configuration)
    }
    let text = String(decoding: result.standardErrorContent, as: UTF8.self)
    #expect(text.contains("ThreadPool misuse: maximumThreads must be at least 1"))
  }

  @Test(.runsExitTests) func anInvalidThreadConfigurationIsMisuse() async {
    await #expect(processExitsWith: .failure) {
      var configuration = ThreadPool.Configuration()
      configuration.threadConfiguration.stackSize = 1
      _ = ThreadPool(name: "broken", configuration: configuration)
    }
  }

  @Test(.runsExitTests) func shuttingDownTheSharedPoolIsMisuse() async {
    await #expect(processExitsWith: .failure) {
      await ThreadPool.shared.shutDown()
    }
  }
}

/// The allocation test's child: exits with 1 when a queued job costs more than one record.
/// Under ThreadSanitizer or AddressSanitizer it only prints a note: their allocators replace
/// glibc's, whose statistics then see nothing.
private func measureAllocationsPerQueuedJob() async {
  if isRunningUnderSanitizer {
    print("skipped: a sanitizer's allocator replaces glibc's statistics")
    return
  }
  let count = 8_000
  var configuration = ThreadPool.Configuration()
  configuration.maximumThreads = 1
  configuration.queueCapacity = count
  let pool = ThreadPool(name: "allocations", configuration: configuration)
  let warmUp = ThreadPool(name: "warm-up")
  let release = TestLatch()
  let blocker = Task { try await pool.run { block(on: release) } }
  _ = await eventually { pool.statistics.runningJobs == 1 }

  // The baseline: tasks resumed from one gate park at another.
  let start = AsyncGate(expecting: count)
  let parked = AsyncGate(expecting: count)
  let baselineTasks = (0..<count).map { _ in
    Task {
      _ = try? await warmUp.run { 0 }
      await start.arrive()
      await parked.arrive()
    }
  }
  await start.waitForEveryone()
  let baselineBefore = tk_test_allocated_bytes()
  start.open()
  _ = await eventually { parked.arrivedCount == count }
  let baselineAfter = tk_test_allocated_bytes()

  // The same tasks' twins, resumed into `run` on the blocked pool.
  let submit = AsyncGate(expecting: count)
  let submitters = (0..<count).map { _ in
    Task {
      _ = try? await warmUp.run { 0 }
      await submit.arrive()
      return try await pool.run { 1 }
    }
  }
  await submit.waitForEveryone()
  let before = tk_test_allocated_bytes()
  submit.open()
  _ = await eventually { pool.statistics.queuedJobs == count }
  let after = tk_test_allocated_bytes()

  let baseline = (Int(baselineAfter) - Int(baselineBefore)) / count
  let perJob = (Int(after) - Int(before)) / count - baseline
  let record = jobRecordAllocationSize()
  print("bytes per queued job beyond waking its task: \(perJob); one job record: \(record) usable bytes + 8")
  print("per job: \(perJob) \(record)")
  parked.open()
  for task in baselineTasks { await task.value }
  release.open()
  _ = try? await blocker.value
  for task in submitters { _ = try? await task.value }
  await pool.shutDown()
  await warmUp.shutDown()
}

/// One cycle of the leak test: a small pool, two concurrent jobs, a shutdown.
private func runCycle() async {
  var configuration = ThreadPool.Configuration()
  configuration.maximumThreads = 2
  let pool = ThreadPool(name: "cycle", configuration: configuration)
  async let first = try? pool.run { 1 }
  async let second = try? pool.run { 2 }
  _ = await (first, second)
  await pool.shutDown()
}

/// The usable size of the allocation holding a queued `() -> Int` job's record.
private func jobRecordAllocationSize() -> Int {
  Int(
    tk_test_usable_size(
      Unmanaged.passUnretained(
        TypedPoolJob<Int, Never>(core: ThreadPoolCore(name: "size", configuration: .init()), level: 0)
      ).toOpaque()))
}

/// Lateness of a task that sleeps 1 ms in a loop while `load` runs.
private func sleeperLateness(during load: () async -> Void) async -> Lateness {
  let stop = TestBox(false)
  let samples = TestBox<[Duration]>([])
  let sleeper = Task {
    while !stop.value {
      let before = MonotonicInstant.now
      try? await Task.sleep(for: .milliseconds(1))
      let lateness = (MonotonicInstant.now - before) - .milliseconds(1)
      samples.update { $0.append(lateness) }
    }
  }
  // The sleeper is looping before the load starts.
  _ = await eventually { samples.value.count >= 5 }
  await load()
  stop.value = true
  await sleeper.value
  return Lateness(samples.value)
}

/// Percentiles of the sleeper's lateness.
private struct Lateness {
  let p99: Duration
  let maximum: Duration
  let count: Int

  init(_ samples: [Duration]) {
    let sorted = samples.sorted()
    count = sorted.count
    p99 = sorted.isEmpty ? .zero : sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
    maximum = sorted.last ?? .zero
  }

  /// The 99th percentile in whole microseconds, for the parent to judge.
  var p99Microseconds: Int {
    let (seconds, attoseconds) = p99.components
    return Int(seconds) * 1_000_000 + Int(attoseconds / 1_000_000_000_000)
  }

  var summary: String {
    "p99 \(milliseconds(p99)) ms, max \(milliseconds(maximum)) ms over \(count) sleeps"
  }

  private func milliseconds(_ duration: Duration) -> String {
    let (seconds, attoseconds) = duration.components
    let tenths = (seconds * 10_000 + attoseconds / 100_000_000_000_000)
    return "\(Double(tenths) / 10)"
  }
}

/// Blocks the calling thread (a sync wrapper: `Thread.sleep` is unavailable in async code,
/// which is the point of the detached half of the starvation test).
private func sleepBlocking(for duration: Duration) {
  Thread.sleep(for: duration)
}

/// How many memory mappings the process has (lines of `/proc/self/maps`).
private func mappingCount() -> Int {
  (ProcessorLimits.readSmallFile("/proc/self/maps", limit: 1 << 24) ?? "").split(separator: "\n").count
}

/// How many threads the process has: the entries of `/proc/self/task`, without `.` and `..`.
private func threadCount() -> Int {
  guard let directory = opendir("/proc/self/task") else { return -1 }
  defer { closedir(directory) }
  var count = 0
  while let entry = readdir(directory) {
    let isDot = withUnsafeBytes(of: entry.pointee.d_name) { $0.first == UInt8(ascii: ".") }
    if !isDot { count += 1 }
  }
  return count
}

/// Tasks park here (suspended, holding no thread) until `open()`.
private final class AsyncGate: @unchecked Sendable {
  private let state = TestBox<(arrived: Int, isOpen: Bool, waiters: [UnsafeContinuation<Void, Never>])>(
    (0, false, []))
  private let expected: Int

  init(expecting expected: Int) {
    self.expected = expected
    state.update { $0.waiters.reserveCapacity(expected) }
  }

  func arrive() async {
    await withUnsafeContinuation { continuation in
      var resumeNow = false
      state.update {
        $0.arrived += 1
        if $0.isOpen { resumeNow = true } else { $0.waiters.append(continuation) }
      }
      if resumeNow { continuation.resume() }
    }
  }

  var arrivedCount: Int { state.value.arrived }

  func waitForEveryone() async {
    _ = await eventually { state.value.arrived == expected }
  }

  /// Resumes every parked task (under the box's lock, keeping the list's storage, so opening
  /// frees nothing the allocation test would see).
  func open() {
    state.update {
      $0.isOpen = true
      for waiter in $0.waiters { waiter.resume() }
      $0.waiters.removeAll(keepingCapacity: true)
    }
  }
}
