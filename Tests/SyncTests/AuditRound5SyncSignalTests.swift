import Glibc
import ProcessTestSupport
import Sync
import Testing

// Audit round 5: a thread blocked in each blocking call of Sync is sent SIGUSR1 again and
// again, with a handler installed WITHOUT SA_RESTART (sa_flags = 0), so every futex wait,
// pthread wait and system call it sleeps in is interrupted with EINTR. Each call must behave
// as if no signal came: a timed call that nobody releases reports a timeout, never before
// its deadline; an untimed call returns only once released (the condition waits without a
// predicate may return spuriously, as documented, and are covered through their predicate
// forms); no release is lost among the signals; errno is left as it was.
//
// Every scenario runs in an exit test: the handler is process-wide, and the child process
// runs alone, with alarm() armed so a hang fails only its own test.

/// A value no call would store in errno.
private let errnoSentinel: Int32 = 4242
/// How long an untimed call is bombarded with signals before it is released, and how long
/// a timed call waits.
private let stormLength = Duration.milliseconds(120)

/// The count of SIGUSR1 caught. Initialized before the handler is installed; the handler
/// only adds to it.
private nonisolated(unsafe) let caughtSignals: UnsafeMutablePointer<UInt32> = {
  let word = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
  word.initialize(to: 0)
  return word
}()

/// The SIGUSR1 handler: counts, nothing else (no allocation, no lock, errno untouched).
private func countSignal(_: Int32) {
  _ = UInt32.atomicFetchAdd(1, at: caughtSignals, ordering: .relaxed)
}

/// In the exit test's child: arms the alarm and installs the counting handler without
/// SA_RESTART, so interrupted system calls fail with EINTR instead of restarting.
private func installInterruptingHandler() {
  alarm(50)
  _ = caughtSignals.pointee
  var action = sigaction()
  action.__sigaction_handler.sa_handler = countSignal
  sigemptyset(&action.sa_mask)
  action.sa_flags = 0
  precondition(sigaction(SIGUSR1, &action, nil) == 0, "sigaction failed")
}

/// Writes `message` to standard error and ends the child process with a failure.
private func failChild(_ message: String) -> Never {
  let text = Array("FAILED: \(message)\n".utf8)
  _ = text.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
  exit(1)
}

/// A flag on a raw atomic word (independent of the primitives under test).
private final class RawFlag: @unchecked Sendable {
  private let word = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
  init() { word.initialize(to: 0) }
  deinit { word.deallocate() }
  func set() { UInt32.atomicStore(1, at: word, ordering: .releasing) }
  var isSet: Bool { UInt32.atomicLoad(at: word, ordering: .acquiring) == 1 }
}

/// The message a blocked call's thread leaves (read after the join).
private final class Message: @unchecked Sendable {
  var text: String?
}

/// Sends one SIGUSR1 to `thread`, then pauses about 300 µs.
private func pulse(_ thread: pthread_t) {
  let result = pthread_kill(thread, SIGUSR1)
  precondition(result == 0, "pthread_kill failed: \(result)")
  var pause = timespec(tv_sec: 0, tv_nsec: 300_000)
  _ = nanosleep(&pause, nil)
}

/// How many SIGUSR1 were caught since `before` (a count read earlier).
private func caughtSince(_ before: UInt32) -> UInt32 {
  UInt32.atomicLoad(at: caughtSignals, ordering: .relaxed) &- before
}

/// At least this many signals must reach a call for its scenario to prove anything.
/// ThreadSanitizer defers a handler to the thread's next intercepted call, so the count
/// may lag there (the calls are interrupted all the same): it is not required then.
private let requiredSignals: UInt32 = isRunningUnderThreadSanitizer ? 0 : 3

