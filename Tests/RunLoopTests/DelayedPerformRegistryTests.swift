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

  @Test func aReleasedTargetIsNotMistakenForALaterObjectAtTheSameAddress() throws {
    let runLoop = RunLoop.current
    /// Makes a request with a target that is released on return; returns its address.
    @inline(never) func request(_ timer: inout RunLoopTimer?) -> ObjectIdentifier {
      let target = Target()
      timer = (runLoop as any TargetActionRequests).perform(
        afterDelay: .seconds(3600), inModes: [.default], target: target, action: nil, argument: nil
      ) {}
      return ObjectIdentifier(target)
    }
    var rounds = 0
    // The allocator usually hands the freed block out again at once; a round where it does
    // not is tried again.
    while rounds < 50 {
      var timer: RunLoopTimer?
      let address = request(&timer)
      let made = try #require(timer)
      defer { made.invalidate() }
      var later: [Target] = []
      while later.count < 100, later.last.map(ObjectIdentifier.init) != address { later.append(Target()) }
      guard let reused = later.last, ObjectIdentifier(reused) == address else {
        rounds += 1
        continue
      }
      (runLoop as any TargetActionRequests).cancelPerformRequests(target: reused)
      #expect(made.isValid, "a request made with a released target is not cancelled by a later object")
      return
    }
    Issue.record("no round reused the released target's address")
  }
}
