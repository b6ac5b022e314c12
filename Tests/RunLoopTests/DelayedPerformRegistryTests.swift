import RunLoop
import Sync
import TestSupport
import Testing
import Threads

/// The target/action spellings, reached through a protocol so the tests compile without
/// deprecation warnings.
private protocol TargetActionRequests {
  func perform(
    afterDelay delay: Duration, inModes modes: [RunLoopMode], target: AnyObject,
    action: String?, argument: AnyHashable?, _ block: @escaping @Sendable () -> Void
  ) -> RunLoopTimer
  func cancelPerformRequests(target: AnyObject)
}

extension RunLoop: TargetActionRequests {}

/// Calls the registry from its deinit, as a block's captured object may.
private final class ReentrantCapture: Sendable {
  let runLoop: RunLoop
  let released: Latch
  init(runLoop: RunLoop, released: Latch) {
    self.runLoop = runLoop
    self.released = released
  }
  deinit {
    (runLoop as any TargetActionRequests).cancelPerformRequests(target: runLoop)
    released.countDown()
  }
}

private final class Target: Sendable {}

@Suite(.timeLimit(.minutes(1))) struct DelayedPerformRegistryTests {
  @Test func aPurgedRequestOfAnEndedLoopReleasesItsBlockOutsideTheRegistryLock() {
    let released = Latch(count: 1)
    let target = Target()
    let survivor = RunLoop.current
    TestThread.run {
      let ended = RunLoop.current
      let capture = ReentrantCapture(runLoop: survivor, released: released)
      _ = (ended as any TargetActionRequests).perform(
        afterDelay: .seconds(3600), inModes: [.default], target: target, action: nil, argument: nil
      ) { withExtendedLifetime(capture) {} }
    }
    // The thread ended, so its loop is gone and its request's entry is purged here; the
    // request's block, and the capture whose deinit uses the registry, go with it.
    (survivor as any TargetActionRequests).cancelPerformRequests(target: target)
    #expect(released.wait(timeout: .seconds(30)))
  }
}
