import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

/// A deadline just short of `distantFuture`: a real timed wait (not the untimed sentinel)
/// whose timespec holds the largest seconds count the clock has.
private let almostNever = MonotonicInstant.distantFuture - .nanoseconds(1)

@Suite("Audit round 3: MonotonicInstant extremes", .timeLimit(.minutes(3)))
struct AuditRound3MonotonicInstantTests {
  @Test("the duration between the extreme instants is exact (it fits in a Duration)")
  func durationBetweenExtremes() {
    let span = Duration.nanoseconds(UInt64.max)
    #expect(MonotonicInstant.distantPast.duration(to: .distantFuture) == span)
    #expect(MonotonicInstant.distantFuture - MonotonicInstant.distantPast == span)
    #expect(MonotonicInstant.distantFuture.duration(to: .distantPast) == .zero - span)
    let now = MonotonicInstant.now
    #expect(now - MonotonicInstant.distantPast == .nanoseconds(Int128(now.nanoseconds) - Int128(Int64.min)))
  }

  @Test("advancing an instant by its duration to another lands on the other (InstantProtocol)")
  func roundTrip() {
    let now = MonotonicInstant.now
    let instants: [MonotonicInstant] = [
      .distantPast, .distantFuture, now, MonotonicInstant(nanoseconds: -1), MonotonicInstant(nanoseconds: 0),
      almostNever,
    ]
    for from in instants {
      for to in instants {
        #expect(from.advanced(by: from.duration(to: to)) == to, "\(from) -> \(to)")
        #expect(from + (to - from) == to, "\(from) -> \(to)")
      }
    }
  }

  @Test("subtracting the most negative Duration saturates instead of trapping", .runsExitTests)
  func subtractingMostNegativeDuration() async {
    // Run in a child: a trap would end the test process.
    await #expect(processExitsWith: .success) {
      let lowest = Duration(attoseconds: .min)
      let now = MonotonicInstant.now
      precondition(now - lowest == .distantFuture)
      precondition(MonotonicInstant.distantPast - lowest == .distantFuture)
      precondition(now + lowest == .distantPast)
    }
  }
}

@Suite("Audit round 3: deadlines just short of distantFuture", .timeLimit(.minutes(3)))
struct AuditRound3HugeDeadlineTests {
  @Test("a semaphore waits with the largest real deadline and is woken")
  func semaphore() {
    let semaphore = Semaphore()
    let got = GuardedValue(false)
    runConcurrently(2) { index in
      if index == 0 {
        got.value = semaphore.wait(before: almostNever)
      } else {
        semaphore.signal()
      }
    }
    #expect(got.value)
  }

  @Test("condition, condition variable and latch wait with the largest real deadline")
  func conditions() {
    let condition = Condition()
    let flag = GuardedValue(false)
    let woke = GuardedValue(false)
    let mutex = Lock()
    let variable = ConditionVariable()
    let flag2 = GuardedValue(false)
    let woke2 = GuardedValue(false)
    let latch = Latch(count: 1)
    let opened = GuardedValue(false)
    runConcurrently(4) { index in
      switch index {
      case 0:
        condition.withLock { woke.value = condition.wait(until: { flag.value }, before: almostNever) }
      case 1:
        mutex.withLock { woke2.value = variable.wait(mutex, until: { flag2.value }, before: almostNever) }
      case 2:
        opened.value = latch.wait(before: almostNever)
      default:
        condition.withLock {
          flag.value = true
          condition.broadcast()
        }
        mutex.withLock {
          flag2.value = true
          variable.broadcast()
        }
        latch.countDown()
      }
    }
    #expect(woke.value)
    #expect(woke2.value)
    #expect(opened.value)
  }

