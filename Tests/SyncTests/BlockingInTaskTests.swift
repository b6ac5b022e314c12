import Glibc
import ProcessTestSupport
import Sync
import Testing

@testable import Sync

/// Standard error of an exit test, as text.
private func standardError(_ result: ExitTest.Result?) -> String {
  result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
}

/// Exit-test setup: ``Diagnostics/Kind/blockingInTask`` alone, with a 20 ms threshold; each
/// finding goes to standard error, and `onReport` runs (on the watchdog thread) for each of
/// this kind.
private func watchBlockingInTasks(onReport: @escaping @Sendable () -> Void) {
  Diagnostics.blockingInTaskThreshold = .milliseconds(20)
  Diagnostics.reportHandler = { finding in
    Diagnostics.standardErrorHandler(finding)
    if finding.kind == .blockingInTask { onReport() }
  }
  onlyDetector(.blockingInTask)
}

/// Exit-test body: a thread holds "busy" until the watchdog has reported (or 10 seconds
/// passed) while another thread runs `blockedWaiter`, which blocks on it; the finding
/// handler also writes to standard error. `blockedWaiter` gets the lock and the latch that
/// opens once the lock is held.
private func holdWhileBlocked(_ blockedWaiter: @escaping @Sendable (Lock, Latch) -> Void) {
  let reported = Semaphore()
  watchBlockingInTasks { reported.signal() }
  let busy = Lock(name: "busy")
  let held = Latch(count: 1)
  runConcurrently(2) { index in
    if index == 0 {
      busy.withLock {
        held.countDown()
        // Released when the wait was reported, or after 10 s (a missed report).
        _ = reported.wait(timeout: .seconds(10))
      }
    } else {
      blockedWaiter(busy, held)
    }
  }
}

/// ``Diagnostics/Kind/blockingInTask``: a thread running a task blocked in a toolkit lock or
/// condition wait longer than the threshold. Each test switches the process-wide detector
/// on, so each runs as an exit test in a fresh process; findings go to standard error.
@Suite("Blocking in a task", .timeLimit(.minutes(3)))
struct BlockingInTaskTests {
  @Test("the environment grammar takes blocking-in-task and blocking-ms, and all leaves the kind off")
  func grammar() throws {
    let settings = try Diagnostics.parse("blocking-in-task=stop,blocking-ms=25").get()
    #expect(settings.mode(of: .blockingInTask) == .stop)
    #expect(settings.blockingInTaskThreshold == .milliseconds(25))
    let all = try Diagnostics.parse("all=stop").get()
    #expect(all.mode(of: .deadlocks) == .stop)
    #expect(all.mode(of: .blockingInTask) == .off)
    #expect(!Diagnostics.Kind.all.contains(.blockingInTask))
    if case .failure(let error) = Diagnostics.parse("blocking-ms=0") {
      #expect(error.message.contains("blocking-ms"))
    } else {
      Issue.record("blocking-ms=0 was accepted")
    }
  }