/// Runs `call` on a new thread and sends that thread SIGUSR1 about every 300 µs until it
/// returns. With `release` (an untimed call): after `stormLength` of signals, and at least
/// `requiredSignals` caught however loaded the machine, the call must not have returned;
/// then `release` runs and the signals go on until the call returns (a lost release hangs,
/// and the alarm fails the test). `call` returns nil when its own checks passed, else what
/// went wrong. Returns how many signals were caught meanwhile.
@discardableResult
private func underSignals(_ name: String, release: (() -> Void)?, _ call: @escaping @Sendable () -> String?) -> UInt32 {
  let started = RawFlag()
  let finished = RawFlag()
  let message = Message()
  let before = UInt32.atomicLoad(at: caughtSignals, ordering: .relaxed)
  let thread = startThread {
    // The child may start with SIGUSR1 blocked (inherited masks): unblock it here, or
    // pthread_kill only leaves it pending.
    var set = sigset_t()
    sigemptyset(&set)
    sigaddset(&set, SIGUSR1)
    precondition(pthread_sigmask(SIG_UNBLOCK, &set, nil) == 0)
    started.set()
    errno = errnoSentinel
    var text = call()
    if text == nil, errno != errnoSentinel { text = "errno is \(errno) afterwards, not \(errnoSentinel)" }
    message.text = text
    finished.set()
  }
  while !started.isSet { sched_yield() }
  if let release {
    let end = MonotonicInstant.after(stormLength)
    while !end.hasPassed || caughtSince(before) < requiredSignals, !finished.isSet { pulse(thread) }
    if finished.isSet {
      joinThread(thread)
      failChild("\(name): returned under signals before it was released (\(message.text ?? "no message"))")
    }
    release()
  }
  while !finished.isSet { pulse(thread) }
  joinThread(thread)
  if let text = message.text { failChild("\(name): \(text)") }
  return caughtSince(before)
}

/// A timed call nobody releases, under signals: it must report a timeout (`false`), not
/// before `stormLength` has passed. Tried again (up to five times) when a loaded machine
/// let fewer than `requiredSignals` reach it.
private func timedUnderSignals(_ name: String, _ call: @escaping @Sendable (MonotonicInstant) -> Bool) {
  var caught: UInt32 = 0
  for _ in 0..<5 {
    caught = underSignals(name, release: nil) {
      let start = MonotonicInstant.now
      let got = call(start + stormLength)
      let waited = start.duration(to: .now)
      if got { return "succeeded although nobody released it (after \(waited))" }
      if waited < stormLength { return "gave up after \(waited), before its deadline \(stormLength)" }
      return nil
    }
    if caught >= requiredSignals { return }
  }
  failChild("\(name): only \(caught) signals were caught; the scenario proves nothing")
}

/// Runs `body` on a helper thread (a holder that must release from its own thread) and
/// returns the thread to join.
private func helper(_ body: @escaping @Sendable () -> Void) -> pthread_t { startThread(body) }

