import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

/// The shared layout every test here uses: a lock at 0, a condition at 64, then 32-bit words
/// (flags and data) from 128 on.
private struct SharedState {
  let region: SharedMemoryRegion
  let lock: SharedMemoryLock
  let condition: SharedMemoryCondition

  init() throws {
    region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
    lock = try SharedMemoryLock.initialize(at: region.address)
    condition = SharedMemoryCondition.initialize(at: region.address + 64)
    _ = (region.address + 128).bindMemory(to: UInt32.self, capacity: 16)
  }

  /// The 32-bit word number `index` after the lock and the condition.
  func word(_ index: Int) -> UnsafeMutablePointer<UInt32> {
    (region.address + 128).assumingMemoryBound(to: UInt32.self) + index
  }

  func load(_ index: Int) -> UInt32 { UInt32.atomicLoad(at: word(index), ordering: .acquiring) }
  func store(_ index: Int, _ value: UInt32) { UInt32.atomicStore(value, at: word(index), ordering: .releasing) }
}

/// Forks a child that runs `body` and leaves with `_exit(body())`; a 20-second alarm ends
/// a child that hangs. Returns its process id.
private func forkChild(_ body: () -> Int32) -> pid_t {
  let pid = fork()
  if pid == 0 {
    armAlarm(seconds: 20)
    _exit(body())
  }
  precondition(pid > 0, "fork failed: \(errno)")
  return pid
}

/// Kills `pid` with SIGKILL and reaps it; true when it died of that signal.
private func killAndReap(_ pid: pid_t) -> Bool {
  precondition(kill(pid, SIGKILL) == 0, "kill failed: \(errno)")
  let status = waitForChild(pid)
  return status & 0x7f == SIGKILL
}

/// A child body that takes the lock, writes a half-finished update (word 1 = 1), reports
/// it holds the lock (word 0 = 1) and waits to be killed.
private func holdUntilKilled(_ state: SharedState) -> Int32 {
  guard (try? state.lock.lock()) == .acquired else { return 10 }
  state.store(1, 1)
  state.store(0, 1)
  while true { pause() }
}

