import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("RecursiveLock", .timeLimit(.minutes(3)))
struct RecursiveMutexTests {
  @Test("the holder re-acquires and must release as often")
  func levels() {
    let lock = RecursiveLock()
    lock.lock()
    #expect(lock.tryLock())
    #expect(lock.lock(timeout: .zero))
    #expect(lock.levelsHeldByCurrentThread == 3)
    lock.unlock()
    lock.unlock()
    #expect(lock.isHeldByCurrentThread)
    let busyElsewhere = AtomicInteger<Int>(0)
    runConcurrently(1) { _ in
      if !lock.tryLock() { busyElsewhere.store(1, ordering: .relaxed) }
    }
    #expect(busyElsewhere.load(ordering: .relaxed) == 1)
    lock.unlock()
    #expect(lock.levelsHeldByCurrentThread == 0)
    runConcurrently(1) { _ in
      if lock.tryLock() {
        busyElsewhere.store(2, ordering: .relaxed)
        lock.unlock()
      }
    }
    #expect(busyElsewhere.load(ordering: .relaxed) == 2)
  }

  @Test("no increment is lost under contention, with nested acquisition")
  func stress() {
    let lock = RecursiveLock()
    let counter = UnprotectedCounter()
    runConcurrently(4) { _ in
      for _ in 0..<10_000 {
        lock.withLock { lock.withLock { counter.value += 1 } }
      }
    }
    #expect(counter.value == 40_000)
  }

  @Test("more unlocks than locks are reported", .runsExitTests)
  func overUnlock() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = RecursiveLock()
        lock.lock()
        lock.unlock()
        lock.unlock()
      }
    }
  }

  @Test("unlocking from a thread that does not hold it is reported", .runsExitTests)
  func foreignUnlock() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = RecursiveLock()
        lock.lock()
        runConcurrently(1) { _ in lock.unlock() }
      }
    }
  }
}

@Suite("ReadWriteLock", .timeLimit(.minutes(3)))
struct ReadWriteLockTests {
  @Test("readers share, writers exclude")
  func sharing() {
    let lock = ReadWriteLock()
    lock.readLock()
    #expect(lock.tryReadLock(), "a second reader gets in")
    #expect(!lock.tryWriteLock(), "a writer does not while readers hold it")
    lock.unlock()
    lock.unlock()
    lock.writeLock()
    #expect(lock.isWriteLockedByCurrentThread)
    let outcomes = AtomicInteger<Int>(0)
    runConcurrently(1) { _ in
      if !lock.tryReadLock() { outcomes.add(1, ordering: .relaxed) }
      if !lock.readLock(before: .after(.milliseconds(10))) { outcomes.add(10, ordering: .relaxed) }
      if !lock.writeLock(before: .after(.milliseconds(10))) { outcomes.add(100, ordering: .relaxed) }
    }
    lock.unlock()
    #expect(outcomes.load(ordering: .relaxed) == 111)
  }

  @Test("many readers are inside at the same time")
  func readersOverlap() {
    let lock = ReadWriteLock()
    let inside = AtomicInteger<Int>(0)
    let peak = AtomicInteger<Int>(0)
    runConcurrently(4) { _ in
      lock.withReadLock {
        let now = inside.increment(ordering: .full)
        var best = peak.load(ordering: .relaxed)
        while now > best, !peak.compareAndSwap(expected: best, desired: now, ordering: .relaxed) {
          best = peak.load(ordering: .relaxed)
        }
        // Stay inside until every reader has arrived: only possible if readers overlap.
        while inside.load(ordering: .acquiring) < 4 { sched_yield() }
      }
    }
    #expect(peak.load(ordering: .relaxed) == 4)
  }

  @Test("writers exclude everyone: exact counts under mixed load")
  func writersExclude() {
    let lock = ReadWriteLock()
    let counter = UnprotectedCounter()
    let insideWriters = AtomicInteger<Int>(0)
    let violations = AtomicInteger<Int>(0)
    runConcurrently(4) { index in
      for _ in 0..<5_000 {
        if index % 2 == 0 {
          lock.withWriteLock {
            if insideWriters.increment(ordering: .relaxed) != 1 { violations.increment(ordering: .relaxed) }
            counter.value += 1
            insideWriters.decrement(ordering: .relaxed)
          }
        } else {
          lock.withReadLock {
            if insideWriters.load(ordering: .relaxed) != 0 { violations.increment(ordering: .relaxed) }
            _ = counter.value
          }
        }
      }
    }
    #expect(counter.value == 10_000)
    #expect(violations.load(ordering: .relaxed) == 0)
  }

