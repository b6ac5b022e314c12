import ProcessTestSupport
import Synchronization
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Round 5: signals without `SA_RESTART` delivered to threads blocked in the Threads
/// module's blocking calls, and resource accounting over many lifecycles. Every scenario
/// runs in an exit test: a process-wide signal handler and counts of `/proc/self/fd` and
/// `/proc/self/task` must not meet other tests.
@Suite("Audit round 5: threads under signals and resource accounting", .timeLimit(.minutes(3)))
struct AuditRound5ThreadsSignalsTests {
  // MARK: Signals

  /// `Thread.sleep(for:)` and `sleep(until:)` promise "never returns early" and "signals do
  /// not shorten the sleep" (`EINTR` resumed with the same absolute deadline). A sleeper
  /// hit by SIGUSR1 every ~100 us (handler installed without `SA_RESTART`) sleeps its full
  /// time.
  @Test(.runsExitTests) func sleepsHitBySignalsWithoutRestartNeverEndEarly() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 30)
      sleepsUnderSignals()
      exit(0)
    }
  }

  /// `join()` blocks until the joined thread has ended. A joiner hit by signals does not
  /// return before then, and gets the body's value.
  @Test(.runsExitTests) func aJoinHitBySignalsReturnsOnlyOnceTheThreadEnded() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 30)
      joinUnderSignals()
      exit(0)
    }
  }

  /// A thread started with a relative priority makes its creator wait until the new thread
  /// applied it (a futex handshake). A creator hit by signals still starts every thread once,
  /// with its priority applied, and joins each.
  @Test(.runsExitTests) func startingThreadsWithAPriorityFromASignalledThreadStartsEachOnce() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 30)
      prioritizedStartsUnderSignals()
      exit(0)
    }
  }

  /// `exit()` waits for running `finishBeforeExit` threads. The exiting thread hit by
  /// signals still waits: the critical thread's last output (after a 300 ms sleep) is there.
  @Test(.runsExitTests) func exitHitBySignalsStillWaitsForFinishBeforeExitThreads() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
      armAlarm(seconds: 30)
      exitUnderSignals()
    }
    if let result {
      #expect(String(decoding: result.standardOutputContent, as: UTF8.self).hasSuffix("critical work done\n"))
    }
  }

  /// An idle pool thread waits `idleTimeout` before it ends (monotonic clock). Signals hitting
  /// it while it waits idle must not end that wait early.
  @Test(.runsExitTests) func anIdlePoolThreadHitBySignalsIsNotRetiredBeforeItsIdleTimeout() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 30)
      await idlePoolThreadUnderSignals()
      exit(0)
    }
  }

  /// A pool thread hit by signals while it runs jobs and between them loses no job: every
  /// job's outcome reaches its task.
  @Test(.runsExitTests) func poolJobsRunWhileTheirThreadIsHitBySignalsAllComplete() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 30)
      await poolJobsUnderSignals()
      exit(0)
    }
  }

  // MARK: Resources

  /// 1,500 spawned-and-joined threads and 500 detached ones: the descriptors and the threads
  /// of the process come back to their start values, and each thread object is released
  /// once its thread is joined.
  @Test(.runsExitTests) func manyThreadLifecyclesLeaveNoDescriptorThreadOrObjectBehind() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      threadLifecycles()
      exit(0)
    }
  }

  /// More thread-locals than POSIX has keys (1,024), created and released one after the
  /// other, each used on the calling thread and on a thread that ends (its destructor runs
  /// once): the keys are given back, so none runs out; every `ThreadLocal` is released.
  @Test(.runsExitTests) func moreThreadLocalsThanKeysOneAfterTheOtherEachGiveTheirKeyBack() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      threadLocalLifecycles()
      exit(0)
    }
  }

  /// 1,000 threads created by other code (raw `pthread_create`) that adopt a thread object,
  /// use its dictionary and add an exit handler: each handler runs once, each object is
  /// released once the thread is joined, and descriptors and threads come back.
  @Test(.runsExitTests) func manyAdoptedThreadLifecyclesLeaveNoDescriptorThreadOrObjectBehind() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      adoptedThreadLifecycles()
      exit(0)
    }
  }

  /// A thread object that is never started (or whose start failed) keeps its body, its
  /// `onExit` handlers and its exit-request handlers only while it lives: 1,000 of them,
  /// released, release what they captured.
  @Test func threadsNeverStartedReleaseTheirBodyAndHandlersWithTheObject() throws {
    for index in 0..<1_000 {
      let probe = WeakProbe()
      do {
        let captured = Probe()
        probe.object = captured
        var configuration = ThreadConfiguration()
        if index % 2 == 1 { configuration.relativePriority = 2 }  // start refused
        let thread = Thread(name: "never", configuration: configuration) { withExtendedLifetime(captured) {} }
        thread.onExit { withExtendedLifetime(captured) {} }
        thread.addExitRequestHandler { withExtendedLifetime(captured) {} }
        if index % 2 == 1 { #expect(throws: ThreadStartError.self) { try thread.start() } }
      }
      #expect(probe.object == nil, "thread \(index): what its body and handlers captured outlived it")
      if probe.object != nil { break }
    }
  }

  /// Pools created, used and shut down 300 times, then released: descriptors and threads
  /// come back, and each pool object is released.
  @Test(.runsExitTests) func manyPoolLifecyclesLeaveNoDescriptorThreadOrObjectBehind() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      await poolLifecycles()
      exit(0)
    }
  }
}

