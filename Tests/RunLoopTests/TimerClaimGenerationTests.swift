import Sync
import TestSupport
import Testing

@testable import RunLoop

/// A timer's schedule entries are matched by identity and generation: a timer joining a loop
/// gets one of that loop's new generations when the loop claims it, so entries left from an
/// earlier stay never match it, even if it is invalidated before the loop schedules it and
/// re-armed before the loop removes it.
@Suite("RunLoop timer generations", .timeLimit(.minutes(3)))
struct TimerClaimGenerationTests {
  @Test("a timer invalidated right after being claimed and then re-armed does not match its old entries")
  func claimAssignsAFreshGeneration() {
    TestThread.run {
      let runLoop = RunLoop.current
      let start = MonotonicInstant.now
      let early = start.advanced(by: .seconds(3600))
      let timer = RunLoopTimer(fireAt: early) { _ in }
      // Entries for `early` stay in the mode's heaps after the removal.
      runLoop.add(timer, forMode: .default)
      runLoop.remove(timer, forMode: .default)
      let later = start.advanced(by: .seconds(36000))
      timer.setNextFireDate(later)
      // Invalidated between the claim and the scheduling (the first half of `invalidate()`,
      // whose removal waits for the loop's lock), then made valid again by a `rearm` whose
      // renewal has not run yet.
      runLoop.lock.withLock {
        runLoop.timerClaimedForTesting = { timer in timer.lock.withLock { timer.valid = false } }
      }
      runLoop.add(timer, forMode: .default)
      runLoop.lock.withLock { runLoop.timerClaimedForTesting = nil }
      timer.lock.withLock { timer.valid = true }
      let wake = runLoop.lock.withLock { runLoop.modes[.default]?.earliestWakeDeadline() }
      #expect(wake != early, "an entry of the timer's earlier stay must not wake the loop")
      timer.invalidate()
    }
  }
}
