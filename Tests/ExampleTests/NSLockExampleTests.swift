import Sync
import TestSupport
import Testing

/// The guide's NSLock example: a thread keeps computing and only updates the display
/// (shared state) when `tryLock` succeeds, instead of blocking.
@Suite("NSLock example: try in a loop", .timeLimit(.minutes(3)))
struct NSLockExampleTests {
  final class Display: @unchecked Sendable {
    let theLock = Lock()
    var updates = 0  // protected by `theLock`
    var latestValue = 0  // protected by `theLock`
  }

  @Test("shared state changes only when the lock was acquired")
  func tryLoop() {
    let display = Display()
    let attempts = 5_000
    let acquiredCount = AtomicInteger<Int>(0)
    let stepsTaken = AtomicInteger<Int>(0)
    runThreads(2) { index in
      if index == 0 {
        // The guide's loop: `while (moreToDo) { /* Do another increment of calculation */
        // if ([theLock tryLock]) { /* Update display */ [theLock unlock]; } }`. There is more
        // to do until `attempts` steps are done and the display was updated at least once
        // (on a slow machine the competitor may hold the lock at every one of the first
        // tries; it ends, so a later try succeeds).
        var calculation = 0
        var step = 0
        while step < attempts || acquiredCount.load(ordering: .relaxed) == 0 {
          calculation += step  // another increment of calculation, lock or not
          if display.theLock.tryLock() {
            display.updates += 1
            display.latestValue = calculation
            display.theLock.unlock()
            acquiredCount.increment(ordering: .relaxed)
          }
          step += 1
        }
        stepsTaken.store(step, ordering: .relaxed)
      } else {
        // A competitor holding the lock now and then, so some tries fail.
        for _ in 0..<attempts {
          display.theLock.withLock { display.latestValue += 0 }
        }
      }
    }
    let acquired = acquiredCount.load(ordering: .relaxed)
    #expect(display.updates == acquired, "exactly one update per successful try")
    #expect(acquired >= 1 && acquired <= stepsTaken.load(ordering: .relaxed))
  }
}