// MARK: - Signal helpers

/// State shared between a target thread and its signaller.
private final class SignalTarget: Sendable {
  /// The target's `pthread_t` (0 until published).
  let tid = Atomic<UInt>(0)
  /// Set to stop the signaller.
  let stop = Atomic<Bool>(false)

  /// Unblocks SIGUSR1 on the calling thread (the test runner's threads block it, and new
  /// threads inherit the mask of the thread that created them) and makes it the target.
  func publishCallingThread() {
    unblockSignalOnCallingThread()
    tid.store(UInt(pthread_self()), ordering: .releasing)
  }

  func waitForTarget() {
    while tid.load(ordering: .acquiring) == 0 { sched_yield() }
  }
}

/// Starts a thread that sends SIGUSR1 to `target`'s thread every ~100 us until `stop`.
/// Returns its handle; the value is how many signals it sent.
private func startSignaller(_ target: SignalTarget) -> JoinableThread<Int, Never> {
  do {
    return try Thread.spawn(name: "signaller") { () throws(Never) -> Int in
      target.waitForTarget()
      var sent = 0
      while !target.stop.load(ordering: .acquiring) {
        if pthread_kill(pthread_t(target.tid.load(ordering: .acquiring)), SIGUSR1) == 0 { sent += 1 }
        var pause = timespec(tv_sec: 0, tv_nsec: 100_000)
        _ = nanosleep(&pause, nil)
      }
      return sent
    }
  } catch {
    fatalError("spawn: \(error)")
  }
}

private func sleepsUnderSignals() {
  installCountingSignalHandler()
  let target = SignalTarget()
  let signaller = startSignaller(target)
  let sleeper = try! Thread.spawn(name: "sleeper") { () throws(Never) -> [Int64] in
    let before = signalsHandled.load(ordering: .relaxed)
    target.publishCallingThread()
    waitForSignalsHandled(3, since: before)
    var elapsed: [Int64] = []
    var start = monotonicNanoseconds()
    Thread.sleep(for: .milliseconds(300))
    elapsed.append(monotonicNanoseconds() - start)
    start = monotonicNanoseconds()
    Thread.sleep(until: .after(.milliseconds(200)))
    elapsed.append(monotonicNanoseconds() - start)
    elapsed.append(Int64(signalsHandled.load(ordering: .relaxed) - before))
    return elapsed
  }
  let result = sleeper.join()
  target.stop.store(true, ordering: .releasing)
  let sent = signaller.join()
  precondition(sent > 10 && result[2] > 0, "too few signals: sent \(sent), handled \(result[2])")
  precondition(result[0] >= 300_000_000, "Thread.sleep(for: 300 ms) returned after \(result[0]) ns")
  precondition(result[1] >= 199_000_000, "Thread.sleep(until: +200 ms) returned after \(result[1]) ns")
}

private func joinUnderSignals() {
  installCountingSignalHandler()
  let flags = Flags()
  let joined = HandleSlot(
    try! Thread.spawn(name: "joined") { () throws(Never) -> Int in
      while !flags.release.load(ordering: .acquiring) { sched_yield() }
      flags.ended.store(true, ordering: .releasing)
      return 42
    })
  let target = SignalTarget()
  let signaller = startSignaller(target)
  let joiner = try! Thread.spawn(name: "joiner") { () throws(Never) -> (Int, Bool) in
    target.publishCallingThread()
    let value = joined.handle.take()!.join()
    return (value, flags.ended.load(ordering: .acquiring))
  }
  let before = signalsHandled.load(ordering: .relaxed)
  waitForSignalsHandled(30, since: before)
  flags.release.store(true, ordering: .releasing)
  let (value, sawEnd) = joiner.join()
  target.stop.store(true, ordering: .releasing)
  _ = signaller.join()
  precondition(value == 42, "join returned \(value)")
  precondition(sawEnd, "join returned before the joined thread's body ended")
}

