import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

/// Waits, polling, until `condition()` holds; stops the test process after 20 s (a hang
/// fails fast). For states only the kernel changes (a thread asleep in the kernel), which no
/// primitive can signal.
func waitUntil(
  _ what: String, file: StaticString = #file, line: UInt = #line, _ condition: () -> Bool
) {
  let giveUp = monotonicSeconds() + 20
  while !condition() {
    if monotonicSeconds() > giveUp { fatalError("waitUntil: \(what) not reached within 20 s", file: file, line: line) }
    sched_yield()
  }
}

/// The calling thread's kernel thread id, asked of the kernel (`/proc/thread-self` links to
/// `<pid>/task/<tid>`), independently of the toolkit's cached copy.
func kernelThreadID() -> Int32 {
  var buffer = [CChar](repeating: 0, count: 64)
  let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
  precondition(length > 0, "readlink(/proc/thread-self) failed: \(errno)")
  let link = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  guard let slash = link.lastIndex(of: "/"), let id = Int32(link[link.index(after: slash)...]) else {
    fatalError("unexpected /proc/thread-self link: \(link)")
  }
  return id
}

@Suite("PriorityInheritanceLock", .timeLimit(.minutes(3)))
struct PriorityInheritanceLockTests {
  @Test("the lock word holds the holder's kernel thread id while held, and nothing once free")
  func wordHoldsOwnersThreadID() throws {
    let lock = try PriorityInheritanceLock()
    #expect(lock.ownerThreadID == nil)
    #expect(!lock.isHeldByCurrentThread)
    lock.lock()
    #expect(lock.ownerThreadID == kernelThreadID())
    #expect(lock.isHeldByCurrentThread)
    #expect(!lock.hasWaiters)
    let seenFromAnotherThread = AtomicInteger<Int32>(0)
    let heldThere = AtomicBool(true)
    runConcurrently(1) { _ in
      seenFromAnotherThread.store(lock.ownerThreadID ?? -1, ordering: .relaxed)
      heldThere.store(lock.isHeldByCurrentThread, ordering: .relaxed)
    }
    #expect(seenFromAnotherThread.load(ordering: .relaxed) == kernelThreadID())
    #expect(!heldThere.load(ordering: .relaxed))
    lock.unlock()
    #expect(lock.ownerThreadID == nil)
  }

  @Test("a contended unlock hands the lock to the waiter: the kernel writes the waiter's thread id")
  func contendedHandOffWritesWaitersThreadID() throws {
    let lock = try PriorityInheritanceLock()
    let waiterID = AtomicInteger<Int32>(0)
    let ownerSeenByWaiter = AtomicInteger<Int32>(0)
    let ownerSeenByHolder = AtomicInteger<Int32>(0)
    let held = Gate()
    runConcurrently(2) { index in
      if index == 0 {
        held.wait()
        waiterID.store(kernelThreadID(), ordering: .relaxed)
        lock.lock()
        ownerSeenByWaiter.store(lock.ownerThreadID ?? -1, ordering: .relaxed)
        lock.unlock()
      } else {
        lock.lock()
        held.open()
        // The waiter sleeps in the kernel once the kernel has set the waiters bit.
        waitUntil("the waiters bit") { lock.hasWaiters }
        ownerSeenByHolder.store(lock.ownerThreadID ?? -1, ordering: .relaxed)
        #expect(ownerSeenByHolder.load(ordering: .relaxed) == kernelThreadID(), "the waiters bit leaves the owner's id")
        lock.unlock()
      }
    }
    #expect(ownerSeenByWaiter.load(ordering: .relaxed) == waiterID.load(ordering: .relaxed))
    #expect(lock.ownerThreadID == nil)
    #expect(!lock.hasWaiters, "the last waiter's unlock went through the kernel, which cleared the word")
  }

  @Test("four threads incrementing under the lock lose no increment")
  func mutualExclusion() throws {
    // Contended hand-offs go through the kernel; fewer rounds keep the test short.
    expectExactCount(try PriorityInheritanceLock(), threads: 4, increments: 5_000)
  }

