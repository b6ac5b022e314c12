import ProcessTestSupport
import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

// Audit round 6: environment failures under resource limits. Each scenario lowers a limit
// (RLIMIT_AS, RLIMIT_NOFILE) for the whole process, so it runs in a child forked from an
// exit test's child: only the forking thread exists there, and no thread of the test
// runtime meets the limit. Each refused creation must throw its documented typed error,
// leave no thread, descriptor or mapping behind, leave the objects made before working, and
// succeed once the limit is raised again.

/// What a thread start threw, as text: "EAGAIN" for the documented `pthread_create` refusal.
private func round6Refusal(_ start: () throws(ThreadStartError) -> Void) -> String {
  do throws(ThreadStartError) {
    try start()
    return "started"
  } catch {
    if let failure = error.systemError, failure.call == "pthread_create", failure.code == .tryAgain { return "EAGAIN" }
    if let failure = error.systemError, failure.code == .tooManyOpenFiles { return "EMFILE" }
    return "\(error)"
  }
}

@Suite("Audit round 6: creations refused under resource limits", .timeLimit(.minutes(3)))
struct AuditRound6ResourceLimitsTests {
  /// Without address space for a stack, every way of starting a thread throws
  /// `pthread_create`'s `EAGAIN` as `.system`, runs no body, and leaves no thread, descriptor
  /// or mapping; a run-loop thread started before keeps serving; a thread object whose
  /// start failed starts once the limit is raised, as do the others.
  @Test(
    .disabled(if: isRunningUnderSanitizer, "a sanitizer's allocator maps memory of its own at any time"), .runsExitTests
  )
  func threadsWithoutAddressSpaceAreRefusedWithEAGAIN() async {
    await #expect(processExitsWith: .success) {
      runScenarioInForkedChild("threads without address space") {
        blocking {
          prepareForAddressSpaceLimit()
          let serving = try! RunLoopThread.start(name: "round6-before")
          try! serving.performAndWait {}
          let ran = AtomicBool(false)
          var large = ThreadConfiguration()
          large.stackSize = 64 << 20
          // A thread the process must wait for at exit, and one that lowers its priority
          // (the creator waits for it to apply that): neither may be left counted or waited for.
          var critical = ThreadConfiguration()
          critical.finishBeforeExit = true
          var lowered = ThreadConfiguration()
          lowered.relativePriority = 0.25
          let lateRan = Latch(count: 1)
          let late = Thread(name: "round6-late", configuration: large) { lateRan.countDown() }
          let before = ProcessFootprint()
          let outcomes: [String] = withAddressSpaceHeadroom(256 << 10) {
            [
              round6Refusal { () throws(ThreadStartError) in
                try Thread.spawn(name: "round6-default") { ran.store(true, ordering: .releasing) }.join()
              },
              round6Refusal { () throws(ThreadStartError) in
                try Thread.spawn(configuration: large) { ran.store(true, ordering: .releasing) }.join()
              },
              round6Refusal { () throws(ThreadStartError) in
                try Thread.detach(name: "round6-detached") { ran.store(true, ordering: .releasing) }
              },
              round6Refusal { () throws(ThreadStartError) in
                try Thread.spawn(configuration: critical) { ran.store(true, ordering: .releasing) }.join()
              },
              round6Refusal { () throws(ThreadStartError) in
                try Thread.spawn(configuration: lowered) { ran.store(true, ordering: .releasing) }.join()
              },
              round6Refusal { () throws(ThreadStartError) in try late.start() },
              round6Refusal { () throws(ThreadStartError) in try RunLoopThread.start(name: "round6-loop").stop() },
              round6Refusal { () throws(ThreadStartError) in
                try RunLoopThreadGroup(threadCount: 3, name: "round6-group").shutDown()
              },
            ]
          }
          precondition(outcomes == Array(repeating: "EAGAIN", count: 8), "refusals: \(outcomes)")
          precondition(!ran.load(ordering: .acquiring), "a refused thread ran its body")
          before.expectBack(extraMappings: 0, "refused thread starts")
          // What was made before still works, and every start succeeds again.
          let answer = LockedValue(0)
          try! serving.performAndWait { answer.withLock { $0 = 42 } }
          precondition(answer.withLock { $0 } == 42)
          serving.stop()
          try! late.start()
          lateRan.wait()
          precondition(try! Thread.spawn(configuration: large) { 7 }.join() == 7)
          let group = try! RunLoopThreadGroup(threadCount: 3, name: "round6-group")
          for loop in group.runLoops { try! loop.performAndWait {} }
          group.shutDown()
        }
        // The refused critical thread is not counted: exit() ends the process at once (a
        // count left behind would make it wait for ever, until the alarm).
        exit(0)
      }
    }
  }

  /// A group whose second thread cannot get a stack throws `EAGAIN` and stops and joins the
  /// thread it had started: no thread, descriptor or mapping of it is left.
  @Test(
    .disabled(if: isRunningUnderSanitizer, "a sanitizer's allocator maps memory of its own at any time"), .runsExitTests
  )
  func aGroupCutShortByAddressSpaceStopsTheThreadsItStarted() async {
    await #expect(processExitsWith: .success) {
      runScenarioInForkedChild("group cut short by address space") {
        blocking {
          prepareForAddressSpaceLimit()
          // Warm-up: the threads diagnostics start on first use (the stall monitor, the lock
          // watchdog) start now, outside the window.
          let warm = try! RunLoopThread.start(name: "round6-warm")
          try! warm.performAndWait {}
          warm.stop()
          // Room for one 8 MiB stack (and small allocations), not for two.
          var configuration = ThreadConfiguration()
          configuration.stackSize = 8 << 20
          let before = ProcessFootprint()
          let outcome: String = withAddressSpaceHeadroom(12 << 20) {
            round6Refusal { () throws(ThreadStartError) in
              try RunLoopThreadGroup(threadCount: 3, name: "round6-cut", configuration: configuration).shutDown()
            }
          }
          precondition(outcome == "EAGAIN", "group start: \(outcome)")
          // The first thread's stack and its guard stay in glibc's cache: two mappings more.
          before.expectBack(extraMappings: 2, "a group refused for lack of address space")
        }
      }
    }
  }

  /// A group of three run-loop threads needs nine descriptors (epoll, eventfd and timerfd per
  /// loop). With each number free from none to eight, the start fails at a different step:
  /// it throws `EMFILE` as `.system`, and the threads it started are stopped and joined, their
  /// descriptors closed. A loop made before keeps running its timer meanwhile. With nine
  /// free, the group starts.
  @Test(
    .disabled(
      if: isRunningUnderSanitizer,
      "a sanitizer's runtime cannot start threads in a child forked from a multithreaded process: ThreadSanitizer refuses, and AddressSanitizer's thread registry can be copied locked (another thread of the exit test's child starting or ending a thread), which can hang the child"
    ), .runsExitTests)
  func aGroupRefusedDescriptorsAtEveryStepLeavesNothing() async {
    await #expect(processExitsWith: .success) {
      runScenarioInForkedChild("group without descriptors") {
        blocking {
          // Warm-up: first-use state outside the windows, and three stacks in glibc's cache
          // of ended threads' stacks, which the refused groups' threads then reuse (a stack
          // mapped for them would stay in the cache: a mapping more, and no leak).
          try! RunLoopThreadGroup(threadCount: 3, name: "round6-warm").shutDown()
          let serving = try! RunLoopThread.start(name: "round6-timer")
          let fired = AtomicInteger<Int>(0)
          let timer = RunLoopTimer(fireAt: .now, interval: .milliseconds(1)) { _ in
            fired.fetchAdd(1, ordering: .relaxed)
          }
          serving.runLoop.add(timer, forMode: .common)
          serving.runLoop.wakeUp()
          for free in 0..<9 {
            let before = ProcessFootprint()
            let firedBefore = fired.load(ordering: .relaxed)
            let outcome: String = withFreeDescriptorCount(free) {
              let outcome = round6Refusal { () throws(ThreadStartError) in
                try RunLoopThreadGroup(threadCount: 3, name: "round6-emfile").shutDown()
              }
              // The loop made before runs its timer while no descriptor is free.
              let giveUp = MonotonicInstant.after(.seconds(10))
              while fired.load(ordering: .relaxed) < firedBefore + 3 && !giveUp.hasPassed { sched_yield() }
              return outcome
            }
            precondition(outcome == "EMFILE", "group start with \(free) free descriptors: \(outcome)")
            precondition(fired.load(ordering: .relaxed) >= firedBefore + 3, "the timer stopped with \(free) free")
            before.expectBack("a group refused with \(free) free descriptors")
          }
          let started: Bool = withFreeDescriptorCount(9) {
            guard let group = try? RunLoopThreadGroup(threadCount: 3, name: "round6-enough") else { return false }
            for loop in group.runLoops { try! loop.performAndWait {} }
            group.shutDown()
            return true
          }
          precondition(started, "a group with exactly the nine descriptors it needs did not start")
          timer.invalidate()
          serving.stop()
        }
      }
    }
  }

  /// A shared anonymous region the address space has no room for throws `mmap`'s `ENOMEM`
  /// (`.noMemory`), maps nothing, and maps once the limit is raised.
  @Test(
    .disabled(if: isRunningUnderSanitizer, "a sanitizer's allocator maps memory of its own at any time"), .runsExitTests
  )
  func aRegionWithoutAddressSpaceIsNoMemory() async {
    await #expect(processExitsWith: .success) {
      runScenarioInForkedChild("region without address space") {
        prepareForAddressSpaceLimit()
        let before = ProcessFootprint()
        let outcome: String = withAddressSpaceHeadroom(256 << 10) {
          do throws(SystemCallError) {
            _ = try SharedMemoryRegion(sharedAnonymousByteCount: 1 << 20)
            return "mapped"
          } catch {
            return error.call == "mmap" && error.code == .noMemory ? "ENOMEM" : "\(error)"
          }
        }
        precondition(outcome == "ENOMEM", "region: \(outcome)")
        before.expectBack(extraMappings: 0, "a refused region")
        let region = try! SharedMemoryRegion(sharedAnonymousByteCount: 1 << 20)
        let lock = try! SharedMemoryLock.initialize(at: region.address)
        precondition(try! lock.tryLock() == .acquired)
        lock.unlock()
      }
    }
  }

  /// A group name holding a NUL byte: the kernel name of each thread is the name cut before
  /// the NUL, followed by the thread's index ("never the index" is lost, as for a
  /// ``/Threads/ThreadPool`` whose name holds a NUL), so the threads stay told apart in
  /// `top -H` and debuggers; the full names are kept.
  @Test func aGroupNameWithANULKeepsEachThreadsIndexInTheKernelName() async throws {
    let group = try await RunLoopThreadGroup.start(threadCount: 2, name: "io\u{0}disk")
    let kernelNames = group.threads.map { thread in
      thread.kernelThreadID.map { readFirstLine("/proc/self/task/\($0)/comm") } ?? "ended"
    }
    #expect(kernelNames == ["io-0", "io-1"])
    #expect(group.threads.map(\.name) == ["io\u{0}disk-0", "io\u{0}disk-1"])
    #expect(ThreadConfiguration.kernelName(for: "\u{0}x-12", keeping: "-12") == "-12")
    await shutDownOffPool(group)
  }
}
