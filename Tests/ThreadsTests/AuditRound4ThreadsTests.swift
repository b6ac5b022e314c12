import ProcessTestSupport
import Sync
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Round 4: bad input and hostile sequences for the Threads module.
@Suite("Audit round 4: threads", .timeLimit(.minutes(3)))
struct AuditRound4ThreadsTests {
  // MARK: ThreadLocal

  /// A value whose deinitializer reads the thread-local it is stored in (a context stack that
  /// restores or logs the current context as a replaced one goes away). Replacing it by
  /// assigning ``ThreadLocal/value`` must not make the deinitializer's read overlap the
  /// assignment (a dynamic exclusivity violation stops the process): the replaced value is
  /// released once the new one is in place, so the deinitializer sees the new value.
  @Test func replacingAValueWhoseDeinitializerReadsTheSameThreadLocal() throws {
    let seen = try Thread.spawn(name: "tl-replace") { () throws(Never) -> [Int] in
      let recorder = Recorded()
      let local = ThreadLocal<Tracked?>(initialValue: { nil })
      local.value = Tracked(id: 1) { recorder.append(local.value?.id ?? -1) }
      local.value = Tracked(id: 2) { recorder.append(local.value?.id ?? -1) }
      local.value = nil
      local.removeValue()  // nothing left for LeakSanitizer once the key is deleted
      return recorder.values
    }.join()
    // Tracked 1 goes when 2 is in place; 2 goes when nil is.
    #expect(seen == [2, -1])
  }

  /// The same through the `initialValue` path the doc describes ("An `initialValue` that
  /// assigns ``value`` itself sees its assignment replaced by the value it returns (the
  /// assigned one is released...)"): the released value's deinitializer may read the
  /// thread-local too.
  @Test func anInitialValueReplacingItsOwnAssignmentReleasesItOutsideTheAccess() throws {
    let seen = try Thread.spawn(name: "tl-initial") { () throws(Never) -> [Int] in
      let recorder = Recorded()
      let holder = LocalHolder()
      let local = ThreadLocal<Tracked?>(initialValue: {
        holder.local?.value = Tracked(id: 7) { recorder.append(holder.local?.value?.id ?? -1) }
        return Tracked(id: 8) {}
      })
      holder.local = local
      let first = local.value?.id
      holder.local = nil
      recorder.append(first ?? -2)
      local.removeValue()  // nothing left for LeakSanitizer once the key is deleted
      return recorder.values
    }.join()
    #expect(seen == [8, 8])
  }

  // MARK: Sleeping with extreme durations

  /// `sleep(for:)`: "Zero or negative durations return at once", the most negative ones too
  /// (no overflow on the way to the absolute deadline).
  @Test func sleepingForExtremeNegativeDurationsReturnsAtOnce() {
    let start = MonotonicInstant.now
    Thread.sleep(for: .seconds(Int64.min))
    Thread.sleep(for: .zero - .seconds(Int64.max) - .seconds(Int64.max))
    Thread.sleep(for: Duration(secondsComponent: Int64.min, attosecondsComponent: -999_999_999_999_999_999))
    Thread.sleep(for: .nanoseconds(-1))
    Thread.sleep(for: .zero)
    Thread.sleep(until: .distantPast)
    #expect(start.duration(to: .now) < .seconds(5))
  }

  // MARK: Configuration edges not checked elsewhere

  /// A guard area that can be rounded but not mapped (up to the largest page multiple an
  /// `Int` holds, where stack plus guard overflows glibc's size computation) is a typed
  /// `.system` error from `pthread_create`, never a crash, and the body never runs.
  @Test func hugeGuardSizesAreATypedSystemError() {
    let ran = AtomicBool(false)
    for guardSize in [ThreadConfiguration.maximumRoundableSize, Int.max / 2] {
      var configuration = ThreadConfiguration()
      configuration.guardSize = guardSize
      do throws(ThreadStartError) {
        try Thread.spawn(configuration: configuration) { ran.store(true, ordering: .releasing) }.join()
        Issue.record("a guard of \(guardSize) bytes was mapped")
      } catch {
        guard case .system(let failure) = error, failure.call == "pthread_create",
          failure.code == .tryAgain || failure.code == .invalidArgument
        else {
          Issue.record("guard \(guardSize): \(error)")
          continue
        }
      }
    }
    #expect(!ran.load(ordering: .acquiring))
  }

