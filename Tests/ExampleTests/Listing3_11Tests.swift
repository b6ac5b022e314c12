import RunLoop
import Sync
import TestSupport
import Testing

/// Listing 3-11: a timer created with a first fire 0.1 s ahead and a 0.3 s interval, added to
/// the common modes. (Times scaled by 1/10.) Being in the common modes, it fires in every
/// common mode, including one added later.
@Suite(.timeLimit(.minutes(2))) struct Listing3_11Tests {
  @Test func timerInTheCommonModes() {
    let fires = Recorder<(mode: RunLoopMode?, scheduled: MonotonicInstant, actual: MonotonicInstant)>()
    let firstFire = Box<MonotonicInstant>(.now)
    runLoopExampleSpawn {
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .milliseconds(10), interval: .milliseconds(30)) { timer in
        fires.append((RunLoop.current.currentMode, timer.nextFireDate, .now))  // myCFTimerCallback
      }
      firstFire.value = timer.nextFireDate
      runLoop.add(timer, forMode: .common)

      let tracking: RunLoopMode = "tracking"
      runLoop.addCommonMode(tracking)
      // The first fire (10 ms) happens in the default mode, the next (40 ms) in tracking.
      runLoop.run(mode: .default, timeout: .milliseconds(25))
      runLoop.run(mode: tracking, timeout: .milliseconds(30))
      timer.invalidate()
    }.join()

    let all = fires.snapshot
    #expect(all.count == 2)
    #expect(all.map(\.mode) == [.default, "tracking"])
    #expect(all.map(\.scheduled) == [firstFire.value, firstFire.value + .milliseconds(30)])
    #expect(all.allSatisfy { $0.actual >= $0.scheduled })
  }
}