  @Test("the locks wait for a holder with the largest real deadline")
  func locks() throws {
    let lock = Lock()
    let rw = ReadWriteLock()
    let pi = try PriorityInheritanceLock()
    let spin = SpinLock()
    let conditionLock = ConditionLock(condition: 0)
    let results = GuardedValue([Bool](repeating: false, count: 6))
    let held = Gate()
    let release = Gate()
    let outcome = Lock()
    runConcurrently(2) { index in
      if index == 0 {
        lock.lock()
        rw.writeLock()
        pi.lock()
        spin.lock()
        conditionLock.lock()
        held.open()
        release.wait()
        var pause = timespec(tv_sec: 0, tv_nsec: 20_000_000)
        _ = nanosleep(&pause, nil)
        lock.unlock()
        rw.unlock()
        pi.unlock()
        spin.unlock()
        conditionLock.unlock(withCondition: 1)
      } else {
        held.wait()
        release.open()
        let a = lock.lock(before: almostNever)
        let b = rw.writeLock(before: almostNever)
        if b { rw.unlock() }
        let c = rw.readLock(before: almostNever)
        if c { rw.unlock() }
        let d = pi.lock(before: almostNever)
        if d { pi.unlock() }
        let e = spin.lock(before: almostNever)
        if e { spin.unlock() }
        let f = conditionLock.lock(whenCondition: 1, before: almostNever)
        if f { conditionLock.unlock() }
        if a { lock.unlock() }
        outcome.withLock { results.value = [a, b, c, d, e, f] }
      }
    }
    outcome.withLock { #expect(results.value == [true, true, true, true, true, true]) }
  }

  @Test("the wall-clock fallback of PriorityInheritanceLock takes a far deadline too")
  func priorityInheritanceFallback() {
    let pi = PriorityInheritanceLock(timedWait: .realtimeSlices)
    let got = GuardedValue(false)
    let held = Gate()
    runConcurrently(2) { index in
      if index == 0 {
        pi.lock()
        held.open()
        var pause = timespec(tv_sec: 0, tv_nsec: 50_000_000)
        _ = nanosleep(&pause, nil)
        pi.unlock()
      } else {
        held.wait()
        got.value = pi.lock(before: almostNever)
        if got.value { pi.unlock() }
      }
    }
    #expect(got.value)
  }

  @Test("a shared-memory lock and condition take the largest real deadline")
  func sharedMemory() throws {
    let region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
    let lock = try SharedMemoryLock.initialize(at: region.address)
    let condition = SharedMemoryCondition.initialize(at: region.address + 64)
    let flag = GuardedValue(false)
    let results = GuardedValue<[Bool]>([])
    let record = Lock()
    runConcurrently(2) { index in
      if index == 0 {
        do {
          guard let first = try lock.lock(before: almostNever) else {
            record.withLock { results.value.append(false) }
            return
          }
          _ = first
          var timedOut = false
          while !flag.value && !timedOut {
            timedOut = try condition.wait(lock, before: almostNever).timedOut
          }
          lock.unlock()
          record.withLock { results.value.append(!timedOut) }
        } catch {
          record.withLock { results.value.append(false) }
        }
      } else {
        do {
          var done = false
          while !done {
            guard try lock.lock(before: almostNever) != nil else { break }
            flag.value = true
            condition.broadcast()
            lock.unlock()
            done = true
          }
          record.withLock { results.value.append(done) }
        } catch {
          record.withLock { results.value.append(false) }
        }
      }
    }
    record.withLock { #expect(results.value == [true, true]) }
  }
}

@Suite("Audit round 3: self-deadlock with a passed deadline", .timeLimit(.minutes(3)))
struct AuditRound3PassedDeadlineMisuseTests {
  @Test("Lock.lock(before: distantPast) by the holder stops the process", .runsExitTests)
  func lock() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = Lock()
        lock.lock()
        _ = lock.lock(before: .distantPast)
      }
    }
  }

  @Test("ConditionLock.lock(whenCondition:before: distantPast) by the holder stops the process", .runsExitTests)
  func conditionLock() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = ConditionLock(condition: 0)
        lock.lock()
        _ = lock.lock(whenCondition: 0, before: .distantPast)
      }
    }
  }

  @Test("PriorityInheritanceLock.lock(before: distantPast) by the holder stops the process", .runsExitTests)
  func priorityInheritance() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = try! PriorityInheritanceLock()
        lock.lock()
        _ = lock.lock(before: .distantPast)
      }
    }
  }

  @Test("SharedMemoryLock.lock(before: distantPast) by the holder stops the process", .runsExitTests)
  func sharedMemory() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let region = try! SharedMemoryRegion(sharedAnonymousByteCount: 4096)
        let lock = try! SharedMemoryLock.initialize(at: region.address)
        _ = try! lock.lock()
        _ = try! lock.lock(before: .distantPast)
      }
    }
  }

  @Test("ReadWriteLock timed write and read locks by the write holder stop the process", .runsExitTests)
  func readWriteLock() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = ReadWriteLock()
        lock.writeLock()
        _ = lock.writeLock(before: .distantPast)
      }
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = ReadWriteLock()
        lock.writeLock()
        _ = lock.readLock(before: .distantPast)
      }
    }
  }

  @Test("SpinLock and Condition timed locks by the holder stop the process", .runsExitTests)
  func spinAndCondition() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = SpinLock()
        lock.lock()
        _ = lock.lock(before: .distantPast)
      }
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let condition = Condition()
        condition.lock()
        _ = condition.lock(before: .distantPast)
      }
    }
  }

  @Test("a timed LockedValue.withLock inside withLock stops the process; withLockIfAvailable is nil", .runsExitTests)
  func lockedValue() async {
    let value = LockedValue(0)
    #expect(value.withLock { _ in value.withLockIfAvailable { $0 } } == nil)
    await #expect(processExitsWith: .failure) {
      blocking {
        let value = LockedValue(0)
        value.withLock { _ in _ = value.withLock(before: .distantPast) { $0 } }
      }
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let value = LockedValue(0)
        value.withLock { _ in _ = value.withLock(when: { $0 == 0 }, before: .distantPast) { $0 } }
      }
    }
  }

  @Test("a timed read or write lock by a thread that holds a read lock, with no writer, succeeds")
  func readWhileReading() {
    let lock = ReadWriteLock()
    lock.readLock()
    #expect(lock.readLock(before: .distantPast), "read locks share while no writer waits")
    lock.unlock()
    #expect(!lock.writeLock(before: .distantPast), "the upgrade gives up at its deadline")
    #expect(lock.readLock(timeout: .zero), "a writer that gave up holds no reader back")
    lock.unlock()
    lock.unlock()
    #expect(lock.writeLock(timeout: .zero))
    lock.unlock()
  }

  @Test("a passed-deadline shared-memory wait returns at once holding the lock, timed out")
  func sharedMemoryPassedWait() throws {
    let region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
    let lock = try SharedMemoryLock.initialize(at: region.address)
    let condition = SharedMemoryCondition.initialize(at: region.address + 64)
    #expect(try lock.lock() == .acquired)
    let result = try condition.wait(lock, timeout: .seconds(-1))
    #expect(result.timedOut)
    #expect(result.acquisition == .acquired)
    #expect(try lock.tryLock() == nil, "still held by this thread")
    lock.unlock()
  }
}

