import RunLoop
import Sync
import TestSupport
import Testing

/// Listing 3-11: a timer created with a first fire 0.1 s ahead and a 0.3 s interval, added to
/// the common modes. (Times scaled by 1/10.) Being in the common modes, it fires in every
/// common mode, including one added later.
///
/// Each run ends when its mode has seen a fire (the callback stops the loop), not after a
/// fixed window: on a loaded machine a window can hold two fires or none.
@Suite(.timeLimit(.minutes(3))) struct Listing3_11Tests {
  @Test func timerInTheCommonModes() {
    let fires = Recorder<(mode: RunLoopMode?, scheduled: MonotonicInstant, actual: MonotonicInstant)>()
    let firstFire = Box<MonotonicInstant>(.now)
    let results = Recorder<RunLoopRunResult>()
    runLoopExampleSpawn {
      let runLoop = RunLoop.current
      let timer = RunLoopTimer(after: .milliseconds(10), interval: .milliseconds(30)) { timer in
        fires.append((RunLoop.current.currentMode, timer.nextFireDate, .now))  // myCFTimerCallback
        RunLoop.current.stop()
      }
      firstFire.value = timer.nextFireDate
      runLoop.add(timer, forMode: .common)

      let tracking: RunLoopMode = "tracking"
      runLoop.addCommonMode(tracking)
      // The first fire (10 ms) happens in the default mode, the next (40 ms) in tracking.
      results.append(runLoop.run(mode: .default, timeout: .seconds(10)))
      results.append(runLoop.run(mode: tracking, timeout: .seconds(10)))
      timer.invalidate()
    }.join()

    #expect(results.snapshot == [.stopped, .stopped])
    let all = fires.snapshot
    #expect(all.count == 2)
    #expect(all.map(\.mode) == [.default, "tracking"])
    guard all.count == 2 else { return }
    #expect(all[0].scheduled == firstFire.value)
    // The second fire is on the timer's grid: 30 ms on, or a later slot when the first fire
    // was so late that slots were skipped.
    let offset = MonotonicInstant.nanoseconds(of: all[1].scheduled - firstFire.value)
    #expect(offset >= 30_000_000 && offset % 30_000_000 == 0)
    #expect(all.allSatisfy { $0.actual >= $0.scheduled })
  }
}