  @Test("while a writer waits, new readers wait (writers are not starved)")
  func writerPreference() {
    let lock = ReadWriteLock()
    lock.readLock()  // the first reader holds on
    let writerWaiting = Gate()
    let lateReaderGotIn = AtomicInteger<Int>(-1)
    runConcurrently(2) { index in
      if index == 0 {
        writerWaiting.open()
        lock.writeLock()  // blocks until the first reader leaves
        lock.unlock()
      } else {
        writerWaiting.wait()
        // No sleeping as synchronization: poll with short timed read attempts. Before the
        // writer queues they succeed; once it waits behind the first reader, a new reader
        // must be refused.
        // Bounded by a generous deadline, not by an attempt count: until the writer thread
        // has been scheduled and queued, every attempt succeeds at once.
        let giveUp = MonotonicInstant.after(.seconds(60))
        var refused = false
        while !refused && !giveUp.hasPassed {
          if lock.readLock(before: .after(.milliseconds(1))) {
            lock.unlock()
            sched_yield()
          } else {
            refused = true
          }
        }
        lateReaderGotIn.store(refused ? 0 : 1, ordering: .relaxed)
        // Release the first reader's lock on its behalf (read locks are not thread-tagged),
        // which lets the writer finish.
        lock.unlock()
      }
    }
    #expect(lateReaderGotIn.load(ordering: .relaxed) == 0)
  }

  @Test("a writer that gives up does not strand readers queued behind it")
  func timedOutWriterReleasesQueue() {
    let lock = ReadWriteLock()
    lock.readLock()
    let writerGaveUp = AtomicInteger<Int>(0)
    runConcurrently(1) { _ in
      if !lock.writeLock(timeout: .milliseconds(20)) { writerGaveUp.store(1, ordering: .relaxed) }
    }
    let readerGotIn = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      if index == 0 {
        lock.readLock()  // may queue behind the departed writer's mark; must not hang
        readerGotIn.store(1, ordering: .relaxed)
        lock.unlock()
      } else {
        lock.unlock()  // the first read lock, released on the main thread's behalf
      }
    }
    #expect(writerGaveUp.load(ordering: .relaxed) == 1)
    #expect(readerGotIn.load(ordering: .relaxed) == 1)
    #expect(lock.tryWriteLock())
    lock.unlock()
  }

  @Test("mixed blocking, timed and try acquisitions keep writers exclusive", arguments: [2, 4, 8])
  func mixedStress(threads: Int) {
    let lock = ReadWriteLock()
    let counter = UnprotectedCounter()
    let writes = AtomicInteger<Int>(0)
    let insideWriters = AtomicInteger<Int>(0)
    let insideReaders = AtomicInteger<Int>(0)
    let violations = AtomicInteger<Int>(0)
    runConcurrently(threads) { index in
      var random = UInt64(index + 1) &* 0x9E37_79B9_7F4A_7C15
      for _ in 0..<3_000 {
        random ^= random << 13
        random ^= random >> 7
        random ^= random << 17
        let choice = random % 6
        if choice < 3 {
          let acquired: Bool
          switch choice {
          case 0:
            lock.writeLock()
            acquired = true
          case 1: acquired = lock.writeLock(timeout: .microseconds(200))
          default: acquired = lock.tryWriteLock()
          }
          guard acquired else { continue }
          if insideWriters.increment(ordering: .relaxed) != 1 || insideReaders.load(ordering: .relaxed) != 0 {
            violations.increment(ordering: .relaxed)
          }
          counter.value += 1
          writes.increment(ordering: .relaxed)
          insideWriters.decrement(ordering: .relaxed)
          lock.unlock()
        } else {
          let acquired: Bool
          switch choice {
          case 3:
            lock.readLock()
            acquired = true
          case 4: acquired = lock.readLock(timeout: .microseconds(200))
          default: acquired = lock.tryReadLock()
          }
          guard acquired else { continue }
          insideReaders.increment(ordering: .relaxed)
          if insideWriters.load(ordering: .relaxed) != 0 { violations.increment(ordering: .relaxed) }
          _ = counter.value
          insideReaders.decrement(ordering: .relaxed)
          lock.unlock()
        }
      }
    }
    #expect(violations.load(ordering: .relaxed) == 0)
    #expect(counter.value == writes.load(ordering: .relaxed))
    #expect(lock.tryWriteLock(), "free at the end: no state left behind")
    lock.unlock()
  }

  @Test("misuse is reported: unlock when free, write-lock while writing", .runsExitTests)
  func misuse() async {
    await #expect(processExitsWith: .failure) {
      ReadWriteLock().unlock()
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = ReadWriteLock()
        lock.writeLock()
        lock.readLock()
      }
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = ReadWriteLock()
        lock.writeLock()
        runConcurrently(1) { _ in lock.unlock() }
      }
    }
  }
}

@Suite("SpinLock", .timeLimit(.minutes(3)))
struct SpinLockTests {
  @Test("basics and exact counts under contention")
  func basics() {
    let lock = SpinLock(checked: true)
    #expect(lock.tryLock())
    #expect(!lock.tryLock())
    lock.unlock()
    #expect(lock.lock(timeout: .milliseconds(1)))
    lock.unlock()
    expectExactCount(SpinLock(checked: false), threads: 4)
    expectExactCount(SpinLock(checked: false), threads: 8, increments: 5_000)
  }