/// A small xorshift generator per thread (no shared state between threads).
private struct Shuffle {
  var state: UInt64
  init(_ seed: Int) { state = UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 | 1 }
  mutating func next(_ bound: Int) -> Int {
    state ^= state << 13
    state ^= state >> 7
    state ^= state << 17
    return Int(state % UInt64(bound))
  }
}

@Suite("Audit round 3: timeouts racing wake-ups", .timeLimit(.minutes(3)))
struct AuditRound3TimeoutRaceTests {
  @Test("semaphore: timed waiters giving up never swallow a permit or a wake-up")
  func semaphorePermitsConserved() {
    let semaphore = Semaphore()
    let taken = AtomicInteger<Int>(0)
    let signalled = AtomicInteger<Int>(0)
    let stranded = AtomicInteger<Int>(0)
    let untimedDone = AtomicInteger<Int>(0)
    let untimedThreads = 2
    runConcurrently(6) { index in
      var random = Shuffle(index + 1)
      switch index {
      case 0..<untimedThreads:
        // Each needs 300 permits; a lost wake-up leaves it asleep while permits pile up
        // (signals keep coming until it is done), so the long limit passes.
        for _ in 0..<300 {
          if semaphore.wait(timeout: .seconds(20)) {
            taken.increment(ordering: .relaxed)
          } else {
            stranded.increment(ordering: .relaxed)
          }
        }
        untimedDone.increment(ordering: .relaxed)
      case untimedThreads..<(untimedThreads + 2):
        while untimedDone.load(ordering: .relaxed) < untimedThreads {
          if semaphore.wait(timeout: .microseconds(random.next(200))) { taken.increment(ordering: .relaxed) }
        }
      default:
        var count = 0
        while untimedDone.load(ordering: .relaxed) < untimedThreads {
          semaphore.signal()
          signalled.increment(ordering: .relaxed)
          count += 1
          if count % 8 == 0 { sched_yield() }
          // Pace the signals so that permits stay scarce and waiters do sleep.
          if semaphore.value > 4 { sched_yield() }
        }
      }
    }
    #expect(stranded.load(ordering: .relaxed) == 0)
    #expect(taken.load(ordering: .relaxed) + semaphore.value == signalled.load(ordering: .relaxed))
  }