@Suite("Audit round 5: timed waits under signals without SA_RESTART", .timeLimit(.minutes(3)))
struct AuditRound5SyncTimedSignalTests {
  @Test("timed lock calls against a holder: a timeout, never early, errno kept", .runsExitTests)
  func timedLocks() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        let lock = Lock()
        let recursive = RecursiveLock()
        let spin = SpinLock()
        let readWrite = ReadWriteLock()
        let conditionLock = ConditionLock(condition: 0)
        let condition = Condition()
        let value = LockedValue(0)
        let holding = RawFlag()
        let done = RawFlag()
        let holder = helper {
          lock.lock()
          recursive.lock()
          spin.lock()
          readWrite.writeLock()
          conditionLock.lock()
          condition.lock()
          value.withLock { _ in
            holding.set()
            while !done.isSet { sched_yield() }
          }
          condition.unlock()
          conditionLock.unlock()
          readWrite.unlock()
          spin.unlock()
          recursive.unlock()
          lock.unlock()
        }
        while !holding.isSet { sched_yield() }
        timedUnderSignals("Lock.lock(before:)") { lock.lock(before: $0) }
        timedUnderSignals("RecursiveLock.lock(before:)") { recursive.lock(before: $0) }
        timedUnderSignals("SpinLock.lock(before:)") { spin.lock(before: $0) }
        timedUnderSignals("ReadWriteLock.readLock(before:)") { readWrite.readLock(before: $0) }
        timedUnderSignals("ReadWriteLock.writeLock(before:)") { readWrite.writeLock(before: $0) }
        timedUnderSignals("ConditionLock.lock(before:)") { conditionLock.lock(before: $0) }
        timedUnderSignals("ConditionLock.lock(whenCondition:before:)") {
          conditionLock.lock(whenCondition: 0, before: $0)
        }
        timedUnderSignals("Condition.lock(before:)") { condition.lock(before: $0) }
        timedUnderSignals("LockedValue.withLock(before:)") { value.withLock(before: $0) { _ in true } ?? false }
        done.set()
        joinThread(holder)
      }
      exit(0)
    }
  }

  @Test("timed waits nobody satisfies: a timeout, never early, errno kept", .runsExitTests)
  func timedWaits() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        let semaphore = Semaphore(value: 0)
        timedUnderSignals("Semaphore.wait(before:)") { semaphore.wait(before: $0) }
        let latch = Latch(count: 1)
        timedUnderSignals("Latch.wait(before:)") { latch.wait(before: $0) }
        let word = AtomicInteger<UInt32>(0)
        timedUnderSignals("AtomicInteger.wait(whileEqualTo:before:) in a loop on the value") { deadline in
          // Spurious returns are documented; `false` must still never come early.
          while word.load(ordering: .acquiring) == 0 {
            if !word.wait(whileEqualTo: 0, before: deadline) { return false }
          }
          return true
        }
        let condition = Condition()
        timedUnderSignals("Condition.wait(until:before:)") { deadline in
          condition.withLock { condition.wait(until: { false }, before: deadline) }
        }
        timedUnderSignals("Condition.wait(before:) in a loop") { deadline in
          condition.withLock {
            while condition.wait(before: deadline) {}
            return false
          }
        }
        let mutex = Lock()
        let variable = ConditionVariable()
        timedUnderSignals("ConditionVariable.wait(_:until:before:)") { deadline in
          mutex.withLock { variable.wait(mutex, until: { false }, before: deadline) }
        }
        let conditionLock = ConditionLock(condition: 0)
        timedUnderSignals("ConditionLock.lock(whenCondition:before:) for a value never set") {
          conditionLock.lock(whenCondition: 1, before: $0)
        }
        let value = LockedValue(0)
        timedUnderSignals("LockedValue.withLock(when:before:)") { deadline in
          value.withLock(when: { $0 == 1 }, before: deadline) { _ in true } ?? false
        }
      }
      exit(0)
    }
  }

  @Test("a priority-inheritance lock's timed lock against a holder: a timeout, never early", .runsExitTests)
  func priorityInheritance() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        guard let lock = try? PriorityInheritanceLock() else { exit(0) }  // no PI futexes here
        let holding = RawFlag()
        let done = RawFlag()
        let holder = helper {
          lock.lock()
          holding.set()
          while !done.isSet { sched_yield() }
          lock.unlock()
        }
        while !holding.isSet { sched_yield() }
        timedUnderSignals("PriorityInheritanceLock.lock(before:)") { lock.lock(before: $0) }
        done.set()
        joinThread(holder)
      }
      exit(0)
    }
  }

  @Test("a shared-memory lock and condition: timed calls time out, never early", .runsExitTests)
  func sharedMemory() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        do {
          let region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
          let lock = try SharedMemoryLock.initialize(at: region.address)
          let condition = SharedMemoryCondition.initialize(at: region.address + SharedMemoryLock.byteCount)
          // The condition first, from a thread that takes and releases the lock itself.
          underSignals("SharedMemoryCondition.wait(_:before:) in a loop", release: nil) {
            do {
              let start = MonotonicInstant.now
              let deadline = start + stormLength
              _ = try lock.lock()
              defer { lock.unlock() }
              while true {
                let result = try condition.wait(lock, before: deadline)
                if result.timedOut { break }
              }
              let waited = start.duration(to: .now)
              return waited < stormLength ? "reported a timeout after \(waited), before its deadline" : nil
            } catch {
              return "threw \(error)"
            }
          }
          let holding = RawFlag()
          let done = RawFlag()
          let holder = helper {
            _ = try? lock.lock()
            holding.set()
            while !done.isSet { sched_yield() }
            lock.unlock()
          }
          while !holding.isSet { sched_yield() }
          timedUnderSignals("SharedMemoryLock.lock(before:)") { deadline in
            (try? lock.lock(before: deadline)).flatMap { $0 } != nil
          }
          done.set()
          joinThread(holder)
          withExtendedLifetime(region) {}
        } catch {
          failChild("setup threw \(error)")
        }
      }
      exit(0)
    }
  }
}