  /// Real-time priorities at the integer extremes are refused with the typed error, not
  /// trapped on a conversion to the C type.
  @Test func realTimePrioritiesAtTheIntegerExtremesAreRefused() {
    for priority in [Int.min, Int.max, Int(Int32.max) + 1, Int(Int32.min) - 1, -1] {
      var configuration = ThreadConfiguration()
      configuration.schedulingPolicy = .fifo(priority: priority)
      #expect(throws: ThreadConfigurationError.realTimePriorityOutOfRange(priority, allowed: 1...99)) {
        try configuration.validate()
      }
      configuration.schedulingPolicy = .roundRobin(priority: priority)
      #expect(throws: ThreadConfigurationError.realTimePriorityOutOfRange(priority, allowed: 1...99)) {
        try configuration.validate()
      }
    }
  }

  /// CPU numbers at the integer extremes are refused with the typed error (no trap in the
  /// conversion to `Int32`), for a configuration and for the calling thread's setter.
  @Test func cpuNumbersAtTheIntegerExtremesAreRefused() throws {
    for cpu in [Int.min, Int.max, Int(Int32.max) + 1, Int(Int32.min) - 1] {
      var configuration = ThreadConfiguration()
      configuration.cpuAffinity = [0, cpu]
      #expect(throws: ThreadConfigurationError.cpuAffinityOutOfRange(cpu: cpu, allowed: 0..<1024)) {
        try configuration.validate()
      }
    }
    let outcome = try Thread.spawn(name: "affinity-edges") { () throws(Never) -> [String] in
      var problems: [String] = []
      let before = (try? Thread.currentCPUAffinity()) ?? []
      for cpu in [Int.min, Int.max, -1, 1024] {
        do throws(ThreadSettingError) {
          try Thread.setCurrentCPUAffinity([cpu])
          problems.append("\(cpu) accepted")
        } catch {
          guard case .invalidValue(.cpuAffinityOutOfRange(let reported, _)) = error, reported == cpu else {
            problems.append("\(cpu): \(error)")
            continue
          }
        }
      }
      if (try? Thread.currentCPUAffinity()) != before { problems.append("affinity changed by a refused call") }
      return problems
    }.join()
    #expect(outcome == [])
  }

  /// Duplicate CPU numbers are one CPU: the set the thread reads back holds each once.
  @Test func duplicateCPUNumbersAreOneCPU() throws {
    let cpu = try #require(try Thread.currentCPUAffinity().first)
    var configuration = ThreadConfiguration()
    configuration.cpuAffinity = [cpu, cpu, cpu]
    let applied = try Thread.spawn(configuration: configuration) { try Thread.currentCPUAffinity() }.join()
    #expect(applied == [cpu])
    let set = try Thread.spawn { () throws -> [Int] in
      try Thread.setCurrentCPUAffinity([cpu, cpu])
      return try Thread.currentCPUAffinity()
    }.join()
    #expect(set == [cpu])
  }

  /// Relative priorities: infinities are refused like NaN; -0.0 is 0 (nice 19).
  @Test func infiniteRelativePrioritiesAreRefusedAndNegativeZeroIsZero() throws {
    for priority in [Double.infinity, -Double.infinity, Double.greatestFiniteMagnitude, -Double.leastNonzeroMagnitude] {
      var configuration = ThreadConfiguration()
      configuration.relativePriority = priority
      #expect(throws: ThreadConfigurationError.relativePriorityOutOfRange(priority, allowed: 0...1)) {
        try configuration.validate()
      }
      #expect(throws: ThreadSettingError.invalidValue(.relativePriorityOutOfRange(priority, allowed: 0...1))) {
        try Thread.setCurrentRelativePriority(priority)
      }
    }
    #expect(ThreadConfiguration.niceValue(forRelativePriority: -0.0) == 19)
  }

  /// `niceValue(forRelativePriority:)`: "`round((0.5 - p) * 40)` clamped to -20...19".
  /// Values beyond 0...1 and the infinities clamp; NaN has no place in that mapping and must
  /// not come out as the highest priority (-20): it stops the process with a message, as
  /// the configuration and the setter refuse it.
  @Test(.runsExitTests) func niceValueClampsOutOfRangeValuesAndRefusesNaN() async {
    #expect(ThreadConfiguration.niceValue(forRelativePriority: 7) == -20)
    #expect(ThreadConfiguration.niceValue(forRelativePriority: -7) == 19)
    #expect(ThreadConfiguration.niceValue(forRelativePriority: .infinity) == -20)
    #expect(ThreadConfiguration.niceValue(forRelativePriority: -.infinity) == 19)
    #expect(ThreadConfiguration.relativePriority(forNiceValue: .min) == 1)
    #expect(ThreadConfiguration.relativePriority(forNiceValue: .max) == 0)
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      let nice = ThreadConfiguration.niceValue(forRelativePriority: .nan)
      print("nice \(nice)")
      exit(0)
    }
    if let result {
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("NaN"))
    }
  }

  // MARK: cgroup quota parsing

  /// The quota parsers read files: a quota near `Int.max` (or a period near it) gives
  /// `ceil(quota / period)` or no limit, never an overflow trap in the rounding; a quota or
  /// period of 0, negative numbers and junk are "no limit". Run in a child so a trap fails
  /// only this test.
  @Test(.runsExitTests) func cgroupQuotaParsingSurvivesExtremeNumbers() async {
    await #expect(processExitsWith: .success) {
      alarm(20)
      let checks: [Bool] = [
        ProcessorLimits.processorCount(cpuMax: "\(Int.max) 100000") == Int.max / 100_000 + 1,
        ProcessorLimits.processorCount(cpuMax: "\(Int.max) \(Int.max)") == 1,
        ProcessorLimits.processorCount(cpuMax: "\(Int.max - 1) \(Int.max)") == 1,
        ProcessorLimits.processorCount(cpuMax: "1 \(Int.max)") == 1,
        ProcessorLimits.processorCount(cpuMax: "0 100000") == nil,
        ProcessorLimits.processorCount(cpuMax: "100000 0") == nil,
        ProcessorLimits.processorCount(cpuMax: "-5 100000") == nil,
        ProcessorLimits.processorCount(cpuMax: "99999999999999999999999 100000") == nil,
        ProcessorLimits.processorCount(cpuMax: "") == nil,
        ProcessorLimits.processorCount(
          quotaMicroseconds: "\(Int.max)\n", periodMicroseconds: "100000\n") == Int.max / 100_000 + 1,
        ProcessorLimits.processorCount(quotaMicroseconds: "\(Int.max)", periodMicroseconds: "\(Int.max)") == 1,
      ]
      exit(checks.allSatisfy { $0 } ? 0 : 1)
    }
  }

  // MARK: Names

  /// A very long name is kept whole by `name` and cut to at most 15 bytes for the kernel; a
  /// name whose first character alone is longer than 15 bytes leaves an empty kernel name
  /// (never a split character), and the thread still starts.
  @Test func veryLongAndOddNamesStartAndReadBack() throws {
    let long = String(repeating: "näme-", count: 20_000)
    let (full, kernel) = try Thread.spawn(name: long) { () throws -> (String?, String) in
      (Thread.current.name, try Thread.currentKernelName())
    }.join()
    #expect(full == long)
    #expect(kernel == ThreadConfiguration.kernelName(for: long))
    #expect(kernel.utf8.count <= 15)
    let wide = "e" + String(repeating: "\u{301}", count: 10) + "x"  // one character of 21 bytes
    #expect(ThreadConfiguration.kernelName(for: wide) == "")
    let wideKernel = try Thread.spawn(name: wide) { try Thread.currentKernelName() }.join()
    #expect(wideKernel == "")
    let empty = try Thread.spawn(name: "") { () throws -> (String?, String) in
      (Thread.current.name, try Thread.currentKernelName())
    }.join()
    #expect(empty.0 == "" && empty.1 == "")
  }

  // MARK: Exit requests: hostile sequences

  /// An exit-request handler that requests the exit again, adds a handler (which runs at
  /// once, on the same thread) and removes a sibling: each runs once, no deadlock.
  @Test func exitRequestHandlersThatReenterTheirThread() throws {
    let gate = Latch(count: 1)
    let worker = try Thread.spawn(name: "reenter-exit") { () throws(Never) in gate.wait() }
    let thread = worker.thread
    let log = Recorded()
    let sibling = LockedValue<ExitRequestHandlerToken?>(nil)
    thread.addExitRequestHandler {
      log.append(1)
      thread.requestExit()
      thread.addExitRequestHandler { log.append(3) }
      if let token = sibling.withLock({ $0 }) { thread.removeExitRequestHandler(token) }
    }
    let token = thread.addExitRequestHandler { log.append(2) }
    sibling.withLock { $0 = token }
    thread.requestExit()
    thread.requestExit()
    #expect(log.values.filter { $0 == 1 }.count == 1)
    #expect(log.values.filter { $0 == 3 }.count == 1)
    #expect(log.values.filter { $0 == 2 }.count <= 1)
    #expect(thread.isExitRequested)
    gate.countDown()
    worker.join()
  }

  // MARK: ThreadDictionary and start(): hostile sequences

  /// `update(_:)`: "Do not touch the same dictionary inside `body` (the lock is not
  /// recursive; doing so stops the process)": a stop with a message, not a silent hang.
  @Test(.runsExitTests) func touchingTheDictionaryInsideItsUpdateStopsTheProcessWithAMessage() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      let dictionary = Thread.current.threadDictionary
      dictionary.update { entries in
        entries["a"] = 1
        _ = dictionary.count
      }
      exit(0)
    }
    if let result {
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(text.contains("misuse"), "no misuse message: \(text)")
    }
  }

  /// Two threads racing `start()` on one thread object: exactly one starts it, the other's
  /// call stops the process (misuse: started twice), never two bodies.
  @Test(.runsExitTests) func twoThreadsRacingStartStopTheProcessAsStartingTwice() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      raceTwoStarts()
    }
    if let result {
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(text.contains("Thread misuse: start() called on a thread that is already started"))
    }
  }

  // MARK: ThreadPool: seeded model-based stress

  /// Jobs submitted to a small pool (one or two threads, a short queue) from tasks cancelled
  /// at random moments: each `run` returns its closure's value exactly when the closure ran
  /// (a task cancelled while its closure runs still gets the value), `.cancelled` exactly
  /// when it never ran, and once everything returned the pool's statistics show no job
  /// anywhere. Seeded, bounded to about a second.
  @Test func poolOutcomesMatchWhetherTheClosureRanUnderRandomCancellation() async {
    var generator = SeededGenerator(seed: 0x5eed_2026)
    var configuration = ThreadPool.Configuration()
    configuration.maximumThreads = 2
    configuration.queueCapacity = 2
    configuration.idleTimeout = .milliseconds(50)
    let pool = ThreadPool(name: "audit4-model", configuration: configuration)
    let deadline = MonotonicInstant.after(.seconds(1))
    var rounds = 0
    var mismatches: [String] = []
    while !deadline.hasPassed && rounds < 60 {
      rounds += 1
      let count = Int(generator.next() % 8) + 1
      let ranFlags = (0..<count).map { _ in AtomicBool(false) }
      var tasks: [Task<String, Never>] = []
      for index in 0..<count {
        let ran = ranFlags[index]
        let spin = Int(generator.next() % 200)
        tasks.append(
          Task {
            do throws(ThreadPoolError<Never>) {
              let value = try await pool.run { () -> Int in
                ran.store(true, ordering: .releasing)
                var sum = 0
                for step in 0..<(spin * 100) { sum &+= step }
                return index + (sum & 0)
              }
              return value == index ? "value" : "wrong value \(value)"
            } catch {
              if case .cancelled = error { return "cancelled" }
              return "\(error)"
            }
          })
      }
      for index in 0..<count where generator.next() % 2 == 0 {
        if generator.next() % 2 == 0 { await Task.yield() }
        tasks[index].cancel()
      }
      for index in 0..<count {
        let outcome = await tasks[index].value
        let ran = ranFlags[index].load(ordering: .acquiring)
        switch outcome {
        case "value" where ran, "cancelled" where !ran: break
        default: mismatches.append("round \(rounds) job \(index): \(outcome), ran \(ran)")
        }
      }
      let statistics = pool.statistics
      if statistics.runningJobs != 0 || statistics.queuedJobs != 0 || statistics.waitingJobs != 0 {
        mismatches.append("round \(rounds): \(statistics)")
      }
    }
    #expect(mismatches == [])
    await pool.shutDown()
    let final = pool.statistics
    #expect(final.threads == 0 && final.isShutDown)
  }
}

