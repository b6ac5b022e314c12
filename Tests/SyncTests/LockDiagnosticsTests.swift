import Glibc
import ProcessTestSupport
import Sync
import Testing

/// A recursive lock built for these tests on a spinning owner word, calling the same hooks
/// as the toolkit's diagnosed locks (``LockDiagnostics``), so re-entry is seen by the
/// detectors exactly as a recursive toolkit lock would show it.
final class HookedRecursiveLock: @unchecked Sendable {
  // @unchecked: `owner` is atomic; `depth` is touched by the owner only.
  private let owner = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
  private var depth = 0
  private let identity: LockIdentity

  init(name: String) {
    owner.initialize(to: 0)
    identity = LockIdentity(name: name, fileID: #fileID, line: #line)
  }

  deinit {
    LockDiagnostics.lockWillBeDestroyed(identity)
    owner.deallocate()
  }

  private var me: UInt64 { UInt64(pthread_self()) }

  private func attempt() -> Bool {
    if UInt64.atomicLoad(at: owner, ordering: .relaxed) == me {
      depth += 1
      return true
    }
    if UInt64.atomicCompareAndSwap(expected: 0, desired: me, at: owner, ordering: .acquiring) {
      depth = 1
      return true
    }
    return false
  }

  func lock() {
    _ = LockDiagnostics.acquire(
      identity, before: .distantFuture, holder: { 0 }, tryAcquire: { attempt() },
      acquire: {
        while !attempt() { sched_yield() }
        return true
      })
  }

  func unlock() {
    LockDiagnostics.release(identity) {
      depth -= 1
      if depth == 0 { UInt64.atomicStore(0, at: owner, ordering: .releasing) }
    }
  }
}

/// Switches every detector off, then `kind` (if any) to `mode`: an exit test's child
/// inherits THREADING_TOOLKIT_DIAGNOSTICS (CI runs the suite once with `all=stop`), and each
/// test watches one detector.
func onlyDetector(_ kind: Diagnostics.Kind?, _ mode: Diagnostics.Mode = .report) {
  for other in Diagnostics.Kind.all { Diagnostics.setMode(.off, for: other) }
  if let kind { Diagnostics.setMode(mode, for: kind) }
}

/// Switches every detector off and contention statistics on, measuring one acquisition in
/// `sampling` (in an exit test's child, as ``onlyDetector(_:_:)``).
func onlyContentionStatistics(sampling: Int) {
  onlyDetector(nil)
  Diagnostics.lockContentionSampling = sampling
  Diagnostics.collectsLockContention = true
}

/// Standard error of an exit test, as text.
private func standardError(_ result: ExitTest.Result?) -> String {
  result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
}

/// How often `needle` occurs in `text`.
private func occurrences(of needle: String, in text: String) -> Int {
  text.ranges(of: needle).count
}

/// Lock-order detection and contention statistics through `Condition`, a diagnosed lock.
/// Every test switches diagnostics on, so each runs as an exit test in a fresh process (the
/// test process is shared with suites that use conditions); the child writes findings to
/// standard error (the default handler) and the parent reads them.
@Suite("Lock diagnostics", .timeLimit(.minutes(3)))
struct LockDiagnosticsTests {
  @Test("the environment grammar takes the lock detectors, the watchdog interval and the contention items")
  func grammar() throws {
    let settings = try Diagnostics.parse(
      "lock-order,deadlocks=stop,held-lock-in-callback,deadlock-ms=20,contention-sample=10,contention-dump=json"
    ).get()
    #expect(settings.mode(of: .lockOrder) == .report)
    #expect(settings.mode(of: .deadlocks) == .stop)
    #expect(settings.mode(of: .heldLockInCallback) == .report)
    #expect(settings.deadlockCheckInterval == .milliseconds(20))
    #expect(settings.lockContentionSampling == 10)
    #expect(settings.contentionDump == .json)
    #expect(settings.collectsLockContention)
    #expect(try Diagnostics.parse("contention").get().collectsLockContention)
    #expect(try Diagnostics.parse("contention").get().contentionDump == nil)
    #expect(try Diagnostics.parse("all").get().mode(of: .lockOrder) == .report)
    if case .failure(let error) = Diagnostics.parse("contention-sample=0") {
      #expect(error.message.contains("contention-sample"))
    } else {
      Issue.record("contention-sample=0 was accepted")
    }
    if case .failure(let error) = Diagnostics.parse("contention-dump=xml") {
      #expect(error.message.contains("contention-dump=xml"))
    } else {
      Issue.record("contention-dump=xml was accepted")
    }
  }