@Suite("Audit round 5: untimed waits under signals without SA_RESTART", .timeLimit(.minutes(3)))
struct AuditRound5SyncUntimedSignalTests {
  @Test("lock calls wait for the release through the signals, and get the lock", .runsExitTests)
  func locks() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        let lock = Lock()
        lock.lock()
        underSignals("Lock.lock()", release: { lock.unlock() }) {
          lock.lock()
          lock.unlock()
          return nil
        }
        let recursive = RecursiveLock()
        recursive.lock()
        recursive.lock()
        underSignals(
          "RecursiveLock.lock()",
          release: {
            recursive.unlock()
            recursive.unlock()
          }
        ) {
          recursive.lock()
          recursive.unlock()
          return nil
        }
        let spin = SpinLock()
        spin.lock()
        underSignals("SpinLock.lock()", release: { spin.unlock() }) {
          spin.lock()
          spin.unlock()
          return nil
        }
        let readWrite = ReadWriteLock()
        readWrite.writeLock()
        underSignals("ReadWriteLock.readLock()", release: { readWrite.unlock() }) {
          readWrite.readLock()
          readWrite.unlock()
          return nil
        }
        readWrite.readLock()
        underSignals("ReadWriteLock.writeLock()", release: { readWrite.unlock() }) {
          readWrite.writeLock()
          readWrite.unlock()
          return nil
        }
        let conditionLock = ConditionLock(condition: 0)
        conditionLock.lock()
        underSignals("ConditionLock.lock()", release: { conditionLock.unlock() }) {
          conditionLock.lock()
          conditionLock.unlock()
          return nil
        }
        conditionLock.lock()
        underSignals("ConditionLock.lock(whenCondition:)", release: { conditionLock.unlock(withCondition: 7) }) {
          conditionLock.lock(whenCondition: 7)
          let value = conditionLock.condition
          conditionLock.unlock()
          return value == 7 ? nil : "holds the lock with condition \(value)"
        }
        let condition = Condition()
        condition.lock()
        underSignals("Condition.lock()", release: { condition.unlock() }) {
          condition.lock()
          condition.unlock()
          return nil
        }
        let value = LockedValue(0)
        let inside = RawFlag()
        let leave = RawFlag()
        let holder = helper {
          value.withLock { _ in
            inside.set()
            while !leave.isSet { sched_yield() }
          }
        }
        while !inside.isSet { sched_yield() }
        underSignals("LockedValue.withLock", release: { leave.set() }) {
          value.withLock { $0 += 1 }
          return nil
        }
        joinThread(holder)