  @Test("read-write lock: writers timing out while readers queue never strand anyone")
  func readWriteTimeouts() {
    let lock = ReadWriteLock()
    let done = AtomicInteger<Int>(0)
    let counter = GuardedValue(0)
    let iterations = 400
    runConcurrently(6) { index in
      var random = Shuffle(index + 7)
      for _ in 0..<iterations {
        switch index {
        case 0, 1:
          // Readers: untimed, but bounded by a long limit so a stranding fails, not hangs.
          if lock.readLock(timeout: .seconds(20)) {
            _ = counter.value
            lock.unlock()
          } else {
            done.add(1_000_000, ordering: .relaxed)
          }
        case 2, 3:
          if lock.writeLock(timeout: .microseconds(random.next(300))) {
            counter.value += 1
            lock.unlock()
          }
        case 4:
          if lock.writeLock(timeout: .seconds(20)) {
            counter.value += 1
            lock.unlock()
          } else {
            done.add(1_000_000, ordering: .relaxed)
          }
        default:
          // A long reader, so writers time out behind it while readers queue behind them.
          if lock.readLock(timeout: .seconds(20)) {
            for _ in 0..<random.next(2_000) { relaxForTests() }
            lock.unlock()
          } else {
            done.add(1_000_000, ordering: .relaxed)
          }
        }
      }
      done.increment(ordering: .relaxed)
    }
    #expect(done.load(ordering: .relaxed) == 6, "a thread waited 20 s for a lock that was free")
  }

  @Test("lock: timed waiters giving up while others sleep never strand a sleeper")
  func lockTimeouts() {
    let lock = Lock()
    let failures = AtomicInteger<Int>(0)
    let counter = GuardedValue(0)
    runConcurrently(6) { index in
      var random = Shuffle(index + 11)
      for _ in 0..<500 {
        if index < 3 {
          if lock.lock(timeout: .microseconds(random.next(100))) {
            counter.value += 1
            lock.unlock()
          }
        } else if lock.lock(timeout: .seconds(20)) {
          counter.value += 1
          for _ in 0..<random.next(500) { relaxForTests() }
          lock.unlock()
        } else {
          failures.increment(ordering: .relaxed)
        }
      }
    }
    #expect(failures.load(ordering: .relaxed) == 0)
  }

  @Test("condition lock: waiters timing out never stop a matching waiter from getting in")
  func conditionLockTimeouts() {
    let lock = ConditionLock(condition: 0)
    let failures = AtomicInteger<Int>(0)
    runConcurrently(4) { index in
      var random = Shuffle(index + 3)
      for round in 0..<300 {
        switch index {
        case 0:
          // Waits for 1, sets 2.
          if lock.lock(whenCondition: 1, timeout: .seconds(20)) {
            lock.unlock(withCondition: 2)
          } else {
            failures.increment(ordering: .relaxed)
          }
        case 1:
          // Waits for 2, sets 0.
          if lock.lock(whenCondition: 2, timeout: .seconds(20)) {
            lock.unlock(withCondition: 0)
          } else {
            failures.increment(ordering: .relaxed)
          }
        case 2:
          // Waits for 0, sets 1.
          if lock.lock(whenCondition: 0, timeout: .seconds(20)) {
            lock.unlock(withCondition: 1)
          } else {
            failures.increment(ordering: .relaxed)
          }
        default:
          // Noise: short timed waits for a value nobody sets, and plain locks.
          if round % 2 == 0 {
            if lock.lock(whenCondition: 7, timeout: .microseconds(random.next(200))) { lock.unlock() }
          } else if lock.lock(timeout: .microseconds(random.next(200))) {
            lock.unlock()
          }
        }
      }
    }
    #expect(failures.load(ordering: .relaxed) == 0)
  }
}

