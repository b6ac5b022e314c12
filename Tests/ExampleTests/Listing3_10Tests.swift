import RunLoop
import Sync
import TestSupport
import Testing

/// Listing 3-10: two timers, one created by hand to start after 1 s and repeat every 0.1 s,
/// one scheduled to fire every 0.2 s. (Times scaled by 1/10.)
@Suite(.timeLimit(.minutes(3))) struct Listing3_10Tests {
  @Test func timerAddedByHandAndScheduledTimer() {
    let first = Recorder<(scheduled: MonotonicInstant, actual: MonotonicInstant)>()
    let second = Recorder<(scheduled: MonotonicInstant, actual: MonotonicInstant)>()
    let startBox = Box<MonotonicInstant>(.now)
    let endBox = Box<MonotonicInstant>(.now)
    runLoopExampleSpawn {
      let myRunLoop = RunLoop.current
      let start = MonotonicInstant.now
      startBox.value = start

      // Create and schedule the first timer.
      let futureDate = start + .milliseconds(100)
      let myTimer = RunLoopTimer(fireAt: futureDate, interval: .milliseconds(10)) { timer in
        first.append((timer.nextFireDate, .now))  // myDoFireTimer1
      }
      myRunLoop.add(myTimer, forMode: .default)

      // Create and schedule the second timer.
      RunLoopTimer.scheduled(after: .milliseconds(20), interval: .milliseconds(20)) { timer in
        second.append((timer.nextFireDate, .now))  // myDoFireTimer2
      }

      myRunLoop.run(before: start + .milliseconds(300))
      endBox.value = .now
    }.join()

    let start = startBox.value
    let elapsed = start.duration(to: endBox.value)
    let firstFires = first.snapshot
    let secondFires = second.snapshot
    #expect(!firstFires.isEmpty && !secondFires.isEmpty)
    #expect(firstFires[0].scheduled == start + .milliseconds(100))
    #expect(firstFires.allSatisfy { $0.actual >= $0.scheduled && $0.actual >= start + .milliseconds(100) })
    #expect(secondFires.allSatisfy { $0.actual >= $0.scheduled })
    #expect(firstFires.count <= Int((elapsed - .milliseconds(100)) / .milliseconds(10)) + 1)
    #expect(secondFires.count <= Int(elapsed / .milliseconds(20)))
  }
}