        final class Key: Sendable {}
        let key = Key()
        let keyInside = RawFlag()
        let keyLeave = RawFlag()
        let keyHolder = helper {
          synchronized(key) {
            keyInside.set()
            while !keyLeave.isSet { sched_yield() }
          }
        }
        while !keyInside.isSet { sched_yield() }
        underSignals("synchronized(object)", release: { keyLeave.set() }) {
          synchronized(key) {}
          return nil
        }
        joinThread(keyHolder)
      }
      exit(0)
    }
  }

  @Test("predicate waits return only once the state is set, and no release is lost", .runsExitTests)
  func predicateWaits() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        let condition = Condition()
        let ready = GuardedValue(false)  // protected by condition
        underSignals(
          "Condition.wait(until:)",
          release: {
            condition.withLock {
              ready.value = true
              condition.signal()
            }
          }
        ) {
          condition.withLock { condition.wait(until: { ready.value }) }
          return nil
        }
        let mutex = Lock()
        let variable = ConditionVariable()
        let set = GuardedValue(false)  // protected by mutex
        underSignals(
          "ConditionVariable.wait(_:until:)",
          release: {
            mutex.withLock { set.value = true }
            variable.signal()
          }
        ) {
          mutex.withLock { variable.wait(mutex, until: { set.value }) }
          return nil
        }
        let value = LockedValue(0)
        underSignals("LockedValue.withLock(when:)", release: { value.withLock { $0 = 1 } }) {
          value.withLock(when: { $0 == 1 }) { $0 = 2 }
          return nil
        }
        // The plain waits may return spuriously (documented): a loop on the state must end
        // once it is set, however many signals came.
        let flag = GuardedValue(false)  // protected by condition
        underSignals(
          "Condition.wait() in a loop",
          release: {
            condition.withLock {
              flag.value = true
              condition.broadcast()
            }
          }
        ) {
          condition.withLock {
            while !flag.value { condition.wait() }
          }
          return nil
        }
      }
      exit(0)
    }
  }

  @Test("semaphore, latch, barrier, once, lazy and atomic waits return only once released", .runsExitTests)
  func waits() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        let semaphore = Semaphore(value: 0)
        underSignals("Semaphore.wait()", release: { semaphore.signal() }) {
          semaphore.wait()
          return semaphore.value == 0 ? nil : "left \(semaphore.value) permits"
        }
        let latch = Latch(count: 2)
        underSignals("Latch.wait()", release: { latch.countDown(by: 2) }) {
          latch.wait()
          return latch.isOpen ? nil : "returned while the latch is closed"
        }
        let barrier = ThreadBarrier(parties: 2)
        let serialHere = GuardedValue(false)  // written by this thread, read after the join
        let serialThere = GuardedValue(false)  // written by the blocked thread, read after the join
        underSignals("ThreadBarrier.arriveAndWait()", release: { serialHere.value = barrier.arriveAndWait() }) {
          serialThere.value = barrier.arriveAndWait()
          return nil
        }
        if serialHere.value == serialThere.value { failChild("not exactly one serial thread at the barrier") }

        let once = Once()
        let runs = AtomicInteger<Int>(0)
        let inBody = RawFlag()
        let finishBody = RawFlag()
        let runner = helper {
          once.run {
            _ = runs.fetchAdd(1, ordering: .relaxed)
            inBody.set()
            while !finishBody.isSet { sched_yield() }
          }
        }
        while !inBody.isSet { sched_yield() }
        underSignals("Once.run while another thread runs the body", release: { finishBody.set() }) {
          once.run { _ = runs.fetchAdd(1, ordering: .relaxed) }
          return once.isCompleted ? nil : "returned before the body completed"
        }
        joinThread(runner)
        if runs.load(ordering: .relaxed) != 1 { failChild("the Once body ran \(runs.load(ordering: .relaxed)) times") }

        let lazyStarted = RawFlag()
        let lazyFinish = RawFlag()
        let lazy = Lazy<Int> {
          lazyStarted.set()
          while !lazyFinish.isSet { sched_yield() }
          return 42
        }
        let initializer = helper { _ = lazy.value }
        while !lazyStarted.isSet { sched_yield() }
        underSignals("Lazy.value while another thread initializes it", release: { lazyFinish.set() }) {
          lazy.value == 42 ? nil : "read \(lazy.value)"
        }
        joinThread(initializer)

        let word = AtomicInteger<UInt32>(0)
        underSignals(
          "AtomicInteger.wait(whileEqualTo:) in a loop",
          release: {
            word.store(1, ordering: .releasing)
            word.wakeAll()
          }
        ) {
          while word.load(ordering: .acquiring) == 0 { word.wait(whileEqualTo: 0) }
          return nil
        }
      }
      exit(0)
    }
  }

  @Test("priority-inheritance and shared-memory locks wait for the release through the signals", .runsExitTests)
  func kernelLocks() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        if let lock = try? PriorityInheritanceLock() {
          let holding = RawFlag()
          let leave = RawFlag()
          let holder = helper {
            lock.lock()
            holding.set()
            while !leave.isSet { sched_yield() }
            lock.unlock()
          }
          while !holding.isSet { sched_yield() }
          underSignals("PriorityInheritanceLock.lock()", release: { leave.set() }) {
            lock.lock()
            lock.unlock()
            return nil
          }
          joinThread(holder)
        }
        do {
          let region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
          let lock = try SharedMemoryLock.initialize(at: region.address)
          let condition = SharedMemoryCondition.initialize(at: region.address + SharedMemoryLock.byteCount)
          let flag = (region.address + 2 * SharedMemoryLock.byteCount).bindMemory(to: Int32.self, capacity: 1)
          flag.pointee = 0
          let holding = RawFlag()
          let leave = RawFlag()
          let holder = helper {
            _ = try? lock.lock()
            holding.set()
            while !leave.isSet { sched_yield() }
            lock.unlock()
          }
          while !holding.isSet { sched_yield() }
          underSignals("SharedMemoryLock.lock()", release: { leave.set() }) {
            do {
              let acquisition = try lock.lock()
              lock.unlock()
              return acquisition == .acquired ? nil : "acquired with \(acquisition)"
            } catch {
              return "threw \(error)"
            }
          }
          joinThread(holder)
          nonisolated(unsafe) let shared = flag
          underSignals(
            "SharedMemoryCondition.wait(_:) in a loop",
            release: {
              _ = try? lock.lock()
              shared.pointee = 1
              condition.signal()
              lock.unlock()
            }
          ) {
            do {
              _ = try lock.lock()
              defer { lock.unlock() }
              while shared.pointee == 0 { _ = try condition.wait(lock) }
              return nil
            } catch {
              return "threw \(error)"
            }
          }
          withExtendedLifetime(region) {}
        } catch {
          failChild("setup threw \(error)")
        }
      }
      exit(0)
    }
  }
}

