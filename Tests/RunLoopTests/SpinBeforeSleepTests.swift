import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// `spinsBeforeSleeping`: a loop whose futex sleeps are short first watches for the next
/// wake-up, unmarked as asleep. Whatever the switch says, no wake-up, stop or exit request
/// may be lost: a waker that finds the loop watching only sets the pending flag, and the loop
/// must see it. These scenarios keep the loop's sleeps short (each request answered at
/// once), so with the switch on the loop watches at nearly every sleep.
@Suite("RunLoop: watching for a wake-up before a short sleep", .timeLimit(.minutes(1)))
struct SpinBeforeSleepTests {
  @Test("on by default, and settable from any thread")
  func onByDefaultAndSettable() throws {
    let worker = try RunLoopThread.start(name: "spin-switch")
    #expect(worker.runLoop.spinsBeforeSleeping)
    worker.runLoop.spinsBeforeSleeping = false
    #expect(!worker.runLoop.spinsBeforeSleeping)
    worker.runLoop.spinsBeforeSleeping = true
    #expect(worker.runLoop.spinsBeforeSleeping)
    worker.stop()
  }

  @Test(
    "every signal of a source answered in a ping-pong is handled, with the switch on and off",
    arguments: [true, false])
  func pingPongLosesNoWakeUp(spins: Bool) throws {
    let worker = try RunLoopThread.start(name: "spin-pingpong")
    worker.runLoop.spinsBeforeSleeping = spins
    let answered = Sync.Semaphore(value: 0)
    let handled = AtomicInteger<Int>(0)
    let source = RunLoopSource(perform: {
      _ = handled.increment(ordering: .relaxed)
      answered.signal()
    })
    #expect(worker.runLoop.add(source, forMode: .default))
    let rounds = isRunningUnderSanitizer ? 500 : 5_000
    var timedOut = 0
    for _ in 0..<rounds {
      source.signal()
      worker.runLoop.wakeUp()
      // A bound only a lost wake-up reaches.
      if !answered.wait(timeout: .seconds(10)) {
        timedOut += 1
        break
      }
    }
    #expect(timedOut == 0, "a signal was not handled: the loop missed its wake-up")
    #expect(handled.load(ordering: .relaxed) == rounds)
    source.invalidate()
    worker.stop()
  }

  @Test("a stop or an exit request sent while the loop watches ends its run")
  func stopWhileWatchingEndsTheRun() throws {
    for _ in 0..<20 {
      let worker = try RunLoopThread.start(name: "spin-stop")
      let answered = Sync.Semaphore(value: 0)
      let source = RunLoopSource(perform: { answered.signal() })
      #expect(worker.runLoop.add(source, forMode: .default))
      // Short sleeps first, so the loop watches before its next one.
      for _ in 0..<50 {
        source.signal()
        worker.runLoop.wakeUp()
        #expect(answered.wait(timeout: .seconds(10)))
      }
      // `stop()` requests the thread's exit and joins it: a hang here is a lost request.
      worker.stop()
      source.invalidate()
    }
  }

  /// Short sleeps first, so the loop watches: `rounds` signals of `source`, each answered.
  private func makeLoopWatch(_ worker: borrowing RunLoopThread, _ source: RunLoopSource, _ answered: Sync.Semaphore) {
    for _ in 0..<50 {
      source.signal()
      worker.runLoop.wakeUp()
      #expect(answered.wait(timeout: .seconds(10)))
    }
  }

  @Test("a timer added from another thread while the loop watches fires, never early")
  func timerAddedWhileWatchingFires() throws {
    let worker = try RunLoopThread.start(name: "spin-timer")
    let answered = Sync.Semaphore(value: 0)
    let source = RunLoopSource(perform: { answered.signal() })
    #expect(worker.runLoop.add(source, forMode: .default))
    for _ in 0..<10 {
      makeLoopWatch(worker, source, answered)
      // The loop now watches (or sleeps) with no timer: adding one must end the watch, so the
      // loop sleeps until the timer's date instead of on its futex for ever.
      let fired = Sync.Semaphore(value: 0)
      let added = MonotonicInstant.now
      let due = added.advanced(by: .milliseconds(2))
      let firedAt = Box<MonotonicInstant?>(nil)
      let timer = RunLoopTimer(fireAt: due) { _ in
        firedAt.value = .now
        fired.signal()
      }
      #expect(worker.runLoop.add(timer, forMode: .default))
      #expect(fired.wait(timeout: .seconds(10)), "a timer added while the loop watched never fired")
      if let firedAt = firedAt.value { #expect(firedAt >= due, "the timer fired early") }
      timer.invalidate()
    }
    source.invalidate()
    worker.stop()
  }

  @Test("a descriptor source added from another thread while the loop watches is served")
  func descriptorAddedWhileWatchingIsServed() throws {
    let worker = try RunLoopThread.start(name: "spin-descriptor")
    let answered = Sync.Semaphore(value: 0)
    let source = RunLoopSource(perform: { answered.signal() })
    #expect(worker.runLoop.add(source, forMode: .default))
    for _ in 0..<10 {
      makeLoopWatch(worker, source, answered)
      var ends: [Int32] = [0, 0]
      #expect(pipe(&ends) == 0)
      let readEnd = ends[0]
      let readable = Sync.Semaphore(value: 0)
      let watched = FileDescriptorSource(descriptor: readEnd) { watched, _ in
        var byte: UInt8 = 0
        _ = read(readEnd, &byte, 1)
        watched.invalidate()
        readable.signal()
      }
      // Added while the loop watches for a wake-up on its futex, which cannot see the pipe:
      // the loop must move its sleep to epoll.
      #expect(worker.runLoop.add(watched, forMode: .default))
      var byte: UInt8 = 1
      #expect(write(ends[1], &byte, 1) == 1)
      #expect(readable.wait(timeout: .seconds(10)), "a descriptor added while the loop watched was never served")
      watched.invalidate()
      close(ends[0])
      close(ends[1])
    }
    source.invalidate()
    worker.stop()
  }
}
