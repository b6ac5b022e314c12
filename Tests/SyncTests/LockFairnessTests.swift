import Glibc
import Sync
import Testing

/// The locks with a bounded wait, driven through one shape.
enum BoundedWaitSubject: String, CaseIterable, Sendable, CustomTestStringConvertible {
  case lock, lockedValue, recursiveLock, spinLock

  var testDescription: String { rawValue }

  func make() -> BoundedWaitLock {
    switch self {
    case .lock:
      let lock = Lock()
      return BoundedWaitLock(
        run: { body in lock.withLock(body) },
        tryRun: { timeout, body in
          guard lock.lock(timeout: timeout) else { return false }
          body()
          lock.unlock()
          return true
        })
    case .lockedValue:
      let value = LockedValue(0)
      return BoundedWaitLock(
        run: { body in value.withLock { _ in body() } },
        tryRun: { timeout, body in value.withLock(timeout: timeout) { _ in body() } != nil })
    case .recursiveLock:
      let lock = RecursiveLock()
      return BoundedWaitLock(
        run: { body in lock.withLock(body) },
        tryRun: { timeout, body in lock.withLock(timeout: timeout, body) != nil })
    case .spinLock:
      let lock = SpinLock()
      return BoundedWaitLock(
        run: { body in lock.withLock(body) },
        tryRun: { timeout, body in lock.withLock(timeout: timeout, body) != nil })
    }
  }
}

/// One lock of a ``BoundedWaitSubject``: `run` runs a body holding it; `tryRun` does if the
/// lock comes within the timeout and returns whether it did.
struct BoundedWaitLock: Sendable {
  let run: @Sendable (() -> Void) -> Void
  let tryRun: @Sendable (Duration, () -> Void) -> Bool
}

/// Keeps the processor busy for `seconds` (a critical section's work; not synchronization).
private func busy(seconds: Double) {
  let end = monotonicSeconds() + seconds
  while monotonicSeconds() < end {}
}

/// Per-thread results, each slot written by its own thread only and read after the join.
private final class PerThread: @unchecked Sendable {
  var acquisitions: [Int]
  var longestWait: [Double]
  init(_ count: Int) {
    acquisitions = Array(repeating: 0, count: count)
    longestWait = Array(repeating: 0, count: count)
  }
}

/// The bounded wait: once a waiter has slept about a millisecond, unlocks hand the lock to
/// the starving waiters instead of letting any thread barge in. The bounds asserted here
/// are generous (load on the machine, ThreadSanitizer): a lock without the bound fails them
/// by seconds, not by a margin (the benchmark `fairness.` rows measure the real figures).
@Suite("Lock fairness", .timeLimit(.minutes(1)))
struct LockFairnessTests {
  @Test(
    "a waiter gets the lock within a bounded time while another thread re-takes it at once",
    arguments: BoundedWaitSubject.allCases)
  func waiterIsNotStarvedByABargingHolder(subject: BoundedWaitSubject) {
    let lock = subject.make()
    let holderIsInside = Gate()
    let waiterIsDone = Gate()
    let waited = PerThread(1)
    runConcurrently(2) { index in
      if index == 0 {
        // Re-takes the lock immediately after each release, for up to 3 s: without the
        // bound, the waiter's wake-up always arrives too late and it starves until then.
        let giveUp = monotonicSeconds() + 3
        var first = true
        while !waiterIsDone.isOpen && monotonicSeconds() < giveUp {
          lock.run {
            if first {
              holderIsInside.open()
              first = false
            }
            busy(seconds: 50e-6)
          }
        }
      } else {
        holderIsInside.wait()
        let start = monotonicSeconds()
        lock.run {}
        waited.longestWait[0] = monotonicSeconds() - start
        waiterIsDone.open()
      }
    }
    #expect(waited.longestWait[0] < 0.2)
  }

  @Test(
    "with 8 threads hammering, no increment is lost and the longest wait stays bounded",
    arguments: BoundedWaitSubject.allCases)
  func hammeringKeepsCountsAndBoundsWaits(subject: BoundedWaitSubject) {
    let threads = 8
    let lock = subject.make()
    let counter = UnprotectedCounter()
    let results = PerThread(threads)
    runConcurrently(threads) { index in
      let end = monotonicSeconds() + 0.3
      var longest = 0.0
      var count = 0
      while monotonicSeconds() < end {
        let before = monotonicSeconds()
        lock.run {
          counter.value += 1
          busy(seconds: 5e-6)
        }
        longest = max(longest, monotonicSeconds() - before)
        count += 1
      }
      results.acquisitions[index] = count
      results.longestWait[index] = longest
    }
    #expect(counter.value == results.acquisitions.reduce(0, +))
    #expect(results.acquisitions.allSatisfy { $0 > 0 })
    #expect(results.longestWait.max()! < 0.25)
  }

  @Test(
    "timed waiters that give up beside starving waiters never break exclusion or strand the lock",
    arguments: BoundedWaitSubject.allCases)
  func timedWaitersAmongStarvingOnes(subject: BoundedWaitSubject) {
    let threads = 6
    let lock = subject.make()
    let counter = UnprotectedCounter()
    let results = PerThread(threads)
    runConcurrently(threads) { index in
      let end = monotonicSeconds() + 0.3
      var count = 0
      while monotonicSeconds() < end {
        let work = { counter.value += 1; busy(seconds: 20e-6) }
        if index < 2 {
          lock.run(work)
          count += 1
        } else if lock.tryRun(.microseconds(300 * index), work) {
          count += 1
        }
      }
      results.acquisitions[index] = count
    }
    #expect(counter.value == results.acquisitions.reduce(0, +))
    // The lock is free again for anyone.
    #expect(lock.tryRun(.zero) {})
  }
}