  @Test("tryLock fails while the lock is held, also for the holder, and never blocks")
  func tryLockWhileHeld() throws {
    let lock = try PriorityInheritanceLock()
    #expect(lock.tryLock())
    #expect(!lock.tryLock())
    let otherGotIt = AtomicBool(true)
    runConcurrently(1) { _ in otherGotIt.store(lock.tryLock(), ordering: .relaxed) }
    #expect(!otherGotIt.load(ordering: .relaxed))
    lock.unlock()
    #expect(lock.withLockIfAvailable { 7 } == 7)
  }

  @Test(
    "a timed lock on a held lock gives up at its monotonic deadline, and succeeds when released in time",
    arguments: [PriorityInheritanceFutex.TimedWait.monotonic, .realtimeSlices])
  func timedLock(timedWait: PriorityInheritanceFutex.TimedWait) throws {
    if timedWait == .monotonic, try PriorityInheritanceFutex.support.get() != .monotonic {
      return  // a kernel before 5.14: only the wall-clock fallback exists
    }
    let lock = PriorityInheritanceLock(timedWait: timedWait)
    lock.lock()
    let timedOut = AtomicBool(false)
    let waitedLongEnough = AtomicBool(false)
    runConcurrently(1) { _ in
      let start = MonotonicInstant.now
      timedOut.store(!lock.lock(timeout: .milliseconds(60)), ordering: .relaxed)
      waitedLongEnough.store(MonotonicInstant.now - start >= .milliseconds(60), ordering: .relaxed)
    }
    #expect(timedOut.load(ordering: .relaxed))
    #expect(waitedLongEnough.load(ordering: .relaxed), "never gives up before the deadline")
    #expect(lock.isHeldByCurrentThread, "a timed-out waiter leaves the holder's lock alone")
    lock.unlock()

    // Released while another thread waits with a generous deadline: that thread gets it.
    let acquired = AtomicBool(false)
    let held = Gate()
    runConcurrently(2) { index in
      if index == 0 {
        held.wait()
        let got = lock.lock(timeout: .seconds(30))
        acquired.store(got, ordering: .relaxed)
        if got { lock.unlock() }
      } else {
        lock.lock()
        held.open()
        waitUntil("the waiters bit") { lock.hasWaiters }
        lock.unlock()
      }
    }
    #expect(acquired.load(ordering: .relaxed))
    #expect(lock.lock(before: .distantPast), "a past deadline still makes one attempt, which takes a free lock")
    lock.unlock()
  }

  @Test("a thread forked by the holder's process takes the lock with its own thread id", .runsExitTests)
  func forkedChildUsesItsOwnThreadID() async {
    await #expect(processExitsWith: .success) {
      blocking {
        guard let before = try? PriorityInheritanceLock() else { exit(2) }
        before.lock()  // the calling thread's id is cached now
        before.unlock()
        let child = fork()
        if child == 0 {
          armAlarm(seconds: 20)
          guard let lock = try? PriorityInheritanceLock() else { _exit(2) }
          lock.lock()
          let ownedByMe = lock.ownerThreadID == kernelThreadID() && lock.isHeldByCurrentThread
          lock.unlock()
          _exit(ownedByMe ? 0 : 1)
        }
        precondition(child > 0, "fork failed: \(errno)")
        exit(waitForChild(child) == 0 ? 0 : 1)
      }
    }
  }
}