@Suite("SharedMemoryLock", .timeLimit(.minutes(3)))
struct SharedMemoryLockTests {
  @Test(
    "a holder process killed with SIGKILL: the next locker, in another process, is told and recovers the lock",
    .runsExitTests)
  func holderKilledNextLockerRecovers() async {
    await #expect(processExitsWith: .success) {
      blocking {
        guard let state = try? SharedState() else { exit(2) }
        let holder = forkChild { holdUntilKilled(state) }
        waitUntil("the holder holds the lock") { state.load(0) == 1 }
        // The next locker: a second process, possibly already blocked in lock().
        let next = forkChild {
          guard (try? state.lock.lock()) == .previousOwnerDied else { return 20 }
          guard state.load(1) == 1 else { return 21 }  // the dead holder's half-finished update
          state.store(1, 2)  // repaired
          state.lock.markConsistent()
          state.lock.unlock()
          return 0
        }
        guard killAndReap(holder) else { exit(3) }
        guard waitForChild(next) == 0 else { exit(4) }
        // Marked consistent: the lock works normally again, here too.
        guard (try? state.lock.lock()) == .acquired, state.load(1) == 2 else { exit(5) }
        state.lock.unlock()
        exit(0)
      }
    }
  }

  @Test(
    "unlocking after a holder died without markConsistent makes every later lock throw notRecoverable", .runsExitTests)
  func unlockWithoutMarkingMakesTheLockUnusable() async {
    await #expect(processExitsWith: .success) {
      blocking {
        guard let state = try? SharedState() else { exit(2) }
        let holder = forkChild { holdUntilKilled(state) }
        waitUntil("the holder holds the lock") { state.load(0) == 1 }
        guard killAndReap(holder) else { exit(3) }
        guard (try? state.lock.lock()) == .previousOwnerDied else { exit(4) }
        state.lock.unlock()  // gives up on the data
        do throws(SharedMemoryLockError) {
          _ = try state.lock.lock()
          exit(5)
        } catch {
          if error != .notRecoverable { exit(6) }
        }
        do throws(SharedMemoryLockError) {
          _ = try state.lock.tryLock()
          exit(7)
        } catch {
          if error != .notRecoverable { exit(8) }
        }
        // Every process sees it (and neither failed attempt above left the lock held).
        let other = forkChild {
          do throws(SharedMemoryLockError) {
            _ = try state.lock.lock(timeout: .seconds(2))
            return 30
          } catch {
            return error == .notRecoverable ? 0 : 31
          }
        }
        exit(waitForChild(other) == 0 ? 0 : 9)
      }
    }
  }

  @Test("a thread that ends holding the lock: the next locker is told (robustness is per thread)")
  func holderThreadEndsWithoutUnlocking() throws {
    let state = try SharedState()
    runConcurrently(1) { _ in
      _ = try? state.lock.lock()  // and the thread ends holding it
    }
    #expect(try state.lock.lock() == .previousOwnerDied)
    state.lock.markConsistent()
    state.lock.unlock()
    #expect(try state.lock.lock() == .acquired)
    state.lock.unlock()
  }

  @Test("withLock(recovering:) runs the recovery only after a holder died, then the body; false gives up for good")
  func withLockRecovering() throws {
    let state = try SharedState()
    var recoveries = 0
    #expect(
      try state.lock.withLock(recovering: {
        recoveries += 1
        return true
      }) { 1 } == 1)
    #expect(recoveries == 0)

    runConcurrently(1) { _ in _ = try? state.lock.lock() }
    #expect(
      try state.lock.withLock(recovering: {
        recoveries += 1
        return true
      }) { 2 } == 2)
    #expect(recoveries == 1)
    #expect(try state.lock.lock() == .acquired, "recover returned true: the lock was marked consistent")
    state.lock.unlock()

    runConcurrently(1) { _ in _ = try? state.lock.lock() }
    var bodyRan = false
    #expect(throws: SharedMemoryLockError.notRecoverable) {
      try state.lock.withLock(recovering: { false }) { bodyRan = true }
    }
    #expect(!bodyRan)
    #expect(throws: SharedMemoryLockError.notRecoverable) { try state.lock.lock() }
  }

  @Test("withLock(recovering:) whose recovery marks the lock consistent itself: marked once, the body runs")
  func recoveryMarksConsistentItself() throws {
    let state = try SharedState()
    runConcurrently(1) { _ in _ = try? state.lock.lock() }
    #expect(
      try state.lock.withLock(recovering: {
        state.lock.markConsistent()
        return true
      }) { 3 } == 3)
    #expect(try state.lock.lock() == .acquired)
    state.lock.unlock()
  }

  @Test("tryLock and a timed lock on a held lock return nil; the timed one waits until its deadline")
  func busyAndTimedOut() throws {
    let state = try SharedState()
    #expect(try state.lock.lock() == .acquired)
    let tried = AtomicBool(true)
    let timedOut = AtomicBool(false)
    let waitedLongEnough = AtomicBool(false)
    runConcurrently(1) { _ in
      tried.store((try? state.lock.tryLock()) != nil, ordering: .relaxed)
      let start = MonotonicInstant.now
      timedOut.store((try? state.lock.lock(timeout: .milliseconds(50))) == .some(nil), ordering: .relaxed)
      waitedLongEnough.store(MonotonicInstant.now - start >= .milliseconds(50), ordering: .relaxed)
    }
    #expect(!tried.load(ordering: .relaxed))
    #expect(timedOut.load(ordering: .relaxed))
    #expect(waitedLongEnough.load(ordering: .relaxed))
    state.lock.unlock()
    #expect(try state.lock.tryLock() == .acquired)
    state.lock.unlock()
  }

  @Test("the lock excludes threads of two processes: no increment of a shared counter is lost", .runsExitTests)
  func mutualExclusionAcrossProcesses() async {
    await #expect(processExitsWith: .success) {
      blocking {
        guard let state = try? SharedState() else { exit(2) }
        let rounds = 20_000
        func work() -> Bool {
          for _ in 0..<rounds {
            guard (try? state.lock.lock()) == .acquired else { return false }
            state.word(2).pointee &+= 1  // plain read-modify-write: only the lock protects it
            state.lock.unlock()
          }
          return true
        }
        let child = forkChild { work() ? 0 : 40 }
        guard work(), waitForChild(child) == 0 else { exit(3) }
        exit(state.word(2).pointee == UInt32(2 * rounds) ? 0 : 4)
      }
    }
  }

  @Test("tryLock by the thread that holds the lock returns nil (busy), as documented", .runsExitTests)
  func tryLockByTheHolderIsBusy() async {
    await #expect(processExitsWith: .success) {
      blocking {
        let state = try! SharedState()
        guard (try? state.lock.lock()) == .acquired else { exit(2) }
        let again: SharedMemoryLock.Acquisition??
        do throws(SharedMemoryLockError) { again = try state.lock.tryLock() } catch { again = nil }
        guard case .some(.none) = again else { exit(3) }
        state.lock.unlock()
        exit(0)
      }
    }
  }
}