private func prioritizedStartsUnderSignals() {
  installCountingSignalHandler()
  let target = SignalTarget()
  let signaller = startSignaller(target)
  let creator = try! Thread.spawn(name: "creator") { () throws(Never) -> [String] in
    let before = signalsHandled.load(ordering: .relaxed)
    target.publishCallingThread()
    waitForSignalsHandled(3, since: before)
    var problems: [String] = []
    var configuration = ThreadConfiguration()
    configuration.relativePriority = 0.25
    for index in 0..<300 {
      do {
        let nice = try Thread.spawn(name: "nice-\(index)", configuration: configuration) {
          () throws(Never) -> Int32 in
          (try? Thread.currentNiceValue()) ?? 99
        }.join()
        if nice != 10 { problems.append("thread \(index) ran at nice \(nice)") }
      } catch {
        problems.append("thread \(index) failed to start: \(error)")
      }
    }
    if signalsHandled.load(ordering: .relaxed) - before == 0 { problems.append("no signal handled") }
    return problems
  }
  let problems = creator.join()
  target.stop.store(true, ordering: .releasing)
  _ = signaller.join()
  precondition(problems.isEmpty, "\(problems.prefix(5))")
}

private func exitUnderSignals() -> Never {
  installCountingSignalHandler()
  let target = SignalTarget()
  target.publishCallingThread()
  let signaller = startSignaller(target)
  signaller.detach()
  var configuration = ThreadConfiguration()
  configuration.finishBeforeExit = true
  let started = Flags()
  try! Thread.detach(name: "critical", configuration: configuration) {
    started.release.store(true, ordering: .releasing)
    Thread.sleep(for: .milliseconds(300))
    let line = "critical work done\n"
    _ = line.withCString { write(1, $0, strlen($0)) }
  }
  while !started.release.load(ordering: .acquiring) { sched_yield() }
  waitForSignalsHandled(3, since: 0)
  exit(0)
}

private final class Flags: Sendable {
  let release = Atomic<Bool>(false)
  let ended = Atomic<Bool>(false)
}

private func idlePoolThreadUnderSignals() async {
  installCountingSignalHandler()
  var configuration = ThreadPool.Configuration()
  configuration.maximumThreads = 1
  configuration.idleTimeout = .milliseconds(400)
  let pool = ThreadPool(name: "signalled", configuration: configuration)
  let target = SignalTarget()
  let signaller = startSignaller(target)
  // The idle wait starts after the closure returned: later than `idleFrom`.
  let idleFrom = try! await pool.run { () -> Int64 in
    target.publishCallingThread()
    return monotonicNanoseconds()
  }
  let before = signalsHandled.load(ordering: .relaxed)
  while pool.statistics.threads > 0 {
    precondition(monotonicNanoseconds() - idleFrom < 20_000_000_000, "the idle thread never retired")
    sched_yield()
  }
  let retiredAfter = monotonicNanoseconds() - idleFrom
  target.stop.store(true, ordering: .releasing)
  _ = await signaller.joinOffPool()
  let handled = signalsHandled.load(ordering: .relaxed) - before
  await pool.shutDown()
  precondition(handled > 0, "no signal handled: \(handled)")
  precondition(
    retiredAfter >= 400_000_000,
    "an idle pool thread retired \(retiredAfter) ns after its job, before its 400 ms idle timeout")
}

private func poolJobsUnderSignals() async {
  installCountingSignalHandler()
  var configuration = ThreadPool.Configuration()
  configuration.maximumThreads = 1
  let pool = ThreadPool(name: "signalled-jobs", configuration: configuration)
  let target = SignalTarget()
  let signaller = startSignaller(target)
  _ = try! await pool.run { target.publishCallingThread() }
  let before = signalsHandled.load(ordering: .relaxed)
  var total = 0
  for round in 0..<2_000 {
    let value = try! await pool.run { () -> Int in
      if round % 100 == 0 { Thread.sleep(for: .milliseconds(2)) }
      return round
    }
    total += value
  }
  target.stop.store(true, ordering: .releasing)
  _ = await signaller.joinOffPool()
  await pool.shutDown()
  precondition(total == (0..<2_000).reduce(0, +), "lost or wrong pool outcomes: \(total)")
  precondition(signalsHandled.load(ordering: .relaxed) - before > 0, "no signals handled")
}

extension JoinableThread where Failure == Never {
  /// Joins from async code on a helper thread (ThreadsTests has no RunLoopConcurrency).
  fileprivate consuming func joinOffPool() async -> Value {
    let slot = HandleSlot<Value>(consume self)
    return await withCheckedContinuation { continuation in
      _ = try! Thread.detach(name: "join-off-pool") {
        continuation.resume(returning: slot.handle.take()!.join())
      }
    }
  }
}

