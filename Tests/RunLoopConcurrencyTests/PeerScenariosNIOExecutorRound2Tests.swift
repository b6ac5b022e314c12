import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

// A second round of SwiftNIO event-loop scenarios (the testSchedule* family of
// EventLoopTest, and its serial-executor tests), asked of the toolkit's executors. NIO's
// `loop.scheduleTask(in:)` is a `Task.sleep` in a task that prefers a ``RunLoopThreadGroup``
// (the group's scheduling, documented on its `SchedulingExecutor` extension), its
// `Scheduled.cancel()` the cancellation of that task, and `loop.execute` a task created with
// the group as its executor preference.

@Suite("SwiftNIO event-loop scheduling scenarios, round 2", .timeLimit(.minutes(3)))
struct PeerScenariosNIOExecutorRound2Tests {
  @Test func sleepsOfDifferentLengthsOnAOneThreadGroupEndInDeadlineOrderOnItsThread() async {
    // NIO's testScheduledTasksAreOrdered: tasks scheduled with different delays run in the
    // order of their deadlines.
    let group = makeGroup(threadCount: 1)
    let groupThread = group.threads[0]
    let order = Recorder<Int>()
    let misplaced = AtomicInteger<Int>(0)
    // Deadlines 50 ms apart from one common instant, so the order to expect does not depend
    // on when each task gets to start (under a loaded sanitizer run a task can start late).
    let delays = [200, 50, 150, 0, 100]
    let done = Latch(count: delays.count)
    let base = ContinuousClock.now
    for delay in delays {
      Task(executorPreference: group) {
        let deadline = base + .milliseconds(delay)
        try? await Task.sleep(until: deadline, clock: .continuous)
        if ContinuousClock.now < deadline || Thread.current !== groupThread {
          misplaced.increment(ordering: .relaxed)
        }
        order.append(delay)
        done.countDown()
      }
    }
    await offPool { blockingWait(done) }
    #expect(order.snapshot == delays.sorted())
    #expect(misplaced.load(ordering: .relaxed) == 0)
    await shutDownOffPool(group)
  }

  @Test func aCancelledLongSleepEndsAtOnceWithCancellationAndTheGroupShutsDownWithoutWaitingForIt() async {
    // NIO's testScheduleCancelled: a cancelled scheduled task never runs its work, and the
    // loop's shutdown does not wait for its deadline. The group hands a timer still armed to
    // the platform's timers as it shuts down (its "Shutting down" documentation).
    let group = makeGroup(threadCount: 1)
    let groupThread = group.threads[0]
    let sleeping = Latch(count: 1)
    let sleeper = Task(executorPreference: group) { () -> (cancelled: Bool, onGroup: Bool) in
      sleeping.countDown()
      do {
        try await Task.sleep(for: .seconds(3600))
        return (false, Thread.current === groupThread)
      } catch {
        return (error is CancellationError, Thread.current === groupThread)
      }
    }
    await offPool { blockingWait(sleeping) }
    let start = ContinuousClock.now
    sleeper.cancel()
    let outcome = await sleeper.value
    #expect(outcome.cancelled)
    #expect(outcome.onGroup)
    await shutDownOffPool(group)
    // Far below the hour-long deadline, with room for a cooperative pool that the whole
    // pass keeps busy on two cores (under ThreadSanitizer this test's own steps took 45-54 s
    // of waiting for the pool).
    #expect(ContinuousClock.now - start < .seconds(150), "the shutdown waited for the cancelled sleep's deadline")
    #expect(group.isShutDown)
  }

  @Test func aRepeatedlyReschedulingTaskRunsItsStepsInOrderUntilItStops() async {
    // NIO's testScheduleRepeatedTask: a task rescheduling itself every few milliseconds runs
    // each step after the previous one, on the loop, until it stops after N steps.
    let group = makeGroup(threadCount: 2)
    let groupThreads = group.threads
    let steps = 10
    let done = Latch(count: 1)
    let recorded = Recorder<Int>()
    let offGroup = AtomicInteger<Int>(0)
    Task(executorPreference: group) {
      var previous = ContinuousClock.now
      for step in 0..<steps {
        try? await Task.sleep(for: .milliseconds(2))
        let now = ContinuousClock.now
        if now - previous < .milliseconds(2) || !groupThreads.contains(where: { $0 === Thread.current }) {
          offGroup.increment(ordering: .relaxed)
        }
        previous = now
        recorded.append(step)
      }
      done.countDown()
    }
    await offPool { blockingWait(done) }
    #expect(recorded.snapshot == Array(0..<steps))
    #expect(offGroup.load(ordering: .relaxed) == 0)
    await shutDownOffPool(group)
  }
}