@Suite("SharedMemoryCondition", .timeLimit(.minutes(3)))
struct SharedMemoryConditionTests {
  @Test("a signal in one process wakes a waiter in another", .runsExitTests)
  func signalWakesAnotherProcess() async {
    await #expect(processExitsWith: .success) {
      blocking {
        guard let state = try? SharedState() else { exit(2) }
        let waiter = forkChild {
          guard (try? state.lock.lock()) == .acquired else { return 50 }
          while state.word(2).pointee == 0 {
            guard let result = try? state.condition.wait(state.lock, timeout: .seconds(15)), !result.timedOut
            else { return 51 }
          }
          state.lock.unlock()
          return 0
        }
        // The waiter is registered (it releases the lock right after): now the change.
        waitUntil("the waiter waits") { UInt32.atomicLoad(at: state.condition.waiters, ordering: .relaxed) == 1 }
        guard (try? state.lock.lock()) == .acquired else { exit(3) }
        state.word(2).pointee = 1
        state.condition.signal()
        state.lock.unlock()
        exit(waitForChild(waiter) == 0 ? 0 : 4)
      }
    }
  }

  @Test("a waiter killed while waiting takes no signal with it: the next waiter is woken by one signal", .runsExitTests)
  func killedWaiterLosesNoSignal() async {
    await #expect(processExitsWith: .success) {
      blocking {
        guard let state = try? SharedState() else { exit(2) }
        let waitForFlag: () -> Int32 = {
          guard (try? state.lock.lock()) == .acquired else { return 60 }
          while state.word(2).pointee == 0 {
            guard let result = try? state.condition.wait(state.lock, timeout: .seconds(15)), !result.timedOut
            else { return 61 }
          }
          state.lock.unlock()
          return 0
        }
        let doomed = forkChild(waitForFlag)
        waitUntil("the first waiter waits") { UInt32.atomicLoad(at: state.condition.waiters, ordering: .relaxed) == 1 }
        // The waiter counts itself while it still holds the lock: killed before it lets go, it
        // would die holding the lock and the survivor would be told the owner died. Taking the
        // lock once proves it has let go.
        waitUntil("the first waiter releases the lock") {
          guard case .some(.some(.acquired)) = try? state.lock.tryLock() else { return false }
          state.lock.unlock()
          return true
        }
        guard killAndReap(doomed) else { exit(3) }
        let survivor = forkChild(waitForFlag)
        // The dead waiter's registration stays counted: two.
        waitUntil("the second waiter waits") { UInt32.atomicLoad(at: state.condition.waiters, ordering: .relaxed) == 2 }
        guard (try? state.lock.lock()) == .acquired else { exit(4) }
        state.word(2).pointee = 1
        state.condition.signal()  // one signal, and the only live waiter gets it
        state.lock.unlock()
        exit(waitForChild(survivor) == 0 ? 0 : 5)
      }
    }
  }

  @Test("a timed wait gives up at its deadline holding the lock; a passed deadline returns at once")
  func timedWait() throws {
    let state = try SharedState()
    #expect(try state.lock.lock() == .acquired)
    let start = MonotonicInstant.now
    let result = try state.condition.wait(state.lock, timeout: .milliseconds(50))
    #expect(result.timedOut)
    #expect(result.acquisition == .acquired)
    #expect(MonotonicInstant.now - start >= .milliseconds(50))
    let passed = try state.condition.wait(state.lock, before: .distantPast)
    #expect(passed.timedOut)
    state.lock.unlock()  // held throughout: this unlock would stop the process otherwise
  }

  @Test("a holder that dies while another thread waits: the waiter re-acquires with previousOwnerDied")
  func waiterReacquiresAfterHolderDied() throws {
    let state = try SharedState()
    let acquisition = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      if index == 0 {
        guard (try? state.lock.lock()) == .acquired else { return }
        while state.load(0) == 0 {
          guard let result = try? state.condition.wait(state.lock, timeout: .seconds(15)), !result.timedOut
          else { return }
          if result.acquisition == .previousOwnerDied {
            acquisition.store(2, ordering: .relaxed)
            state.lock.markConsistent()
          }
        }
        state.lock.unlock()
      } else {
        waitUntil("the waiter waits") { UInt32.atomicLoad(at: state.condition.waiters, ordering: .relaxed) == 1 }
        _ = try? state.lock.lock()
        state.store(0, 1)
        state.condition.signal()
        // This thread ends holding the lock.
      }
    }
    #expect(acquisition.load(ordering: .relaxed) == 2)
  }

  @Test("a wait whose deadline has passed, without holding the lock, is reported as misuse", .runsExitTests)
  func passedDeadlineWaitWithoutTheLockIsMisuse() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let state = try! SharedState()
        _ = try? state.condition.wait(state.lock, before: .distantPast)
        exit(0)  // reached: the misuse went unreported
      }
    }
  }

  @Test(
    "waiting on a lock acquired with previousOwnerDied before markConsistent() is reported as misuse", .runsExitTests)
  func waitBeforeMarkConsistentIsMisuse() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let state = try! SharedState()
        // A holder thread ends holding the lock.
        runConcurrently(1) { _ in _ = try? state.lock.lock() }
        guard (try? state.lock.lock()) == .previousOwnerDied else { exit(0) }
        _ = try? state.condition.wait(state.lock, timeout: .milliseconds(10))
        exit(0)
      }
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("before markConsistent()"))
    }
  }

  @Test(
    "the documented consumer, marking the lock consistent before waiting, leaves it usable after a holder died",
    .runsExitTests)
  func documentedConsumerKeepsTheLockUsable() async {
    await #expect(processExitsWith: .success) {
      blocking {
        let state = try! SharedState()
        runConcurrently(1) { _ in _ = try? state.lock.lock() }
        do throws(SharedMemoryLockError) {
          guard try state.lock.lock() == .previousOwnerDied else { exit(2) }
          state.lock.markConsistent()
          while state.load(0) == 0 {
            let result = try state.condition.wait(state.lock, timeout: .milliseconds(20))
            if result.acquisition == .previousOwnerDied { state.lock.markConsistent() }
            if result.timedOut { break }
          }
          state.lock.unlock()
          // Any process can still use the lock.
          guard try state.lock.lock() == .acquired else { exit(3) }
          state.lock.unlock()
        } catch {
          exit(1)
        }
        exit(0)
      }
    }
  }
}