/// One lock kind for the contended storm: take with a deadline (nil: untimed), release.
private struct StormLock: Sendable {
  let name: String
  let acquire: @Sendable (MonotonicInstant?) -> Bool
  let release: @Sendable () -> Void

  init(
    _ name: String, timed: @escaping @Sendable (MonotonicInstant) -> Bool, untimed: @escaping @Sendable () -> Void,
    release: @escaping @Sendable () -> Void
  ) {
    self.name = name
    self.acquire = { deadline in
      guard let deadline else {
        untimed()
        return true
      }
      return timed(deadline)
    }
    self.release = release
  }

  /// A `Locking` lock (a `ReadWriteLock` through it takes its write side).
  init(_ name: String, _ lock: some Locking) {
    self.init(name, timed: { lock.lock(before: $0) }, untimed: { lock.lock() }, release: { lock.unlock() })
  }
}

private func stormLocks() -> [StormLock] {
  let conditionLock = ConditionLock(condition: 0)
  let semaphore = Semaphore(value: 1)
  var kinds: [StormLock] = [
    StormLock("Lock", Lock()),
    StormLock("RecursiveLock", RecursiveLock()),
    StormLock("SpinLock", SpinLock()),
    StormLock("ReadWriteLock (write)", ReadWriteLock()),
    StormLock("Condition", Condition()),
    StormLock(
      "ConditionLock", timed: { conditionLock.lock(whenCondition: 0, before: $0) },
      untimed: { conditionLock.lock(whenCondition: 0) }, release: { conditionLock.unlock(withCondition: 0) }),
    StormLock(
      "Semaphore(value: 1)", timed: { semaphore.wait(before: $0) }, untimed: { semaphore.wait() },
      release: { semaphore.signal() }),
  ]
  if let pi = try? PriorityInheritanceLock() { kinds.append(StormLock("PriorityInheritanceLock", pi)) }
  return kinds
}