@Suite("PriorityInheritanceLock misuse", .timeLimit(.minutes(3)))
struct PriorityInheritanceLockMisuseTests {
  @Test("unlock() from a thread that does not hold the lock stops the process", .runsExitTests)
  func unlockByAnotherThread() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let lock = try! PriorityInheritanceLock()
        lock.lock()
        runConcurrently(1) { _ in lock.unlock() }
      }
    }.map { result in
      #expect(
        String(decoding: result.standardErrorContent, as: UTF8.self)
          .contains("PriorityInheritanceLock misuse: unlock() from a thread that does not hold the lock"))
    }
  }

  @Test("unlock() of an unlocked lock stops the process", .runsExitTests)
  func unlockUnlocked() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let lock = try! PriorityInheritanceLock()
      lock.unlock()
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("not locked"))
    }
  }

  @Test("lock() by the holder stops the process instead of deadlocking, also with a deadline", .runsExitTests)
  func relockByHolder() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let lock = try! PriorityInheritanceLock()
        lock.lock()
        lock.lock()
      }
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("self-deadlock"))
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = try! PriorityInheritanceLock()
        lock.lock()
        _ = lock.lock(timeout: .seconds(5))
      }
    }
  }

  @Test("a thread that ends holding the lock stops the process", .runsExitTests)
  func holderThreadEnded() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let lock = try! PriorityInheritanceLock()
        runConcurrently(1) { _ in lock.lock() }
        lock.lock()
      }
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("a thread ended holding 1 lock"))
    }
  }

  @Test("a thread that ends holding the lock while another sleeps waiting for it stops the process", .runsExitTests)
  func holderThreadEndedWithAWaiterAsleep() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let lock = try! PriorityInheritanceLock()
        let holding = Gate()
        let holderMayEnd = Gate()
        runConcurrently(3) { index in
          switch index {
          case 0:
            lock.lock()
            holding.open()
            holderMayEnd.wait()
          // Ends holding the lock; the kernel would hand it to the sleeping waiter.
          case 1:
            holding.wait()
            lock.lock()
            lock.unlock()
          default:
            holding.wait()
            waitUntil("the waiter sleeps in the kernel") { lock.hasWaiters }
            holderMayEnd.open()
          }
        }
        exit(0)  // reached: the waiter got the ended holder's lock without a word
      }
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("a thread ended holding 1 lock"))
    }
  }

  @Test("locks taken and released on many threads leave no thread counted as holding one", .runsExitTests)
  func balancedUseIsNotReported() async {
    await #expect(processExitsWith: .success) {
      blocking {
        let lock = try! PriorityInheritanceLock()
        runConcurrently(4) { _ in
          for round in 0..<1_000 {
            switch round % 3 {
            case 0: lock.withLock {}
            case 1:
              if lock.tryLock() { lock.unlock() }
            default:
              if lock.lock(timeout: .seconds(10)) { lock.unlock() }
            }
          }
        }
        exit(0)
      }
    }
  }

  @Test("destroying a held lock stops the process", .runsExitTests)
  func deinitWhileHeld() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        var lock: PriorityInheritanceLock? = try! PriorityInheritanceLock()
        lock!.lock()
        lock = nil
      }
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("deinitialized while locked"))
    }
  }

  @Test(
    "a timed lock that would close a cycle of two locks taken in opposite orders returns false at its deadline",
    .runsExitTests)
  func timedLockInALockOrderCycleTimesOut() async {
    await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      blocking {
        let first = try! PriorityInheritanceLock()
        let second = try! PriorityInheritanceLock()
        let firstHeld = Gate()
        let secondHeld = Gate()
        let timedOut = AtomicBool(false)
        runConcurrently(2) { index in
          if index == 0 {
            first.lock()
            firstHeld.open()
            secondHeld.wait()
            second.lock()  // sleeps in the kernel until the other thread gives up
            second.unlock()
            first.unlock()
          } else {
            second.lock()
            secondHeld.open()
            firstHeld.wait()
            waitUntil("the other thread sleeps on the second lock") { second.hasWaiters }
            timedOut.store(!first.lock(timeout: .milliseconds(100)), ordering: .relaxed)
            second.unlock()
          }
        }
        exit(timedOut.load(ordering: .relaxed) ? 0 : 1)
      }
    }.map { result in
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(!text.contains("self-deadlock"), "\(text)")
    }
  }

  @Test("an untimed lock that would close a cycle of two locks is reported as a lock-order cycle", .runsExitTests)
  func untimedLockInALockOrderCycleIsReported() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let first = try! PriorityInheritanceLock()
        let second = try! PriorityInheritanceLock()
        let firstHeld = Gate()
        let secondHeld = Gate()
        runConcurrently(2) { index in
          if index == 0 {
            first.lock()
            firstHeld.open()
            secondHeld.wait()
            second.lock()
          } else {
            second.lock()
            secondHeld.open()
            firstHeld.wait()
            waitUntil("the other thread sleeps on the second lock") { second.hasWaiters }
            first.lock()
          }
        }
        exit(0)
      }
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("cycle"))
    }
  }
}
