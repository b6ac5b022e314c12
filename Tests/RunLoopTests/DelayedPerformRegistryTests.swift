import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

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

@Suite(.timeLimit(.minutes(3))) struct DelayedPerformRegistryTests {
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

  /// As `perform(afterDelay:inModes:_:)`: a request on a loop whose thread had ended can
  /// never run, so it is withdrawn at once (its timer invalid, its block released), and one
  /// made before the thread ended is withdrawn by that end.
  @Test func aTargetRequestOnALoopWhoseThreadEndedIsWithdrawn() throws {
    let worker = try RunLoopThread.start(name: "target-request-ended")
    let loop = worker.runLoop
    let earlierReleased = Latch(count: 1)
    let earlier: RunLoopTimer
    do {
      let capture = ReentrantCapture(runLoop: loop, released: earlierReleased)
      earlier = (loop as any TargetActionRequests).perform(
        afterDelay: .seconds(3600), inModes: [.default], target: loop, action: nil, argument: nil
      ) { withExtendedLifetime(capture) {} }
    }
    #expect(earlier.isValid)
    worker.stop()
    #expect(!earlier.isValid, "a request made before the loop's thread ended outlived it")
    #expect(earlierReleased.wait(timeout: .seconds(30)), "its block was kept")
    let laterReleased = Latch(count: 1)
    let later: RunLoopTimer
    do {
      let capture = ReentrantCapture(runLoop: loop, released: laterReleased)
      later = (loop as any TargetActionRequests).perform(
        afterDelay: .milliseconds(1), inModes: [.default], target: loop, action: nil, argument: nil
      ) { withExtendedLifetime(capture) {} }
    }
    #expect(!later.isValid, "a request on an ended thread's loop stays valid")
    #expect(laterReleased.wait(timeout: .seconds(30)), "its block was kept")
  }

  @Test(.runsExitTests) func aReleasedTargetIsNotMistakenForALaterObjectAtTheSameAddress() async {
    // In a child process, where no other test's threads take the freed block first: the
    // allocator then hands it out again within a few allocations. (Not under
    // AddressSanitizer, whose quarantine keeps freed blocks out of reach on purpose.)
    guard !isRunningUnderAddressSanitizer else { return }
    await #expect(processExitsWith: .success) {
      let runLoop = RunLoop.current
      /// Makes a request with a target that is released on return; returns its address.
      @inline(never) func request(_ timer: inout RunLoopTimer?) -> ObjectIdentifier {
        let target = Target()
        timer = (runLoop as any TargetActionRequests).perform(
          afterDelay: .seconds(3600), inModes: [.default], target: target, action: nil, argument: nil
        ) {}
        return ObjectIdentifier(target)
      }
      for _ in 0..<100 {
        var timer: RunLoopTimer?
        let address = request(&timer)
        guard let made = timer else { exit(3) }
        defer { made.invalidate() }
        var later: [Target] = []
        while later.count < 1000, later.last.map(ObjectIdentifier.init) != address { later.append(Target()) }
        guard let reused = later.last, ObjectIdentifier(reused) == address else { continue }
        (runLoop as any TargetActionRequests).cancelPerformRequests(target: reused)
        // A request made with a released target is not cancelled by a later object.
        exit(made.isValid ? 0 : 1)
      }
      exit(2)  // no round reused the released target's address
    }
  }
}