  @Test(
    "two locks taken in both orders on two threads, one after the other, are reported once, naming both", .runsExitTests
  )
  func twoLocksBothOrders() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let first = Condition(name: "accounts")
      let second = Condition(name: "ledger")
      blocking {
        runConcurrently(1) { _ in
          first.withLock { second.withLock {} }
        }
        runConcurrently(1) { _ in
          second.withLock { first.withLock {} }
          // The same inverted order again: the cycle was reported already.
          second.withLock { first.withLock {} }
        }
      }
    }
    let text = standardError(result)
    #expect(occurrences(of: "threading-toolkit [lock-order]", in: text) == 1)
    #expect(text.contains("takes \"accounts\" while holding \"ledger\""))
    #expect(text.contains("cycle of 2 locks: \"ledger\" -> \"accounts\" -> \"ledger\""))
    // Where each order was first seen: the first thread, then the second (now).
    #expect(text.contains("\"accounts\" before \"ledger\": first seen on "))
    #expect(text.contains("\"ledger\" before \"accounts\": now, on "))
  }

  @Test("a cycle through 100 locks is reported, naming the first 10 and how many more", .runsExitTests)
  func hundredLockCycle() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let locks = (0..<100).map { Condition(name: "L\($0)") }
      blocking {
        for index in 0..<99 {
          locks[index].withLock { locks[index + 1].withLock {} }
        }
        guard Diagnostics.mode(of: .lockOrder) == .report else { exit(2) }
        locks[99].withLock { locks[0].withLock {} }
      }
    }
    let text = standardError(result)
    #expect(occurrences(of: "threading-toolkit [lock-order]", in: text) == 1)
    #expect(text.contains("cycle of 100 locks: \"L99\" -> \"L0\" -> \"L1\" -> "))
    #expect(text.contains("\"L8\" -> ... (90 more)"))
    #expect(text.contains("... 90 more orders"))
  }

  @Test(
    "131,072 locks taken in sliding windows of 5 report nothing, and destroyed locks leave the graph", .runsExitTests)
  func slidingWindows() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      // 131,072 locks, each created, taken in 5 windows (after the 4 before it, before the
      // 4 after it) and destroyed: 655,360 diagnosed acquisitions, 524,288 distinct orders.
      // A sixteenth under ThreadSanitizer or AddressSanitizer, which slow every atomic
      // (ThreadSanitizer, about tenfold) and every allocation (both).
      let count = isRunningUnderSanitizer ? 8_192 : 131_072
      let start = MonotonicInstant.now
      var window: [Condition] = []
      blocking {
        for index in 0..<count {
          window.append(Condition(name: "window \(index)"))
          if window.count > 5 { window.removeFirst() }
          for lock in window { lock.lock() }
          for lock in window.reversed() { lock.unlock() }
        }
      }
      let elapsed = start.duration(to: .now)
      // Stated limit: 45 s for the whole run in a debug build (unspecialized generic
      // collections), sharing two cores with the rest of the suite; well under the suite's limit
      // of three minutes.
      guard elapsed < .seconds(45) else { exit(2) }
      window.removeAll()
      guard LockDiagnostics.orderGraphSize() == 0 else { exit(3) }
    }
    #expect(!standardError(result).contains("[lock-order]"))
  }

  @Test("tryLock never reports an order, even against the opposite blocking order", .runsExitTests)
  func tryLockDoesNotReport() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let first = Condition(name: "first")
      let second = Condition(name: "second")
      blocking {
        runConcurrently(1) { _ in first.withLock { second.withLock {} } }
        runConcurrently(1) { _ in
          second.withLock {
            guard first.tryLock() else { exit(2) }
            first.unlock()
          }
        }
      }
    }
    #expect(!standardError(result).contains("[lock-order]"))
  }

  @Test("a new lock that takes a destroyed lock's place is a new lock: the old orders do not report", .runsExitTests)
  func destroyedIdentityIsForgotten() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      blocking {
        for _ in 0..<100 {
          // Same names, same sites, likely the same addresses as the previous round's pair;
          // each round takes them in the opposite order to the last.
          do {
            let first = Condition(name: "reused A")
            let second = Condition(name: "reused B")
            first.withLock { second.withLock {} }
          }
          do {
            let first = Condition(name: "reused A")
            let second = Condition(name: "reused B")
            second.withLock { first.withLock {} }
          }
        }
      }
      guard LockDiagnostics.orderGraphSize() == 0 else { exit(2) }
    }
    #expect(!standardError(result).contains("[lock-order]"))
  }

  @Test("re-entering a recursive lock while holding another adds no order and reports nothing", .runsExitTests)
  func recursiveReentry() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let outer = HookedRecursiveLock(name: "recursive")
      let inner = Condition(name: "inner")
      blocking {
        outer.lock()
        inner.withLock {
          outer.lock()  // re-entry: not an order "inner before recursive"
          outer.unlock()
        }
        outer.unlock()
      }
    }
    #expect(!standardError(result).contains("[lock-order]"))
  }

  @Test(
    "a ConditionLock is diagnosed too: lock(whenCondition:) against a Condition in the other order reports",
    .runsExitTests)
  func conditionLockIsDiagnosed() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let queue = ConditionLock(condition: 1, name: "job queue")
      let registry = Condition(name: "registry")
      blocking {
        queue.lock(whenCondition: 1)
        registry.withLock {}
        queue.unlock(withCondition: 1)
        registry.withLock {
          queue.lock()
          queue.unlock()
        }
      }
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [lock-order]").count == 1)
    #expect(text.contains("takes \"job queue\" while holding \"registry\""))
  }

  @Test("in stop mode a lock-order cycle ends the process with a message naming the locks", .runsExitTests)
  func stopMode() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder, .stop)
      let first = Condition(name: "alpha")
      let second = Condition(name: "beta")
      blocking {
        first.withLock { second.withLock {} }
        second.withLock { first.withLock {} }
      }
      exit(0)
    }
    let text = standardError(result)
    #expect(text.contains("lock-order=stop"))
    #expect(text.contains("\"alpha\" while holding \"beta\""))
  }

  @Test(
    "a lock contended by 4 threads shows contended acquisitions and plausible waits; an uncontended one none",
    .runsExitTests)
  func contention() async {
    await #expect(processExitsWith: .success) {
      onlyContentionStatistics(sampling: 1)
      let hot = Condition(name: "hot")
      let cold = Condition(name: "cold")
      let perThread = 2_000
      let start = MonotonicInstant.now
      blocking {
        runConcurrently(4) { _ in
          for _ in 0..<perThread {
            hot.withLock {
              // A hold long enough for the others to find the lock taken.
              _ = sched_yield()
            }
          }
        }
        for _ in 0..<perThread { cold.withLock {} }
      }
      let elapsed = start.duration(to: .now)
      let figures = Diagnostics.lockContention()
      guard let hotFigures = figures.first(where: { $0.name == "hot" }),
        let coldFigures = figures.first(where: { $0.name == "cold" })
      else { exit(2) }
      guard hotFigures.acquisitions == 4 * perThread, hotFigures.holds == 4 * perThread else { exit(3) }
      guard hotFigures.contendedAcquisitions > 0, hotFigures.totalWait > .zero else { exit(4) }
      guard hotFigures.maxWait <= hotFigures.totalWait, hotFigures.totalWait < elapsed * 4 else { exit(5) }
      guard !hotFigures.blockingHolders.isEmpty else { exit(6) }
      guard coldFigures.acquisitions == perThread, coldFigures.contendedAcquisitions == 0,
        coldFigures.totalWait == .zero, coldFigures.blockingHolders.isEmpty
      else { exit(7) }
      // Sampling 1 in 10 scales each measurement by 10: the estimate of 10,000 acquisitions
      // is within 10 % (the random sampling interval's spread is about 2 % here).
      Diagnostics.resetLockContention()
      Diagnostics.lockContentionSampling = 10
      blocking { runConcurrently(1) { _ in for _ in 0..<10_000 { cold.withLock {} } } }
      guard let estimate = Diagnostics.lockContention().first?.acquisitions, (9_000...11_000).contains(estimate)
      else { exit(8) }
    }
  }

  @Test(
    "a sampling interval beyond a billion is lowered to it; contended samples of a huge interval do not overflow",
    .runsExitTests)
  func hugeSamplingInterval() async {
    await #expect(processExitsWith: .success) {
      onlyContentionStatistics(sampling: .max)
      // Each thread's first acquisition is its sample (its random gap to the next one is
      // drawn from 1 to 2N - 1), counted N times.
      let lock = Condition(name: "rare")
      blocking { runConcurrently(4) { _ in for _ in 0..<10 { lock.withLock { _ = sched_yield() } } } }
      guard Diagnostics.lockContentionSampling == 1_000_000_000 else { exit(2) }
      guard let figures = Diagnostics.lockContention().first(where: { $0.name == "rare" }),
        figures.acquisitions % 1_000_000_000 == 0, figures.acquisitions > 0
      else { exit(3) }
      Diagnostics.lockContentionSampling = Int.max / 2 + 1
      guard Diagnostics.lockContentionSampling == 1_000_000_000 else { exit(4) }
    }
  }

  @Test("locks of one name created and destroyed in turn add up in one entry", .runsExitTests)
  func destroyedLocksAddUpUnderTheirName() async {
    await #expect(processExitsWith: .success) {
      onlyContentionStatistics(sampling: 1)
      blocking {
        runConcurrently(1) { _ in
          for _ in 0..<100 {
            let lock = Lock(name: "churn")
            for _ in 0..<10 { lock.withLock {} }
          }
        }
      }
      let churn = Diagnostics.lockContention().filter { $0.name == "churn" }
      guard churn.count == 1, churn[0].acquisitions == 1_000, churn[0].holds == 1_000 else { exit(2) }
    }
  }

  @Test("sampling 1 in 10 estimates each of two locks taken in turn, not only one of them", .runsExitTests)
  func samplingSeesLocksTakenInTurn() async {
    await #expect(processExitsWith: .success) {
      onlyContentionStatistics(sampling: 10)
      let first = Lock(name: "first")
      let second = Lock(name: "second")
      blocking {
        runConcurrently(1) { _ in
          for _ in 0..<10_000 {
            first.withLock {}
            second.withLock {}
          }
        }
      }
      let figures = Diagnostics.lockContention()
      for name in ["first", "second"] {
        // A fixed countdown of 10 samples the same one of the two every time.
        guard let estimate = figures.first(where: { $0.name == name })?.acquisitions,
          (8_500...11_500).contains(estimate)
        else { exit(name == "first" ? 2 : 3) }
      }
    }
  }

  @Test("contention-dump=json writes the figures as JSON to standard error at exit", .runsExitTests)
  func dumpAtExit() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      setenv(Diagnostics.environmentVariable, "contention-dump=json,contention-sample=1", 1)
      let lock = Condition(name: "dumped")
      blocking { for _ in 0..<10 { lock.withLock {} } }
      exit(0)
    }
    let text = standardError(result)
    #expect(text.contains("{\"sampling\": 1, \"locks\": [{\"name\": \"dumped\", \"acquisitions\": 10, "))
    #expect(text.contains("\"contendedAcquisitions\": 0"))
  }
}