extension AuditRound4ThreadsTests {
  /// A shutdown racing submissions and cancellations: work submitted before the shutdown
  /// runs (its value arrives) or was cancelled before it started; work submitted after it
  /// gets `.shutDown` and never runs; no closure runs without its value arriving; the
  /// shutdown returns with no thread left. Seeded, a few rounds.
  @Test func poolShutdownRacingSubmissionsLosesNoOutcome() async {
    var generator = SeededGenerator(seed: 0xd0_2026)
    var mismatches: [String] = []
    for round in 0..<12 {
      var configuration = ThreadPool.Configuration()
      configuration.maximumThreads = Int(generator.next() % 3) + 1
      configuration.queueCapacity = Int(generator.next() % 3) + 1
      let pool = ThreadPool(name: "audit4-down", configuration: configuration)
      let count = Int(generator.next() % 10) + 2
      let shutdownAt = Int(generator.next() % UInt64(count))
      let ranFlags = (0..<count).map { _ in AtomicBool(false) }
      var tasks: [Task<String, Never>] = []
      var shutdown: Task<Void, Never>? = nil
      for index in 0..<count {
        if index == shutdownAt { shutdown = Task { await pool.shutDown() } }
        let ran = ranFlags[index]
        tasks.append(
          Task {
            do throws(ThreadPoolError<Never>) {
              let value = try await pool.run { () -> Int in
                ran.store(true, ordering: .releasing)
                return index
              }
              return value == index ? "value" : "wrong value \(value)"
            } catch {
              switch error {
              case .cancelled: return "cancelled"
              case .shutDown: return "shutDown"
              default: return "\(error)"
              }
            }
          })
        if generator.next() % 3 == 0 { tasks[index].cancel() }
      }
      await shutdown?.value
      for index in 0..<count {
        let outcome = await tasks[index].value
        let ran = ranFlags[index].load(ordering: .acquiring)
        switch outcome {
        case "value" where ran, "cancelled" where !ran, "shutDown" where !ran: break
        default: mismatches.append("round \(round) job \(index): \(outcome), ran \(ran)")
        }
      }
      let statistics = pool.statistics
      if statistics.threads != 0 || statistics.runningJobs != 0 || statistics.queuedJobs != 0
        || statistics.waitingJobs != 0 || !statistics.isShutDown
      {
        mismatches.append("round \(round): \(statistics)")
      }
    }
    #expect(mismatches == [])
  }
}

