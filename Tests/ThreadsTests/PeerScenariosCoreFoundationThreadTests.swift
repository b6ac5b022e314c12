import Sync
import Testing
import Threads

// swift-corelibs-foundation's TestThread scenarios, written against this toolkit's API.
@Suite("CF scenarios: threads", .timeLimit(.minutes(3)))
struct PeerCFThreadTests {
  @Test func currentIsTheSameObjectEachTimeOnAThread() throws {
    let outside = Thread.current
    #expect(outside === Thread.current)
    #expect(outside == Thread.current)
    let worker = try Thread.spawn { () -> Bool in
      let first = Thread.current
      return first === Thread.current && first != outside
    }
    let sameEachTime = worker.join()
    #expect(sameEachTime)
  }

  @Test func aStartedThreadRunsItsEntryRoutine() throws {
    let ran = Latch(count: 1)
    let thread = Thread { ran.countDown() }
    #expect(!thread.isExecuting && !thread.isFinished)
    try thread.start()
    #expect(ran.wait(timeout: .seconds(30)))
  }

  @Test func onlyTheMainThreadIsMain() throws {
    #expect(Thread.main.isMainThread)
    #expect(Thread.main === Thread.main)
    #expect(Thread.current.isExecuting)
    let worker = try Thread.spawn { () -> [Bool] in
      [Thread.isMainThread, Thread.current.isMainThread, Thread.current == Thread.main, Thread.current.isExecuting]
    }
    let thread = worker.thread
    let seen = worker.join()
    #expect(seen == [false, false, false, true])
    #expect(thread.isFinished)
    #expect(Thread.isMultiThreaded)
  }

  /// Foundation on Linux keeps the old name when the new one exceeds the kernel's 15 bytes
  /// (pthread_setname_np fails); the toolkit keeps the whole name and gives the kernel its
  /// longest 15-byte prefix, as `Thread.name` documents.
  @Test func aNameLongerThanTheKernelLimitIsKeptWholeAndCutForTheKernel() throws {
    let worker = try Thread.spawn { () throws(SystemCallError) -> [String?] in
      Thread.current.name = "mainThread"
      let short = [Thread.current.name, try Thread.currentKernelName()]
      Thread.current.name = "12345678901234567890"
      return short + [Thread.current.name, try Thread.currentKernelName()]
    }
    let names = try worker.join()
    #expect(names == ["mainThread", "mainThread", "12345678901234567890", "123456789012345"])
  }

  @Test func sleepingNeverReturnsEarlyAndPassedDeadlinesReturnAtOnce() {
    for duration in [Duration.milliseconds(1), .milliseconds(15)] {
      let start = MonotonicInstant.now
      Thread.sleep(for: duration)
      #expect(MonotonicInstant.now - start >= duration)
    }
    let deadline = MonotonicInstant.after(.milliseconds(10))
    Thread.sleep(until: deadline)
    #expect(deadline.hasPassed)
    let start = MonotonicInstant.now
    Thread.sleep(until: .now - .seconds(3600))
    Thread.sleep(for: .seconds(-3600))
    Thread.sleep(for: .zero)
    #expect(MonotonicInstant.now - start < .seconds(3000))
  }
}
