import Glibc
import ProcessTestSupport
import Sync
import Testing

/// Standard error of an exit test, as text.
private func standardError(_ result: ExitTest.Result?) -> String {
  result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
}

/// The diagnostics hooks of the plain lock types (`Lock`, `RecursiveLock`): the same
/// detectors as ``LockDiagnosticsTests`` (which go through `Condition`), seen through each
/// type's own inlined operations. Each test switches a process-wide detector on, so each
/// runs as an exit test in a fresh process; findings go to standard error.
@Suite("Lock hooks", .timeLimit(.minutes(3)))
struct LockHooksTests {
  @Test("a Lock and a RecursiveLock taken in both orders are reported, naming both", .runsExitTests)
  func lockAndRecursiveLockBothOrders() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let plain = Lock(name: "plain")
      let recursive = RecursiveLock(name: "recursive")
      blocking {
        runConcurrently(1) { _ in plain.withLock { recursive.withLock {} } }
        runConcurrently(1) { _ in recursive.withLock { plain.withLock {} } }
      }
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [lock-order]").count == 1)
    #expect(text.contains("takes \"plain\" while holding \"recursive\""))
  }

  @Test("an unnamed Lock is reported by its creation site", .runsExitTests)
  func unnamedLockIsItsCreationSite() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let first = Lock()
      let second = Lock()
      // (Inside an exit test, `#line` gives the line of the expansion: the sites' lines are
      // checked by the next test.)
      blocking {
        first.withLock { second.withLock {} }
        second.withLock { first.withLock {} }
      }
    }
    let text = standardError(result)
    #expect(text.contains("takes \"SyncTests/LockHooksTests.swift:"))
    #expect(text.contains("while holding \"SyncTests/LockHooksTests.swift:"))
  }

  @Test("re-entering a RecursiveLock while holding another lock reports nothing", .runsExitTests)
  func recursiveReentryReportsNothing() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder, .stop)
      let outer = RecursiveLock(name: "outer")
      let inner = Lock(name: "inner")
      blocking {
        outer.withLock {
          inner.withLock {
            outer.withLock {}  // a re-entry, not the order "inner before outer"
            guard outer.tryLock() else { exit(2) }
            outer.unlock()
          }
        }
      }
    }
    #expect(!standardError(result).contains("[lock-order]"))
  }

  @Test("tryLock of a Lock never reports, even against the opposite blocking order", .runsExitTests)
  func lockTryLockNeverReports() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder, .stop)
      let first = Lock(name: "first")
      let second = Lock(name: "second")
      blocking {
        first.withLock { second.withLock {} }
        second.withLock {
          guard first.tryLock() else { exit(2) }
          first.unlock()
        }
      }
    }
    #expect(!standardError(result).contains("[lock-order]"))
  }

  @Test(
    "a Lock contended by 4 threads shows contended acquisitions; switched off, nothing more is counted", .runsExitTests)
  func lockContention() async {
    await #expect(processExitsWith: .success) {
      onlyDetector(nil)
      Diagnostics.lockContentionSampling = 1
      Diagnostics.collectsLockContention = true
      let hot = Lock(name: "hot")
      let perThread = 1_000
      blocking {
        runConcurrently(4) { _ in
          for _ in 0..<perThread { hot.withLock { _ = sched_yield() } }
        }
      }
      guard let figures = Diagnostics.lockContention().first(where: { $0.name == "hot" }) else { exit(2) }
      guard figures.acquisitions == 4 * perThread, figures.holds == 4 * perThread else { exit(3) }
      guard figures.contendedAcquisitions > 0, figures.totalWait > .zero else { exit(4) }
      Diagnostics.collectsLockContention = false
      blocking { for _ in 0..<100 { hot.withLock {} } }
      guard Diagnostics.lockContention().first(where: { $0.name == "hot" })?.acquisitions == 4 * perThread else {
        exit(5)
      }
    }
  }

  @Test("the first lock operation of a process reads the environment variable", .runsExitTests)
  func firstLockOperationReadsTheEnvironment() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      setenv(Diagnostics.environmentVariable, "lock-order", 1)
      let first = Lock(name: "env first")
      let second = Lock(name: "env second")
      blocking {
        first.withLock { second.withLock {} }
        second.withLock { first.withLock {} }
      }
    }
    #expect(standardError(result).contains("takes \"env first\" while holding \"env second\""))
  }

  @Test("a LockedValue and a SpinLock taken in both orders are reported, naming both", .runsExitTests)
  func lockedValueAndSpinLockBothOrders() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let counter = LockedValue(0, name: "counter")
      let spin = SpinLock(name: "spin")
      blocking {
        runConcurrently(1) { _ in counter.withLock { _ in spin.withLock {} } }
        runConcurrently(1) { _ in spin.withLock { counter.withLock { $0 += 1 } } }
      }
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [lock-order]").count == 1)
    #expect(text.contains("takes \"counter\" while holding \"spin\""))
  }

  @Test("locks without a name are called by their creation sites; name gives it")
  func unnamedLockedValueAndSpinLock() {
    // Each lock and the site it should report are made on one line.
    let (value, valueSite) = (LockedValue(0), "\(#fileID):\(#line)")
    let (spin, spinSite) = (SpinLock(), "\(#fileID):\(#line)")
    let (lock, lockSite) = (Lock(), "\(#fileID):\(#line)")
    let (recursive, recursiveSite) = (RecursiveLock(), "\(#fileID):\(#line)")
    #expect(valueSite.hasPrefix("SyncTests/LockHooksTests.swift:"))  // module/file:line
    #expect(value.name == valueSite)
    #expect(spin.name == spinSite)
    #expect(lock.name == lockSite)
    #expect(recursive.name == recursiveSite)
    #expect(LockedValue(0, name: "named").name == "named")
    #expect(Lock(name: "named lock").name == "named lock")
  }

  @Test(
    "synchronized sections on two objects taken in opposite orders stop the process, naming both call sites",
    .runsExitTests)
  func synchronizedOppositeOrdersReport() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder, .stop)
      final class Object: Sendable {}
      let first = Object()
      let second = Object()
      let bothInside = Latch(count: 2)
      // Each thread holds one object and then takes the other: a real deadlock, which the
      // lock-order check reports (and, in stop mode, ends) before the second thread blocks.
      blocking {
        runConcurrently(2) { index in
          let (mine, other): (Object, Object) = index == 0 ? (first, second) : (second, first)
          synchronized(mine) {
            bothInside.countDown()
            bothInside.wait()
            synchronized(other) {}
          }
        }
      }
    }
    let text = standardError(result)
    #expect(text.contains("threading-toolkit [lock-order]"))
    #expect(text.contains("SyncTests/LockHooksTests.swift:"))
  }

  @Test("the watchdog finds two threads deadlocked on a Lock and a LockedValue, naming both", .runsExitTests)
  func watchdogFindsLockAndLockedValue() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Diagnostics.deadlockCheckInterval = .milliseconds(20)
      onlyDetector(.deadlocks, .stop)
      let lock = Lock(name: "the lock")
      let value = LockedValue(0, name: "the value")
      let bothInside = Latch(count: 2)
      blocking {
        runConcurrently(2) { index in
          if index == 0 {
            lock.withLock {
              bothInside.countDown()
              bothInside.wait()
              value.withLock { $0 += 1 }
            }
          } else {
            value.withLock { _ in
              bothInside.countDown()
              bothInside.wait()
              lock.withLock {}
            }
          }
        }
      }
    }
    let text = standardError(result)
    #expect(text.contains("threading-toolkit [deadlocks]"))
    #expect(text.contains("\"the lock\""))
    #expect(text.contains("\"the value\""))
  }

  @Test(
    "a thread holding 40 locks at once keeps them all: taking the first while holding the last reports", .runsExitTests)
  func fortyHeldLocks() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let locks = (0..<40).map { Lock(name: "nested \($0)") }
      blocking {
        // More than a held list's first buffer: it grows, and every order is recorded.
        for lock in locks { lock.lock() }
        for lock in locks.reversed() { lock.unlock() }
        locks[39].withLock { locks[0].withLock {} }
      }
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [lock-order]").count == 1)
    #expect(text.contains("takes \"nested 0\" while holding \"nested 39\""))
  }

  @Test("a destroyed named lock's name leaves the name table", .runsExitTests)
  func namesLeaveWithTheirLocks() async {
    await #expect(processExitsWith: .success) {
      let before = LockNames.shared.count
      do {
        let locks = (0..<100).map { Lock(name: "short-lived \($0)") }
        guard LockNames.shared.count == before + 100, locks[7].name == "short-lived 7" else { exit(2) }
      }
      guard LockNames.shared.count == before else { exit(3) }
    }
  }
}
