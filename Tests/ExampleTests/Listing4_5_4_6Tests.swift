import Sync
import TestSupport
import Testing

/// Listings 4-5 and 4-6: a POSIX condition variable paired with a mutex and a `ready_to_go`
/// flag. The waiter loops on the flag with the mutex held, does its work, and resets the
/// flag; the signaller sets the flag and signals under the mutex.
@Suite("Listings 4-5 and 4-6: using a POSIX condition", .timeLimit(.minutes(3)))
struct Listing4_5_4_6Tests {
  final class Shared: @unchecked Sendable {
    // MyCondInitFunction: pthread_mutex_init + pthread_cond_init.
    let mutex = Lock()
    let condition = ConditionVariable()
    var readyToGo = false  // protected by `mutex`
    var workDone = 0  // protected by `mutex`

    /// Listing 4-5: MyWaitOnConditionFunction.
    func waitOnCondition() {
      mutex.lock()
      while readyToGo == false {
        condition.wait(mutex)
      }
      // Do work. (The mutex should stay locked.)
      workDone += 1
      // Reset the predicate and release the mutex.
      readyToGo = false
      mutex.unlock()
    }

    /// Listing 4-6: SignalThreadUsingCondition.
    func signalThreadUsingCondition() {
      // At this point, there should be work for the other thread to do.
      mutex.lock()
      readyToGo = true
      // Signal the other thread to begin work.
      condition.signal()
      mutex.unlock()
    }
  }

  @Test("the waiter runs once per signal when the signaller waits for the flag to reset")
  func listing() {
    let shared = Shared()
    let rounds = 500
    let flagReset = ConditionVariable()
    runThreads(2) { index in
      if index == 0 {
        for _ in 0..<rounds {
          shared.waitOnCondition()
          shared.mutex.withLock { flagReset.signal() }
        }
      } else {
        for _ in 0..<rounds {
          shared.signalThreadUsingCondition()
          shared.mutex.withLock {
            flagReset.wait(shared.mutex, until: { !shared.readyToGo })
          }
        }
      }
    }
    #expect(shared.workDone == rounds)
    #expect(shared.readyToGo == false)
  }

  @Test("a waiter with a deadline gives up on the monotonic clock when nobody signals")
  func timedWait() {
    let shared = Shared()
    let start = MonotonicInstant.now
    let ready = shared.mutex.withLock {
      shared.condition.wait(shared.mutex, until: { shared.readyToGo }, timeout: .milliseconds(20))
    }
    #expect(!ready)
    #expect(start.duration(to: .now) >= .milliseconds(20))
  }
}
