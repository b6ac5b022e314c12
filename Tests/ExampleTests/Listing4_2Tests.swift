import Sync
import TestSupport
import Testing

/// Listing 4-2: a POSIX-style mutex (`pthread_mutex_lock`/`unlock` around the work).
@Suite("Listing 4-2: using a mutex lock", .timeLimit(.minutes(3)))
struct Listing4_2Tests {
  final class Shared: @unchecked Sendable {
    let mutex = Lock()  // the guide's `pthread_mutex_t mutex` + `pthread_mutex_init`
    var workDone = 0  // protected by `mutex`

    func myLockingFunction() {
      mutex.lock()
      // Do work.
      workDone += 1
      mutex.unlock()
    }
  }

  @Test("work done under the mutex from four threads is never lost")
  func listing() {
    let shared = Shared()
    runThreads(4) { _ in
      for _ in 0..<2_500 { shared.myLockingFunction() }
    }
    #expect(shared.workDone == 10_000)
  }
}