  @Test("a timed lock gives up at its deadline")
  func timedOut() {
    let lock = SpinLock()
    lock.lock()
    let timedOut = AtomicInteger<Int>(0)
    runConcurrently(1) { _ in
      let start = MonotonicInstant.now
      if !lock.lock(timeout: .milliseconds(15)), start.duration(to: .now) >= .milliseconds(15) {
        timedOut.store(1, ordering: .relaxed)
      }
    }
    lock.unlock()
    #expect(timedOut.load(ordering: .relaxed) == 1)
  }

  @Test("misuse is reported", .runsExitTests)
  func misuse() async {
    await #expect(processExitsWith: .failure) {
      SpinLock(checked: false).unlock()
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = SpinLock()
        lock.lock()
        lock.lock()
      }
    }
  }
}

@Suite("Locking protocol", .timeLimit(.minutes(3)))
struct LockingProtocolTests {
  static let locks: [@Sendable () -> any Locking] = [
    { Lock() }, { RecursiveLock() }, { ReadWriteLock() }, { SpinLock() },
  ]

  @Test("generic code works the same with every lock", arguments: 0..<4)
  func generic(index: Int) throws {
    let lock = Self.locks[index]()
    struct Oops: Error {}
    #expect(lock.withLock { 5 } == 5)
    #expect(throws: Oops.self) { try lock.withLock { () throws(Oops) in throw Oops() } }
    #expect(lock.withLockIfAvailable { 6 } == 6)
    #expect(lock.withLock(before: .after(.seconds(1))) { 7 } == 7)
    expectExactCount(lock, threads: 3, increments: 3_000)
  }
}

@Suite("MonotonicInstant", .timeLimit(.minutes(3)))
struct MonotonicInstantTests {
  @Test("arithmetic saturates and orders")
  func arithmetic() {
    let now = MonotonicInstant.now
    #expect(now + .seconds(1) > now)
    #expect((now + .seconds(1)).duration(to: now) == .seconds(-1))
    #expect(MonotonicInstant.distantFuture.advanced(by: .seconds(1)) == .distantFuture)
    #expect(MonotonicInstant.distantPast.advanced(by: .seconds(-1)) == .distantPast)
    #expect(now.advanced(by: .seconds(Int64.max)) == .distantFuture)
    #expect(MonotonicInstant.distantPast.hasPassed)
    #expect(!MonotonicInstant.distantFuture.hasPassed)
    #expect(MonotonicInstant.distantPast.remaining == .zero)
    #expect(MonotonicInstant(nanoseconds: -5).timespec.tv_sec == 0)
    #expect(MonotonicInstant(nanoseconds: 1_500_000_000).timespec.tv_nsec == 500_000_000)
    #expect(MonotonicInstant(nanoseconds: 1_000_000_001).description == "monotonic +1.000000001s")
  }

  @Test("an instant before the clock's start is described with a minus sign")
  func negativeDescription() {
    #expect(MonotonicInstant(nanoseconds: -500_000_000).description == "monotonic -0.500000000s")
    #expect(MonotonicInstant(nanoseconds: -1_000_000_001).description == "monotonic -1.000000001s")
    #expect(MonotonicInstant.distantPast.description == "monotonic -9223372036.854775808s")
    #expect(MonotonicInstant.distantFuture.description == "monotonic +9223372036.854775807s")
  }

  @Test("durations with more whole seconds than Int64 holds saturate instead of trapping")
  func durationsBeyondInt64Seconds() {
    // 1.8e19 s: a valid Duration whose `components.seconds` does not fit in Int64.
    let beyond = Duration.seconds(UInt64.max)
    let now = MonotonicInstant.now
    #expect(now + beyond == .distantFuture)
    #expect(now - beyond == .distantPast)
    #expect(now - .seconds(Int64.min) == .distantFuture)
    #expect(MonotonicInstant.after(.seconds(Int64.max) + .seconds(Int64.max)) == .distantFuture)
    #expect(MonotonicInstant.after(.zero - beyond) == .distantPast)
    // Timed operations given such timeouts: a far one waits as long as it takes, a very
    // negative one makes one attempt.
    let lock = Lock()
    #expect(lock.lock(timeout: beyond))
    lock.unlock()
    #expect(lock.lock(timeout: .zero - beyond))
    lock.unlock()
    let semaphore = Semaphore(value: 0)
    #expect(!semaphore.wait(timeout: .zero - beyond))
    semaphore.signal()
    #expect(semaphore.wait(timeout: beyond))
    let condition = Condition()
    condition.withLock { #expect(!condition.wait(timeout: .zero - beyond)) }
  }

  @Test("the clock never goes backwards")
  func monotonic() {
    var previous = MonotonicInstant.now
    for _ in 0..<10_000 {
      let next = MonotonicInstant.now
      #expect(next >= previous)
      previous = next
    }
  }
}
