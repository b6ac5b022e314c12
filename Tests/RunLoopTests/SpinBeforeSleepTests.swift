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
@Suite("RunLoop: watching for a wake-up before a short sleep", .timeLimit(.minutes(3)))
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
    let partner = AnsweringSource()
    #expect(worker.runLoop.add(partner.source, forMode: .default))
    let rounds = isRunningUnderSanitizer ? 500 : 5_000
    var lost = false
    for _ in 0..<rounds where !lost { lost = !partner.ping(worker.runLoop) }
    #expect(!lost, "a signal was not handled: the loop missed its wake-up")
    #expect(partner.handledCount == rounds)
    partner.source.invalidate()
    worker.stop()
  }

  @Test("a stop or an exit request sent while the loop watches ends its run")
  func stopWhileWatchingEndsTheRun() throws {
    for _ in 0..<20 {
      let worker = try RunLoopThread.start(name: "spin-stop")
      let partner = AnsweringSource()
      #expect(worker.runLoop.add(partner.source, forMode: .default))
      makeLoopWatch(worker, partner)
      // `stop()` requests the thread's exit and joins it: a hang here is a lost request.
      worker.stop()
      partner.source.invalidate()
    }
  }

  /// Short sleeps first, so the loop watches before its next one: 50 signals of the
  /// partner's source, each answered.
  private func makeLoopWatch(_ worker: borrowing RunLoopThread, _ partner: AnsweringSource) {
    for _ in 0..<50 { #expect(partner.ping(worker.runLoop)) }
  }

  @Test("a timer added from another thread while the loop watches fires, never early")
  func timerAddedWhileWatchingFires() throws {
    let worker = try RunLoopThread.start(name: "spin-timer")
    let partner = AnsweringSource()
    #expect(worker.runLoop.add(partner.source, forMode: .default))
    for _ in 0..<10 {
      makeLoopWatch(worker, partner)
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
    partner.source.invalidate()
    worker.stop()
  }

  @Test("a descriptor source added from another thread while the loop watches is served")
  func descriptorAddedWhileWatchingIsServed() throws {
    let worker = try RunLoopThread.start(name: "spin-descriptor")
    let partner = AnsweringSource()
    #expect(worker.runLoop.add(partner.source, forMode: .default))
    for _ in 0..<10 {
      makeLoopWatch(worker, partner)
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
    partner.source.invalidate()
    worker.stop()
  }
}