extension AuditRound4ThreadsTests {
  /// A pool whose threads can never start (an affinity naming only a CPU that is not online):
  /// every `run`, including those queued behind a full queue and those submitted while a
  /// start is failing, throws `.threadStartFailed` (none waits for ever), later calls try
  /// again and fail the same way, the pool is left with no thread or job, and `shutDown()`
  /// returns.
  @Test func aPoolWhoseThreadsCannotStartRejectsEveryJobAndShutsDown() async {
    var configuration = ThreadPool.Configuration()
    configuration.maximumThreads = 2
    configuration.queueCapacity = 1
    configuration.threadConfiguration.cpuAffinity = [1000]  // valid number, no such CPU online here
    let pool = ThreadPool(name: "audit4-nostart", configuration: configuration)
    for _ in 0..<3 {
      let ran = AtomicBool(false)
      var tasks: [Task<String, Never>] = []
      for _ in 0..<6 {
        tasks.append(
          Task {
            do throws(ThreadPoolError<Never>) {
              _ = try await pool.run { ran.store(true, ordering: .releasing) }
              return "value"
            } catch {
              if case .threadStartFailed(.system(let failure)) = error, failure.code == .invalidArgument {
                return "threadStartFailed"
              }
              return "\(error)"
            }
          })
      }
      for task in tasks { #expect(await task.value == "threadStartFailed") }
      #expect(!ran.load(ordering: .acquiring))
      let statistics = pool.statistics
      #expect(statistics.threads == 0 && statistics.queuedJobs == 0 && statistics.waitingJobs == 0)
    }
    await pool.shutDown()
    #expect(pool.statistics.isShutDown)
  }
}

/// In an exit test's child: two threads call `start()` on one thread object at once; exits
/// with status 0 if both calls return.
private func raceTwoStarts() -> Never {
  alarm(20)
  let body = Latch(count: 1)
  let target = Thread(name: "raced") { body.wait() }
  let go = Latch(count: 1)
  let first = try! Thread.spawn { () throws(Never) in
    go.wait()
    try? target.start()
  }
  let second = try! Thread.spawn { () throws(Never) in
    go.wait()
    try? target.start()
  }
  go.countDown()
  first.join()
  second.join()
  exit(0)
}

/// A value that runs `onDeinit` when released, identified by `id`.
private final class Tracked: Sendable {
  let id: Int
  let onDeinit: @Sendable () -> Void
  init(id: Int, onDeinit: @escaping @Sendable () -> Void) {
    self.id = id
    self.onDeinit = onDeinit
  }
  deinit { onDeinit() }
}

/// A thread-safe list of integers.
private final class Recorded: Sendable {
  private let storage = LockedValue<[Int]>([])
  func append(_ value: Int) { storage.withLock { $0.append(value) } }
  var values: [Int] { storage.withLock { $0 } }
}

/// Lets an `initialValue` closure reach its own thread-local.
private final class LocalHolder: @unchecked Sendable {
  // @unchecked: touched by one thread only.
  var local: ThreadLocal<Tracked?>?
}