@Suite("SharedMemoryLock misuse", .timeLimit(.minutes(3)))
struct SharedMemoryLockMisuseTests {
  @Test("lock() by the holder stops the process instead of deadlocking", .runsExitTests)
  func relock() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let state = try! SharedState()
        _ = try? state.lock.lock()
        _ = try? state.lock.lock()
      }
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("SharedMemoryLock misuse"))
    }
  }

  @Test("unlock() by a thread that does not hold the lock stops the process", .runsExitTests)
  func foreignUnlock() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let state = try! SharedState()
        _ = try? state.lock.lock()
        runConcurrently(1) { _ in state.lock.unlock() }
      }
    }.map { result in
      #expect(
        String(decoding: result.standardErrorContent, as: UTF8.self).contains(
          "unlock() by a thread that does not hold the lock"))
    }
  }

  @Test("markConsistent() when no previous owner died stops the process", .runsExitTests)
  func markConsistentWithoutDeath() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let state = try! SharedState()
        _ = try? state.lock.lock()
        state.lock.markConsistent()
      }
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("markConsistent()"))
    }
  }

  @Test(
    "waiting on the condition without holding the lock stops the process before it counts as a waiter", .runsExitTests)
  func waitWithoutLock() async {
    // The condition's own check names the misuse: it runs before the wait raises the shared
    // waiter count, which a stop after it would leave raised in the mapping for good.
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let state = try! SharedState()
        _ = try? state.condition.wait(state.lock, timeout: .seconds(5))
      }
    }.map { result in
      let message = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(message.contains("SharedMemoryCondition") && message.contains("wait without holding the lock"))
    }
  }

  @Test("a misaligned address stops the process", .runsExitTests)
  func misaligned() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let state = try! SharedState()
      _ = SharedMemoryLock(existingAt: state.region.address + 3)
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("not aligned"))
    }
  }
}

