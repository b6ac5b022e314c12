import Sync
import TestSupport
import Testing

/// Listings 4-3 and 4-4: an `NSCondition` guarding a work counter. The worker waits in a
/// loop while there is no work (conditions may wake spuriously) and takes one unit; the
/// producer adds a unit and signals while holding the lock.
@Suite("Listings 4-3 and 4-4: using a condition", .timeLimit(.minutes(3)))
struct Listing4_3_4_4Tests {
  final class Shared: @unchecked Sendable {
    let cocoaCondition = Condition()
    var timeToDoWork = 0  // protected by `cocoaCondition`
    var workDone = 0  // protected by `cocoaCondition`

    /// Listing 4-3.
    func doWork() {
      cocoaCondition.lock()
      while timeToDoWork <= 0 {
        cocoaCondition.wait()
      }
      timeToDoWork -= 1
      // Do real work here.
      workDone += 1
      cocoaCondition.unlock()
    }

    /// Listing 4-4.
    func signalWork() {
      cocoaCondition.lock()
      timeToDoWork += 1
      cocoaCondition.signal()
      cocoaCondition.unlock()
    }
  }

  @Test("every signalled unit of work is done exactly once by the waiting workers")
  func listing() {
    let shared = Shared()
    let workers = 3
    let unitsPerWorker = 1_000
    runThreads(workers + 1) { index in
      if index < workers {
        for _ in 0..<unitsPerWorker { shared.doWork() }
      } else {
        for _ in 0..<workers * unitsPerWorker { shared.signalWork() }
      }
    }
    #expect(shared.workDone == workers * unitsPerWorker)
    #expect(shared.timeToDoWork == 0)
  }

  @Test("the predicate form replaces the hand-written loop")
  func predicateForm() {
    let shared = Shared()
    runThreads(2) { index in
      if index == 0 {
        shared.cocoaCondition.withLock {
          shared.cocoaCondition.wait(until: { shared.timeToDoWork > 0 })
          shared.timeToDoWork -= 1
          shared.workDone += 1
        }
      } else {
        shared.signalWork()
      }
    }
    #expect(shared.workDone == 1)
  }
}
