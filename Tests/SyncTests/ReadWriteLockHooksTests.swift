import Glibc
import ProcessTestSupport
import Sync
import Testing

/// Standard error of an exit test, as text.
private func standardError(_ result: ExitTest.Result?) -> String {
  result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
}

/// The diagnostics hooks of ``ReadWriteLock``: lock order (read and write acquisitions), the
/// deadlock watchdog (a writer waiting for readers) and contention statistics. Each test
/// switches a process-wide detector on, so each runs as an exit test in a fresh process;
/// findings go to standard error.
@Suite("Read-write lock hooks", .timeLimit(.minutes(3)))
struct ReadWriteLockHooksTests {
  @Test("a ReadWriteLock read-locked before a Lock and write-locked after it is reported, naming both", .runsExitTests)
  func readAndWriteOrdersAgainstALock() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let table = ReadWriteLock(name: "table")
      let plain = Lock(name: "plain")
      blocking {
        runConcurrently(1) { _ in table.withReadLock { plain.withLock {} } }
        runConcurrently(1) { _ in plain.withLock { table.withWriteLock {} } }
      }
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [lock-order]").count == 1)
    #expect(text.contains("takes \"table\" while holding \"plain\""))
  }

  @Test("readLock, writeLock(timeout:) and readLock(before:) are seen by the lock-order detector too", .runsExitTests)
  func otherAcquisitionsAreOrdered() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let first = ReadWriteLock(name: "first")
      let second = ReadWriteLock(name: "second")
      blocking {
        // first before second...
        first.readLock()
        guard second.writeLock(timeout: .seconds(10)) else { exit(2) }
        second.unlock()
        first.unlock()
        // ...then first taken while holding second: reported.
        second.readLock()
        guard first.readLock(before: .after(.seconds(10))) else { exit(3) }
        first.unlock()
        second.unlock()
      }
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [lock-order]").count == 1)
    #expect(text.contains("takes \"first\" while holding \"second\""))
  }

  @Test("a read lock taken again by a thread that holds one adds no order and reports nothing", .runsExitTests)
  func readReentryIsNotAnOrder() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder, .stop)
      let table = ReadWriteLock(name: "table")
      let inner = Lock(name: "inner")
      blocking {
        table.withReadLock {
          inner.withLock {
            // Not the order "inner before table": this thread already reads the table.
            table.withReadLock {}
            guard table.tryReadLock() else { exit(2) }
            table.unlock()
          }
        }
      }
    }
    #expect(!standardError(result).contains("[lock-order]"))
  }

  @Test(
    "the watchdog finds a writer waiting for a reader that waits for the writer's lock, naming the readers",
    .runsExitTests)
  func watchdogFindsWriterWaitingForReaders() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Diagnostics.deadlockCheckInterval = .milliseconds(20)
      onlyDetector(.deadlocks, .stop)
      let table = ReadWriteLock(name: "table")
      let plain = Lock(name: "plain")
      let bothInside = Latch(count: 2)
      blocking {
        runConcurrently(2) { index in
          if index == 0 {
            table.withReadLock {
              bothInside.countDown()
              bothInside.wait()
              plain.withLock {}
            }
          } else {
            plain.withLock {
              bothInside.countDown()
              bothInside.wait()
              table.withWriteLock {}
            }
          }
        }
      }
    }
    let text = standardError(result)
    #expect(text.contains("threading-toolkit [deadlocks]"))
    #expect(text.contains("waits for the readers of \"table\" (blocked readers: "))
    #expect(text.contains("waits for \"plain\" (held by "))
    #expect(text.contains("holds \"table\" (read)"))
  }

  @Test(
    "the watchdog finds a reader queued behind a waiting writer whose readers wait for the reader's lock",
    .runsExitTests)
  func watchdogFindsReaderBehindWaitingWriter() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Diagnostics.deadlockCheckInterval = .milliseconds(20)
      onlyDetector(.deadlocks, .stop)
      let table = ReadWriteLock(name: "table")
      let plain = Lock(name: "plain")
      let readerIn = Latch(count: 1)
      let lateReaderIn = Latch(count: 1)
      blocking {
        runConcurrently(3) { index in
          switch index {
          case 0:
            // Reads the table, then waits for "plain", held by the late reader.
            table.withReadLock {
              readerIn.countDown()
              lateReaderIn.wait()
              plain.withLock {}
            }
          case 1:
            // Waits for the first reader to leave.
            readerIn.wait()
            table.withWriteLock {}
          default:
            // Holds "plain", then queues behind the waiting writer (writers go first).
            plain.withLock {
              readerIn.wait()
              // A read lock is refused once the writer waits (writers go first).
              while table.tryReadLock() {
                table.unlock()
                _ = sched_yield()
              }
              lateReaderIn.countDown()
              table.withReadLock {}
            }
          }
        }
      }
    }
    let text = standardError(result)
    #expect(text.contains("deadlock: 3 threads wait for each other"))
    #expect(text.contains("waits for a read lock of \"table\" (behind the waiting writers "))
    #expect(text.contains("waits for the readers of \"table\""))
  }

  @Test("a ReadWriteLock write-locked by 4 threads shows contended acquisitions", .runsExitTests)
  func contention() async {
    await #expect(processExitsWith: .success) {
      onlyContentionStatistics(sampling: 1)
      let hot = ReadWriteLock(name: "hot")
      let cold = ReadWriteLock(name: "cold")
      let perThread = 2_000
      blocking {
        runConcurrently(4) { _ in
          for _ in 0..<perThread {
            hot.withWriteLock { _ = sched_yield() }
          }
        }
        for _ in 0..<perThread { cold.withReadLock {} }
      }
      let figures = Diagnostics.lockContention()
      guard let hotFigures = figures.first(where: { $0.name == "hot" }),
        let coldFigures = figures.first(where: { $0.name == "cold" })
      else { exit(2) }
      guard hotFigures.acquisitions == 4 * perThread, hotFigures.holds == 4 * perThread else { exit(3) }
      guard hotFigures.contendedAcquisitions > 0, hotFigures.totalWait > .zero else { exit(4) }
      guard coldFigures.acquisitions == perThread, coldFigures.contendedAcquisitions == 0 else { exit(5) }
    }
  }

  @Test("a destroyed named ReadWriteLock's name leaves the name table", .runsExitTests)
  func namesLeaveWithTheirLocks() async {
    await #expect(processExitsWith: .success) {
      let before = LockNames.shared.count
      do {
        let locks = (0..<10).map { ReadWriteLock(name: "short-lived \($0)") }
        guard LockNames.shared.count == before + 10, locks[7].name == "short-lived 7" else { exit(2) }
      }
      guard LockNames.shared.count == before else { exit(3) }
    }
  }
}