@Suite("SharedMemoryRegion", .timeLimit(.minutes(3)))
struct SharedMemoryRegionTests {
  @Test("a file mapped twice: the lock and the condition work through either mapping (process-shared futexes)")
  func fileMappedTwice() throws {
    var template = Array("/tmp/shared-memory-lock-XXXXXX".utf8CString)
    let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
    try #require(descriptor >= 0)
    defer {
      close(descriptor)
      template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
    }
    try #require(ftruncate(descriptor, 4096) == 0)
    let first = try SharedMemoryRegion(mapping: descriptor, byteCount: 4096)
    let second = try SharedMemoryRegion(mapping: descriptor, byteCount: 4096)
    #expect(first.address != second.address)
    let lockThroughFirst = try SharedMemoryLock.initialize(at: first.address)
    let conditionThroughFirst = SharedMemoryCondition.initialize(at: first.address + 64)
    let lockThroughSecond = SharedMemoryLock(existingAt: second.address)
    let conditionThroughSecond = SharedMemoryCondition(existingAt: second.address + 64)
    _ = (first.address + 128).bindMemory(to: UInt32.self, capacity: 1)
    _ = (second.address + 128).bindMemory(to: UInt32.self, capacity: 1)

    #expect(try lockThroughSecond.lock() == .acquired)
    let busyThroughFirst = AtomicBool(false)
    runConcurrently(1) { _ in
      busyThroughFirst.store((try? lockThroughFirst.tryLock()) == .some(nil), ordering: .relaxed)
    }
    #expect(busyThroughFirst.load(ordering: .relaxed), "the same lock seen through the other mapping")
    lockThroughSecond.unlock()

    // A waiter sleeping through one mapping is woken by a signal through the other: the
    // kernel matches the futex by the file's page, not by the virtual address.
    let woken = AtomicBool(false)
    runConcurrently(2) { index in
      let flagThroughFirst = (first.address + 128).assumingMemoryBound(to: UInt32.self)
      let flagThroughSecond = (second.address + 128).assumingMemoryBound(to: UInt32.self)
      if index == 0 {
        guard (try? lockThroughFirst.lock()) == .acquired else { return }
        while UInt32.atomicLoad(at: flagThroughFirst, ordering: .relaxed) == 0 {
          guard let result = try? conditionThroughFirst.wait(lockThroughFirst, timeout: .seconds(10)) else { return }
          if result.timedOut { break }  // the signal did not arrive: `woken` stays false
          woken.store(UInt32.atomicLoad(at: flagThroughFirst, ordering: .relaxed) == 1, ordering: .relaxed)
        }
        lockThroughFirst.unlock()
      } else {
        waitUntil("the waiter waits") {
          UInt32.atomicLoad(at: conditionThroughSecond.waiters, ordering: .relaxed) == 1
        }
        guard (try? lockThroughSecond.lock()) == .acquired else { return }
        UInt32.atomicStore(1, at: flagThroughSecond, ordering: .relaxed)
        conditionThroughSecond.signal()
        lockThroughSecond.unlock()
      }
    }
    #expect(woken.load(ordering: .relaxed))
  }
}
