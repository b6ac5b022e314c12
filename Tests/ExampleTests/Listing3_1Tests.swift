import RunLoop
import Sync
import TestSupport
import Testing

/// Listing 3-1: a thread adds an observer of every activity and a repeating 0.1 s timer to its
/// run loop, then runs it until a date one second ahead, ten times. (Times scaled by 1/10.)
@Suite(.timeLimit(.minutes(3))) struct Listing3_1Tests {
  @Test func observerAndRepeatingTimerOverTenRunsUntilDate() {
    let activities = Recorder<RunLoopActivity>()
    let fires = Recorder<(scheduled: MonotonicInstant, actual: MonotonicInstant)>()
    let elapsed = Box<Duration>(.zero)
    runLoopExampleSpawn {
      // threadMain
      let myRunLoop = RunLoop.current

      // Create a run loop observer and attach it to the run loop.
      let observer = RunLoopObserver(activities: .allActivities, repeats: true, order: 0) { _, activity in
        activities.append(activity)  // myRunLoopObserver
      }
      myRunLoop.add(observer, forMode: .default)

      // Create and schedule the timer.
      RunLoopTimer.scheduled(after: .milliseconds(10), interval: .milliseconds(10)) { timer in
        fires.append((timer.nextFireDate, .now))  // doFireTimer
      }

      let start = MonotonicInstant.now
      var loopCount = 10
      repeat {
        // Run the run loop 10 times to let the timer fire.
        myRunLoop.run(before: .after(.milliseconds(100)))
        loopCount -= 1
      } while loopCount > 0
      elapsed.value = start.duration(to: .now)
    }.join()

    let seen = activities.snapshot
    #expect(seen.filter { $0 == .entry }.count == 10)
    #expect(seen.filter { $0 == .exit }.count == 10)
    #expect(seen.first == .entry && seen.last == .exit)
    #expect(elapsed.value >= .seconds(1))
    let timerFires = fires.snapshot
    // Each 100 ms run sees at least one 10 ms period; never more fires than periods elapsed.
    #expect(timerFires.count >= 10)
    #expect(timerFires.count <= Int(elapsed.value / .milliseconds(10)) + 1)
    for fire in timerFires { #expect(fire.actual >= fire.scheduled) }
  }
}