@Suite("Audit round 5: contended locks under a signal storm", .timeLimit(.minutes(3)))
struct AuditRound5SyncContendedSignalTests {
  @Test(
    "timed and untimed contenders bombarded with signals: exclusion holds, every untimed one gets in, none is stranded",
    .runsExitTests)
  func contendedStorm() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        let threads = 6
        // Fewer rounds under a sanitizer, which slows every lock operation several times: the
        // storm must end well inside the child's alarm on a loaded 2-core machine.
        let rounds = isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer ? 100 : 400
        for kind in stormLocks() {
          let inside = AtomicInteger<Int>(0)
          let overlaps = AtomicInteger<Int>(0)
          let untimedEntries = AtomicInteger<Int>(0)
          let finished = AtomicInteger<Int>(0)
          var handles: [pthread_t] = []
          for index in 0..<threads {
            handles.append(
              startThread {
                var set = sigset_t()
                sigemptyset(&set)
                sigaddset(&set, SIGUSR1)
                precondition(pthread_sigmask(SIG_UNBLOCK, &set, nil) == 0)
                for round in 0..<rounds {
                  // Even threads wait without a limit; odd ones give up after 0-300 µs.
                  let deadline: MonotonicInstant? =
                    index.isMultiple(of: 2) ? nil : .after(.microseconds(Int64((round * 37 + index * 11) % 300)))
                  guard kind.acquire(deadline) else { continue }
                  if inside.add(1, ordering: .full) != 1 { _ = overlaps.add(1, ordering: .relaxed) }
                  for _ in 0..<(round % 7) * 20 { sched_yield() }
                  _ = inside.subtract(1, ordering: .full)
                  if deadline == nil { _ = untimedEntries.add(1, ordering: .relaxed) }
                  kind.release()
                }
                _ = finished.add(1, ordering: .full)
              })
          }
          // Signal every contender in turn until all are done (a stranded one hangs: the
          // alarm then fails the test).
          var next = 0
          while finished.load(ordering: .acquiring) < threads {
            _ = pthread_kill(handles[next % threads], SIGUSR1)
            next += 1
            var pause = timespec(tv_sec: 0, tv_nsec: 100_000)
            _ = nanosleep(&pause, nil)
          }
          for handle in handles { joinThread(handle) }
          let expectedUntimed = (threads + 1) / 2 * rounds
          if overlaps.load(ordering: .relaxed) != 0 {
            failChild("\(kind.name): \(overlaps.load(ordering: .relaxed)) overlapping holders under signals")
          }
          if untimedEntries.load(ordering: .relaxed) != expectedUntimed {
            failChild(
              "\(kind.name): \(untimedEntries.load(ordering: .relaxed)) untimed entries, not \(expectedUntimed)")
          }
          // The lock ends free.
          guard kind.acquire(.distantPast) else { failChild("\(kind.name): not free after the storm") }
          kind.release()
        }
      }
      exit(0)
    }
  }
}

/// Runs `body(index)` on `count` new threads (SIGUSR1 unblocked in each) while this thread
/// sends SIGUSR1 to each of them in turn until all have returned; joins them.
private func runUnderStorm(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
  let finished = AtomicInteger<Int>(0)
  let handles = (0..<count).map { index in
    startThread {
      var set = sigset_t()
      sigemptyset(&set)
      sigaddset(&set, SIGUSR1)
      precondition(pthread_sigmask(SIG_UNBLOCK, &set, nil) == 0)
      body(index)
      _ = finished.add(1, ordering: .full)
    }
  }
  var next = 0
  while finished.load(ordering: .acquiring) < count {
    _ = pthread_kill(handles[next % count], SIGUSR1)
    next += 1
    var pause = timespec(tv_sec: 0, tv_nsec: 100_000)
    _ = nanosleep(&pause, nil)
  }
  for handle in handles { joinThread(handle) }
}

