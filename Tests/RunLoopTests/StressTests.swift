import RunLoop
import Sync
import TestSupport
import Testing

/// Every public operation may be called from any thread (the Core Foundation rule): several
/// threads add, signal and invalidate sources and timers while the loop runs.
@Suite(.timeLimit(.minutes(3))) struct StressTests {
  @Test func concurrentSourcesAndTimersWhileTheLoopRuns() {
    let workers = 4
    let rounds = 200
    let loopBox = Box<RunLoop?>(nil)
    let done = Box(false)
    let sourceFires = Box(0)
    let timerFires = Box(0)
    let cancelledTimerFires = Box(0)
    let cancels = Box(0)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)  // keeps the mode alive
      loopBox.value = runLoop
      while !done.value { runLoop.run(mode: .default, timeout: .milliseconds(20)) }
    }
    waitUntil { loopBox.value != nil }
    let runLoop = loopBox.value!
    let threads = (0..<workers).map { _ in
      TestThread.spawn {
        for round in 0..<rounds {
          let fired = Box(false)
          let source = RunLoopSource(
            order: round % 3, cancel: { _, _ in cancels.update { $0 += 1 } },
            perform: {
              fired.value = true
              sourceFires.update { $0 += 1 }
            })
          runLoop.add(source, forMode: .default)
          source.signal()
          runLoop.wakeUp()
          let timer = RunLoopTimer(after: .zero) { _ in timerFires.update { $0 += 1 } }
          runLoop.add(timer, forMode: .common)
          let doomed = RunLoopTimer(after: .seconds(3600)) { _ in cancelledTimerFires.update { $0 += 1 } }
          runLoop.add(doomed, forMode: .default)
          runLoop.wakeUp()
          doomed.invalidate()
          waitUntil { fired.value && !timer.isValid }
          source.invalidate()
          source.signal()
        }
      }
    }
    for thread in threads { thread.join() }
    done.value = true
    runLoop.wakeUp()
    loopThread.join()
    #expect(sourceFires.value == workers * rounds)
    #expect(timerFires.value == workers * rounds)
    #expect(cancelledTimerFires.value == 0)
    #expect(cancels.value == workers * rounds)
  }

  @Test func concurrentWakeUpsStopsAndBlocks() {
    let senders = 3
    let blocksPerSender = 500
    let loopBox = Box<RunLoop?>(nil)
    let ran = Box(0)
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      loopBox.value = runLoop
      while ran.value < senders * blocksPerSender {
        runLoop.run(mode: .default, timeout: .milliseconds(50))
      }
    }
    waitUntil { loopBox.value != nil }
    let runLoop = loopBox.value!
    let threads = (0..<senders).map { index in
      TestThread.spawn {
        for n in 0..<blocksPerSender {
          runLoop.performAndWakeUp(inModes: [.default]) { ran.update { $0 += 1 } }
          if n % 50 == index { runLoop.stop() }
          _ = runLoop.isWaiting
          _ = runLoop.currentMode
        }
      }
    }
    for thread in threads { thread.join() }
    loopThread.join()
    #expect(ran.value == senders * blocksPerSender)
  }
}