  @Test(
    "a watchdog that cannot start is reported under blocking-in-task when only that kind asked for it, and is retried",
    .runsExitTests)
  func watchdogStartFailureIsReportedUnderTheKindThatAskedForIt() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(nil)
      Diagnostics.reportHandler = Diagnostics.standardErrorHandler
      let started = Diagnostics.OptionSlot.watchdogStarted.pointer
      let failure = Diagnostics.OptionSlot.watchdogStartFailureForTesting.pointer
      // As in a process whose watchdog never started (the environment may have started one).
      UInt64.atomicStore(0, at: started, ordering: .relaxed)
      UInt64.atomicStore(UInt64(EAGAIN), at: failure, ordering: .relaxed)
      Diagnostics.setMode(.report, for: .blockingInTask)
      let retryable = UInt64.atomicLoad(at: started, ordering: .relaxed) == 0
      UInt64.atomicStore(0, at: failure, ordering: .relaxed)
      // The next switching-on tries again, and starts it.
      Diagnostics.setMode(.report, for: .blockingInTask)
      let startedNow = UInt64.atomicLoad(at: started, ordering: .relaxed) == 1
      exit(retryable ? (startedNow ? 0 : 4) : 3)
    }
    let output = standardError(result)
    #expect(output.contains("blocking-in-task"), "\(output)")
    #expect(output.contains("could not start"), "\(output)")
  }

  @Test(
    "a task blocked in a Lock longer than the threshold is reported once, while blocked, naming the lock",
    .runsExitTests)
  func taskBlockedInALockIsReported() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      holdWhileBlocked { busy, held in
        let done = Semaphore()
        Task.detached {
          blocking {
            // Not `held.wait()`: a latch wait inside the task is watched too, and one that
            // outlasted the threshold on a loaded machine would be a second report.
            while !held.isOpen { sched_yield() }
            // Blocks until the holder, woken by the report, lets go.
            busy.withLock {}
          }
          done.signal()
        }
        done.wait()
      }
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [blocking-in-task]").count == 1)
    #expect(text.contains("has blocked inside a task for"))
    #expect(text.contains("waiting for the lock \"busy\""))
    #expect(text.contains("threshold 20"))
  }

  @Test("a task in a timed Condition wait longer than the threshold is reported, naming the condition", .runsExitTests)
  func taskInAConditionWaitIsReported() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      let queue = Condition(name: "queue")
      let reported = Gate()
      watchBlockingInTasks {
        reported.open()
        queue.withLock { queue.broadcast() }
      }
      // Awaited, not waited for: a wait inside this exit test's own task would be reported
      // too.
      await Task.detached {
        blocking {
          queue.withLock {
            // One wait until the report's broadcast (10 s: a missed report).
            while !reported.isOpen {
              guard queue.wait(timeout: .seconds(10)) else { break }
            }
          }
        }
      }.value
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [blocking-in-task]").count == 1)
    #expect(text.contains("waiting for a notification of the condition of \"queue\""))
    #expect(text.contains("timed: gives up in"))
    // The condition's lock is released for the wait.
    #expect(text.contains("holds nothing"))
  }

  @Test(
    "a task in a ConditionVariable wait on a Lock longer than the threshold is reported, naming the lock",
    .runsExitTests)
  func taskInAConditionVariableWaitIsReported() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      let mutex = Lock(name: "queue mutex")
      let notEmpty = ConditionVariable()
      let reported = Gate()
      watchBlockingInTasks {
        reported.open()
        mutex.withLock { notEmpty.broadcast() }
      }
      await Task.detached {
        blocking {
          mutex.withLock {
            // One wait until the report's broadcast (10 s: a missed report).
            _ = notEmpty.wait(mutex, until: { reported.isOpen }, timeout: .seconds(10))
          }
        }
      }.value
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [blocking-in-task]").count == 1)
    #expect(text.contains("waiting for a notification of the condition of \"queue mutex\""))
    // The mutex is released for the wait.
    #expect(text.contains("holds nothing"))
  }

  @Test("a plain thread blocked in a Lock as long is not reported", .runsExitTests)
  func plainThreadIsNotReported() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      Diagnostics.blockingInTaskThreshold = .milliseconds(5)
      onlyDetector(.blockingInTask)
      let busy = Lock(name: "busy")
      let held = Latch(count: 1)
      blocking {
        runConcurrently(2) { index in
          if index == 0 {
            busy.withLock {
              held.countDown()
              // Keeps the other thread blocked for ten thresholds (a duration to wait out,
              // not a synchronization).
              _ = Semaphore().wait(timeout: .milliseconds(50))
            }
          } else {
            held.wait()
            busy.withLock {}
          }
        }
      }
    }
    #expect(!standardError(result).contains("[blocking-in-task]"))
  }

  @Test(
    "a task waiting for a Semaphore permit longer than the threshold is reported once, while it waits", .runsExitTests)
  func taskWaitingForASemaphoreIsReported() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      let permit = Semaphore(name: "permit")
      // The report gives the permit, so the wait ends once it was reported (or after 10 s).
      watchBlockingInTasks { permit.signal() }
      await Task.detached { blocking { _ = permit.wait(timeout: .seconds(10)) } }.value
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [blocking-in-task]").count == 1)
    #expect(text.contains("has blocked inside a task for"))
    #expect(text.contains("waiting for a permit of the Semaphore \"permit\""))
    #expect(text.contains("timed: gives up in"))
    #expect(text.contains("holds nothing"))
  }

  @Test(
    "a task waiting for a Latch or at a ThreadBarrier longer than the threshold is reported, naming the wait",
    .runsExitTests)
  func taskWaitingForALatchOrABarrierIsReported() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      let opening = Latch(count: 1, name: "opening")
      let barrier = ThreadBarrier(parties: 2, name: "round")
      let barrierReported = Semaphore()
      // The first report opens the latch; the second lets a plain thread arrive at the
      // barrier (the watchdog must not block in it).
      watchBlockingInTasks {
        if !opening.isOpen {
          opening.countDown()
        } else {
          barrierReported.signal()
        }
      }
      // The other party, on a plain thread: arrives once the barrier wait was reported
      // (after 10 s: a missed report). Its task only joins that thread (a pthread join,
      // which the detector does not watch).
      let otherParty = Task.detached {
        runConcurrently(1) { _ in
          _ = barrierReported.wait(timeout: .seconds(10))
          barrier.arriveAndWait()
        }
      }
      await Task.detached {
        blocking {
          _ = opening.wait(timeout: .seconds(10))
          barrier.arriveAndWait()
        }
      }.value
      await otherParty.value
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [blocking-in-task]").count == 2)
    #expect(text.contains("waiting for the opening of the Latch \"opening\""))
    #expect(text.contains("waiting for the other parties of the ThreadBarrier \"round\""))
  }

  @Test(
    "semaphore, latch and barrier waits are not reported while the kind is off, nor on a plain thread", .runsExitTests)
  func waitsOutsideTasksOrWithTheKindOffAreNotReported() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      Diagnostics.blockingInTaskThreshold = .milliseconds(5)
      Diagnostics.setMode(.off, for: .blockingInTask)
      onlyDetector(.deadlocks)
      // The kind off: a task waits ten thresholds for a permit that never comes (a duration
      // to wait out, not a synchronization).
      await Task.detached { blocking { _ = Semaphore().wait(timeout: .milliseconds(50)) } }.value
      // The kind on: a plain thread waits as long, for a semaphore, a latch and a barrier.
      onlyDetector(.blockingInTask)
      let barrier = ThreadBarrier(parties: 2)
      runConcurrently(2) { index in
        if index == 0 {
          _ = Semaphore().wait(timeout: .milliseconds(50))
          _ = Latch(count: 1).wait(timeout: .milliseconds(50))
        }
        // The other thread waits here for both waits above.
        barrier.arriveAndWait()
      }
    }
    #expect(!standardError(result).contains("[blocking-in-task]"))
  }

  @Test("a Semaphore, Latch or ThreadBarrier without a name is called by its creation site; name gives it")
  func waitPrimitivesAreNamedByTheirCreationSites() {
    // Each object and the site it should report are made on one line.
    let (semaphore, semaphoreSite) = (Semaphore(), "\(#fileID):\(#line)")
    let (latch, latchSite) = (Latch(count: 1), "\(#fileID):\(#line)")
    let (barrier, barrierSite) = (ThreadBarrier(parties: 1), "\(#fileID):\(#line)")
    #expect(semaphoreSite.hasPrefix("SyncTests/BlockingInTaskTests.swift:"))
    #expect(semaphore.name == semaphoreSite)
    #expect(latch.name == latchSite)
    #expect(barrier.name == barrierSite)
    #expect(Semaphore(value: 2, name: "slots").name == "slots")
    #expect(Latch(count: 0, name: "done").name == "done")
    #expect(ThreadBarrier(parties: 3, name: "step").name == "step")
  }
}