@Suite("Audit round 5: hand-offs under a signal storm", .timeLimit(.minutes(3)))
struct AuditRound5SyncHandOffSignalTests {
  @Test(
    "ping-pong through every waiting primitive loses no turn while both sides are bombarded with signals",
    .runsExitTests)
  func pingPong() async {
    await #expect(processExitsWith: .success) {
      installInterruptingHandler()
      blocking {
        let turns = isRunningUnderThreadSanitizer ? 200 : 2_000

        // Condition, predicate form.
        let condition = Condition()
        let turn = GuardedValue(0)  // protected by condition
        runUnderStorm(2) { side in
          for step in 0..<turns {
            condition.withLock {
              condition.wait(until: { turn.value % 2 == side })
              if turn.value != step * 2 + side { failChild("Condition: turn \(turn.value) at step \(step)") }
              turn.value += 1
              condition.signal()
            }
          }
        }

        // Lock and ConditionVariable, plain waits in a loop.
        let mutex = Lock()
        let variable = ConditionVariable()
        let count = GuardedValue(0)  // protected by mutex
        runUnderStorm(2) { side in
          for _ in 0..<turns {
            mutex.withLock {
              while count.value % 2 != side { variable.wait(mutex) }
              count.value += 1
              variable.signal()
            }
          }
        }
        if count.value != 2 * turns { failChild("ConditionVariable: \(count.value) turns") }

        // Two semaphores.
        let ping = Semaphore(value: 1)
        let pong = Semaphore(value: 0)
        let exchanges = AtomicInteger<Int>(0)
        runUnderStorm(2) { side in
          for _ in 0..<turns {
            (side == 0 ? ping : pong).wait()
            _ = exchanges.add(1, ordering: .relaxed)
            (side == 0 ? pong : ping).signal()
          }
        }
        if exchanges.load(ordering: .relaxed) != 2 * turns {
          failChild("Semaphore: \(exchanges.load(ordering: .relaxed))")
        }

        // A condition lock handing its value back and forth.
        let conditionLock = ConditionLock(condition: 0)
        runUnderStorm(2) { side in
          for _ in 0..<turns {
            conditionLock.lock(whenCondition: side)
            conditionLock.unlock(withCondition: 1 - side)
          }
        }
        if conditionLock.condition != 0 { failChild("ConditionLock ends at \(conditionLock.condition)") }

        // LockedValue predicate waits.
        let value = LockedValue(0)
        runUnderStorm(2) { side in
          for _ in 0..<turns {
            value.withLock(when: { $0 % 2 == side }) { $0 += 1 }
          }
        }
        if value.withLock({ $0 }) != 2 * turns { failChild("LockedValue: \(value.withLock { $0 })") }

        // A barrier of three for many rounds, one serial thread per round.
        let barrier = ThreadBarrier(parties: 3)
        let serials = AtomicInteger<Int>(0)
        runUnderStorm(3) { _ in
          for _ in 0..<turns where barrier.arriveAndWait() { _ = serials.add(1, ordering: .relaxed) }
        }
        if serials.load(ordering: .relaxed) != turns {
          failChild("ThreadBarrier: \(serials.load(ordering: .relaxed)) serial threads")
        }

        // Futex words: the atomic wait in a loop.
        let word = AtomicInteger<UInt32>(0)
        runUnderStorm(2) { side in
          for step in 0..<turns {
            let mine = UInt32(step * 2 + side)
            while true {
              let seen = word.load(ordering: .acquiring)
              if seen == mine { break }
              word.wait(whileEqualTo: seen)
            }
            word.store(mine + 1, ordering: .releasing)
            word.wakeAll()
          }
        }
        if word.load(ordering: .relaxed) != UInt32(2 * turns) {
          failChild("AtomicInteger: \(word.load(ordering: .relaxed))")
        }
      }
      exit(0)
    }
  }
}