// MARK: - Resource helpers

private final class WeakThread: @unchecked Sendable {
  weak var thread: Thread?
}

private func threadLifecycles() {
  // Warm up what is created once (registry, main thread object).
  _ = Thread.current
  _ = try! Thread.spawn { () throws(Never) in }.join()
  let descriptors = procEntryCount("/proc/self/fd")
  let threads = procEntryCount("/proc/self/task")
  for index in 0..<1_500 {
    let weak = WeakThread()
    do {
      let handle = try! Thread.spawn(name: "cycle-\(index)") { () throws(Never) -> Int in
        Thread.current.threadDictionary["k"] = index
        return index
      }
      weak.thread = handle.thread
      let value = handle.join()
      precondition(value == index)
    }
    precondition(weak.thread == nil, "thread object \(index) outlived its join")
  }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 1,500 joined threads")
  let counter = Counter()
  for _ in 0..<500 {
    try! Thread.detach { counter.value.add(1, ordering: .releasing) }
  }
  while counter.value.load(ordering: .acquiring) < 500 { sched_yield() }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 500 detached threads")
}

private final class Counter: Sendable {
  let value = Atomic<Int>(0)
}

private final class WeakLocal {
  weak var local: ThreadLocal<Int>?
}

private func threadLocalLifecycles() {
  let destroyed = Counter()
  for index in 0..<1_200 {
    let weak = WeakLocal()
    do {
      let local = ThreadLocal<Int>(
        initialValue: { -1 }, destructor: { _ in destroyed.value.add(1, ordering: .relaxed) })
      weak.local = local
      local.value = index
      precondition(local.value == index)
      local.removeValue()
      let seen = try! Thread.spawn { () throws(Never) -> Int in
        let first = local.value
        local.value = index
        return first
      }.join()
      precondition(seen == -1, "a fresh thread-local started from \(seen)")
      precondition(destroyed.value.load(ordering: .relaxed) == index + 1, "destructor count off at \(index)")
    }
    precondition(weak.local == nil, "ThreadLocal \(index) outlived its last reference")
  }
}

private final class Probe: Sendable {}

private final class WeakProbe: @unchecked Sendable {
  weak var object: Probe?
}

/// What each raw pthread of `adoptedThreadLifecycles` receives.
private final class AdoptedContext: @unchecked Sendable {
  let weak = WeakThread()
  let handled = Counter()
}

private func adoptedThreadLifecycles() {
  _ = Thread.current
  let descriptors = procEntryCount("/proc/self/fd")
  let threads = procEntryCount("/proc/self/task")
  for index in 0..<1_000 {
    let context = AdoptedContext()
    var handle = pthread_t()
    let result = pthread_create(
      &handle, nil,
      { argument in
        let context = Unmanaged<AdoptedContext>.fromOpaque(argument!).takeRetainedValue()
        let me = Thread.current
        context.weak.thread = me
        me.threadDictionary["k"] = 1
        let handled = context.handled
        me.onExit { handled.value.add(1, ordering: .relaxed) }
        return nil
      }, Unmanaged.passRetained(context).toOpaque())
    precondition(result == 0, "pthread_create: \(result)")
    precondition(pthread_join(handle, nil) == 0)
    precondition(
      context.handled.value.load(ordering: .relaxed) == 1,
      "adopted thread \(index): exit handler ran \(context.handled.value.load(ordering: .relaxed)) times")
    precondition(context.weak.thread == nil, "adopted thread \(index)'s object outlived the thread")
  }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 1,000 adopted threads")
}

private final class WeakPool {
  weak var pool: ThreadPool?
}

private func poolLifecycles() async {
  do {
    let warm = ThreadPool(name: "warm")
    _ = try! await warm.run { 0 }
    await warm.shutDown()
  }
  let descriptors = procEntryCount("/proc/self/fd")
  let threads = procEntryCount("/proc/self/task")
  for index in 0..<300 {
    let weak = WeakPool()
    do {
      var configuration = ThreadPool.Configuration()
      configuration.minimumThreads = index % 2
      configuration.maximumThreads = 2
      let pool = ThreadPool(name: "cycle", configuration: configuration)
      weak.pool = pool
      async let first = pool.run { index }
      async let second = pool.run { index + 1 }
      let sum = try! await first + second
      precondition(sum == 2 * index + 1)
      await pool.shutDown()
    }
    precondition(weak.pool == nil, "pool \(index) outlived its shutdown and last reference")
  }
  expectProcessBack(descriptors: descriptors, threads: threads, "after 300 pools")
}