/// A pause instruction's worth of busy work, for test pacing only.
@inline(never)
private func relaxForTests() {
  var x = 0
  withUnsafeMutablePointer(to: &x) {
    _ = UInt64.atomicLoad(at: UnsafeMutableRawPointer($0).assumingMemoryBound(to: UInt64.self), ordering: .relaxed)
  }
}

@Suite("Audit round 3: Once error path", .timeLimit(.minutes(3)))
struct AuditRound3OnceTests {
  @Test("a thread blocked while the body throws runs the body itself afterwards")
  func waiterRunsAfterThrow() {
    struct Failure: Error {}
    let once = Once()
    let started = Gate()
    let outcomes = GuardedValue<[String]>([])
    let record = Lock()
    runConcurrently(2) { index in
      if index == 0 {
        do {
          try once.run { () throws(Failure) in
            started.open()
            // Until the other thread sleeps on the word (state 2: someone may be sleeping).
            while UInt32.atomicLoad(at: once.state, ordering: .relaxed) != 2 { sched_yield() }
            var pause = timespec(tv_sec: 0, tv_nsec: 10_000_000)
            _ = nanosleep(&pause, nil)
            throw Failure()
          }
          record.withLock { outcomes.value.append("first: no throw") }
        } catch {
          record.withLock { outcomes.value.append("first: threw") }
        }
      } else {
        started.wait()
        once.run { record.withLock { outcomes.value.append("second: ran") } }
      }
    }
    record.withLock { #expect(outcomes.value.sorted() == ["first: threw", "second: ran"]) }
    #expect(once.isCompleted)
  }
}

@Suite("Audit round 3: SharedMemoryRegion errors", .timeLimit(.minutes(3)))
struct AuditRound3SharedMemoryRegionTests {
  @Test("mapping an invalid descriptor throws badFileDescriptor")
  func badDescriptor() {
    #expect(throws: SystemCallError.self) { _ = try SharedMemoryRegion(mapping: -1, byteCount: 4096) }
    do {
      _ = try SharedMemoryRegion(mapping: -1, byteCount: 4096)
    } catch {
      #expect(error.code == .badFileDescriptor)
      #expect(error.call == "mmap")
    }
  }

  @Test("mapping a descriptor open read-only throws permissionDenied")
  func readOnlyDescriptor() throws {
    let name = "/tmp/audit-round3-region-\(getpid())"
    let writer = open(name, O_CREAT | O_RDWR | O_TRUNC, 0o600)
    try #require(writer >= 0)
    defer {
      close(writer)
      unlink(name)
    }
    try #require(ftruncate(writer, 4096) == 0)
    let reader = open(name, O_RDONLY)
    try #require(reader >= 0)
    defer { close(reader) }
    do {
      _ = try SharedMemoryRegion(mapping: reader, byteCount: 4096)
      Issue.record("a read-only descriptor was mapped read-write")
    } catch {
      #expect(error.code == .permissionDenied)
    }
  }

  @Test("a non-positive byte count stops the process", .runsExitTests)
  func nonPositive() async {
    await #expect(processExitsWith: .failure) {
      _ = try? SharedMemoryRegion(sharedAnonymousByteCount: 0)
    }
  }
}

@Suite("Audit round 3: SharedMemoryCondition misuse with a passed deadline", .timeLimit(.minutes(3)))
struct AuditRound3SharedMemoryConditionMisuseTests {
  @Test(
    "a passed-deadline wait on a lock acquired with previousOwnerDied before markConsistent() is misuse too",
    .runsExitTests)
  func passedDeadlineBeforeMarkConsistent() async {
    // The misuse must not depend on the deadline: a program tested with a passed or zero
    // timeout would otherwise only break (the lock unrecoverable for good) once the timeout
    // is long enough to release it.
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let region = try! SharedMemoryRegion(sharedAnonymousByteCount: 4096)
        let lock = try! SharedMemoryLock.initialize(at: region.address)
        let condition = SharedMemoryCondition.initialize(at: region.address + 64)
        // A holder thread ends holding the lock.
        runConcurrently(1) { _ in _ = try? lock.lock() }
        guard (try? lock.lock()) == .previousOwnerDied else { exit(0) }
        _ = try? condition.wait(lock, before: .distantPast)
        _ = try? condition.wait(lock, timeout: .zero)
        exit(0)
      }
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("before markConsistent()"))
    }
  }
}
