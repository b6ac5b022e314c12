import Glibc
import ProcessTestSupport
import Sync
import Testing

// Scenarios of GLib's threading tests (glib/tests: mutex.c, rec-mutex.c, rwlock.c, cond.c,
// once.c, atomic.c), translated to Sync's API. Each test names the GLib scenario it covers.
// Stress loops are scaled down under the sanitizers (said where they are).

/// Iterations for the contention scenarios: fewer under a sanitizer, which slows every
/// atomic operation and lock by an order of magnitude.
private let contentionRounds = isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer ? 200 : 2_000

@Suite("GLib peer scenarios: Lock and RecursiveLock", .timeLimit(.minutes(3)))
struct PeerScenariosGLibLockTests {
  @Test("tryLock takes a free lock and refuses a held one, the holder's own retry included (mutex3, mutex4)")
  func tryLockOnFreeAndHeldLock() {
    let lock = Lock()
    #expect(lock.tryLock())
    #expect(lock.isHeldByCurrentThread)
    #expect(!lock.tryLock())  // GLib: g_mutex_trylock by the holder returns FALSE
    let otherThreadGotIt = GuardedValue(true)
    runConcurrently(1) { _ in otherThreadGotIt.value = lock.tryLock() }
    #expect(!otherThreadGotIt.value)
    lock.unlock()
    #expect(!lock.isHeldByCurrentThread)
    #expect(lock.tryLock())
    lock.unlock()
  }

  @Test("timed lock: a passed deadline or zero timeout on a free lock still takes it; on a held lock fails at once")
  func timedLockWithPassedDeadline() {
    let lock = Lock()
    // As pthread_mutex_clocklock: a lock that is free is taken whatever the deadline.
    #expect(lock.lock(before: .distantPast))
    lock.unlock()
    #expect(lock.lock(timeout: .zero))
    lock.unlock()
    #expect(lock.lock(timeout: .milliseconds(-5)))
    lock.unlock()

    lock.lock()
    let results = GuardedValue<[Bool]>([])
    let start = MonotonicInstant.now
    runConcurrently(1) { _ in
      results.value.append(lock.lock(before: .distantPast))
      results.value.append(lock.lock(timeout: .zero))
      results.value.append(lock.lock(timeout: .milliseconds(-1)))
      results.value.append(lock.lock(timeout: .milliseconds(20)))
    }
    #expect(results.value == [false, false, false, false])
    #expect(start.duration(to: .now) >= .milliseconds(20))
    lock.unlock()
  }

  @Test("mutex contention: each of several locks is held by one thread at a time (mutex5)")
  func mutexContentionOwnership() {
    // GLib's test: threads pick a lock at random, take it (trylock or lock), record themselves
    // as its owner, yield, and check they are still the owner.
    let lockCount = 8
    let threads = 6
    let locks = (0..<lockCount).map { _ in Lock() }
    let owners = (0..<lockCount).map { _ in GuardedValue(-1) }
    let violations = AtomicInteger<Int>(0)
    let acquisitions = AtomicInteger<Int>(0)
    runConcurrently(threads) { me in
      var random = SystemRandomNumberGenerator()
      for round in 0..<contentionRounds {
        let index = Int.random(in: 0..<lockCount, using: &random)
        let lock = locks[index]
        if round % 2 == 0 {
          guard lock.tryLock() else { continue }
        } else {
          lock.lock()
        }
        acquisitions.increment(ordering: .relaxed)
        if owners[index].value != -1 { violations.increment(ordering: .relaxed) }
        owners[index].value = me
        if round % 16 == 0 { sched_yield() }
        if owners[index].value != me { violations.increment(ordering: .relaxed) }
        owners[index].value = -1
        lock.unlock()
      }
    }
    #expect(violations.load(ordering: .relaxed) == 0)
    #expect(acquisitions.load(ordering: .relaxed) >= threads * contentionRounds / 2)
    for lock in locks {
      #expect(lock.tryLock(), "every lock is free once the threads are done")
      lock.unlock()
    }
  }

  @Test("mutex contention: a shared counter incremented under the lock loses no update")
  func mutexContentionCounter() {
    let lock = Lock()
    let counter = GuardedValue(0)
    let threads = 4
    runConcurrently(threads) { _ in
      for _ in 0..<(contentionRounds * 5) { lock.withLock { counter.value += 1 } }
    }
    #expect(counter.value == threads * contentionRounds * 5)
  }

  @Test(
    "a recursive lock counts levels; tryLock by the holder adds one; others wait for the last unlock (rec_mutex1, rec_mutex3)"
  )
  func recursiveLevels() {
    let lock = RecursiveLock()
    lock.lock()
    lock.lock()
    #expect(lock.tryLock())
    #expect(lock.lock(before: .distantPast), "the holder adds a level whatever the deadline")
    #expect(lock.levelsHeldByCurrentThread == 4)
    let probes = GuardedValue<[Bool]>([])
    func probe() {
      runConcurrently(1) { _ in
        let got = lock.tryLock()
        if got { lock.unlock() }
        probes.value.append(got)
      }
    }
    for _ in 0..<3 {
      lock.unlock()
      probe()
    }
    #expect(lock.levelsHeldByCurrentThread == 1)
    lock.unlock()
    #expect(lock.levelsHeldByCurrentThread == 0)
    #expect(!lock.isHeldByCurrentThread)
    probe()
    #expect(probes.value == [false, false, false, true])
  }

  @Test("recursive mutex contention: nested acquisitions at random depths keep one owner (rec_mutex4)")
  func recursiveContention() {
    let lockCount = 4
    let locks = (0..<lockCount).map { _ in RecursiveLock() }
    let owners = (0..<lockCount).map { _ in GuardedValue(-1) }
    let violations = AtomicInteger<Int>(0)
    runConcurrently(5) { me in
      var random = SystemRandomNumberGenerator()
      for _ in 0..<(contentionRounds / 2) {
        let index = Int.random(in: 0..<lockCount, using: &random)
        let depth = Int.random(in: 1...4, using: &random)
        let lock = locks[index]
        for level in 0..<depth {
          if level % 2 == 0 { lock.lock() } else { #expect(lock.tryLock()) }
          if level == 0 {
            if owners[index].value != -1 { violations.increment(ordering: .relaxed) }
            owners[index].value = me
          } else if owners[index].value != me {
            violations.increment(ordering: .relaxed)
          }
        }
        if lock.levelsHeldByCurrentThread != depth { violations.increment(ordering: .relaxed) }
        for level in (0..<depth).reversed() {
          if owners[index].value != me { violations.increment(ordering: .relaxed) }
          if level == 0 { owners[index].value = -1 }
          lock.unlock()
        }
      }
    }
    #expect(violations.load(ordering: .relaxed) == 0)
    for lock in locks {
      #expect(lock.tryLock())
      lock.unlock()
    }
  }
}

@Suite("GLib peer scenarios: ReadWriteLock", .timeLimit(.minutes(3)))
struct PeerScenariosGLibReadWriteLockTests {
  @Test("write lock, then read lock, each released (rwlock1)")
  func writeThenRead() {
    let lock = ReadWriteLock()
    lock.writeLock()
    #expect(lock.isWriteLockedByCurrentThread)
    lock.unlock()
    lock.readLock()
    #expect(!lock.isWriteLockedByCurrentThread)
    lock.unlock()
    #expect(lock.tryWriteLock())
    lock.unlock()
  }

  @Test("one thread may hold two read locks when no writer waits (rwlock4)")
  func twoReadLocksOnOneThread() {
    let lock = ReadWriteLock()
    lock.readLock()
    lock.readLock()
    #expect(!lock.tryWriteLock())
    lock.unlock()
    #expect(!lock.tryWriteLock(), "one read lock is still held")
    lock.unlock()
    #expect(lock.tryWriteLock())
    lock.unlock()
  }

  @Test("read trylocks share; a write trylock fails while any reader holds it (rwlock5)")
  func readTryLocksShare() {
    let lock = ReadWriteLock()
    #expect(lock.tryReadLock())
    #expect(lock.tryReadLock())
    #expect(!lock.tryWriteLock())
    let otherThread = GuardedValue<[Bool]>([])
    runConcurrently(1) { _ in
      otherThread.value.append(lock.tryWriteLock())
      let read = lock.tryReadLock()
      if read { lock.unlock() }
      otherThread.value.append(read)
      otherThread.value.append(lock.writeLock(timeout: .zero))
      otherThread.value.append(lock.writeLock(before: .distantPast))
    }
    #expect(otherThread.value == [false, true, false, false])
    lock.unlock()
    lock.unlock()
    #expect(lock.tryWriteLock())
    lock.unlock()
  }

  @Test("a write lock refuses read trylocks (the holder's included); a read lock refuses write trylocks (rwlock6)")
  func writerExcludesReaders() {
    let lock = ReadWriteLock()
    lock.writeLock()
    #expect(!lock.tryReadLock(), "GLib: reader_trylock by the writer returns FALSE")
    let otherThread = GuardedValue<[Bool]>([])
    runConcurrently(1) { _ in
      otherThread.value.append(lock.tryReadLock())
      otherThread.value.append(lock.readLock(timeout: .zero))
      otherThread.value.append(lock.readLock(before: .distantPast))
      otherThread.value.append(lock.readLock(timeout: .milliseconds(10)))
    }
    #expect(otherThread.value == [false, false, false, false])
    lock.unlock()
    lock.readLock()
    #expect(!lock.tryWriteLock())
    lock.unlock()
  }

  @Test("timed read and write locks on a free lock succeed whatever the deadline")
  func timedLocksOnFreeLock() {
    let lock = ReadWriteLock()
    #expect(lock.readLock(before: .distantPast))
    lock.unlock()
    #expect(lock.readLock(timeout: .zero))
    lock.unlock()
    #expect(lock.writeLock(before: .distantPast))
    lock.unlock()
    #expect(lock.writeLock(timeout: .milliseconds(-1)))
    lock.unlock()
  }

  @Test("many readers hold the lock at the same time (reader count)")
  func readersHoldTogether() {
    let lock = ReadWriteLock()
    let readers = 4
    let inside = AtomicInteger<Int>(0)
    let maximum = AtomicInteger<Int>(0)
    runConcurrently(readers) { _ in
      lock.readLock()
      let now = inside.add(1, ordering: .relaxed)
      var seen = maximum.load(ordering: .relaxed)
      while now > seen {
        let result = maximum.compareExchange(expected: seen, desired: now, ordering: .relaxed)
        if result.exchanged { break }
        seen = result.original
      }
      // Stay inside until every reader is in: they can only all get here together.
      let giveUp = monotonicSeconds() + 30
      while inside.load(ordering: .relaxed) < readers, monotonicSeconds() < giveUp { sched_yield() }
      lock.unlock()
    }
    #expect(maximum.load(ordering: .relaxed) == readers)
    #expect(lock.tryWriteLock())
    lock.unlock()
  }

  @Test("writer exclusion: never a writer with anyone else inside, readers and writers mixed (rwlock7, rwlock8)")
  func writerExclusionStress() {
    let lock = ReadWriteLock()
    let readersInside = AtomicInteger<Int>(0)
    let writersInside = AtomicInteger<Int>(0)
    let violations = AtomicInteger<Int>(0)
    let shared = GuardedValue(0)
    let writers = 2
    let rounds = contentionRounds
    runConcurrently(6) { index in
      let isWriter = index < writers
      for round in 0..<rounds {
        if isWriter {
          if round % 3 == 0 {
            guard lock.tryWriteLock() else { continue }
          } else if round % 3 == 1 {
            guard lock.writeLock(timeout: .milliseconds(50)) else { continue }
          } else {
            lock.writeLock()
          }
          if writersInside.add(1, ordering: .relaxed) != 1 { violations.increment(ordering: .relaxed) }
          if readersInside.load(ordering: .relaxed) != 0 { violations.increment(ordering: .relaxed) }
          shared.value += 1
          if round % 8 == 0 { sched_yield() }
          writersInside.decrement(ordering: .relaxed)
          lock.unlock()
        } else {
          if round % 2 == 0 {
            guard lock.tryReadLock() else { continue }
          } else {
            lock.readLock()
          }
          readersInside.increment(ordering: .relaxed)
          if writersInside.load(ordering: .relaxed) != 0 { violations.increment(ordering: .relaxed) }
          _ = shared.value
          if round % 8 == 0 { sched_yield() }
          readersInside.decrement(ordering: .relaxed)
          lock.unlock()
        }
      }
    }
    #expect(violations.load(ordering: .relaxed) == 0)
    #expect(
      shared.value >= writers * (0..<rounds).filter { $0 % 3 == 2 }.count, "at least every writer's blocking rounds ran"
    )
    #expect(lock.tryWriteLock())
    lock.unlock()
  }
}

@Suite("GLib peer scenarios: Condition and ConditionVariable", .timeLimit(.minutes(3)))
struct PeerScenariosGLibConditionTests {
  /// GLib's cond1 with `Condition`: a producer hands 1...99 and then -1 twice to two
  /// consumers through one slot, broadcasting every tenth value and signalling the others;
  /// the consumers' sums add up to the producer's. (GLib's producer sleeps between values;
  /// here it waits for the slot to empty, so a consumer broadcasts when it takes a value.)
  @Test("producer-consumer through one slot: signal and broadcast lose no value (cond1, Condition)")
  func producerConsumerCondition() {
    let condition = Condition()
    let slot = GuardedValue(0)
    let sums = GuardedValue<[Int]>([0, 0, 0])
    runConcurrently(3) { index in
      if index == 0 {
        var total = 0
        for value in Array(1..<100) + [-1, -1] {
          if value > 0 { total += value }
          condition.withLock {
            condition.wait(until: { slot.value == 0 })
            slot.value = value
            if value % 10 == 0 { condition.broadcast() } else { condition.signal() }
          }
        }
        condition.withLock { sums.value[0] = total }
      } else {
        var accumulated = 0
        while true {
          let value = condition.withLock {
            condition.wait(until: { slot.value != 0 })
            defer { slot.value = 0 }
            condition.broadcast()  // the producer and the other consumer may both wait
            return slot.value
          }
          if value == -1 { break }
          accumulated += value
        }
        condition.withLock { sums.value[index] = accumulated }
      }
    }
    let sumsSeen = condition.withLock { sums.value }
    #expect(sumsSeen[0] == 99 * 100 / 2)
    #expect(sumsSeen[1] + sumsSeen[2] == sumsSeen[0])
  }

  @Test("producer-consumer through one slot with a Lock and a ConditionVariable (cond1)")
  func producerConsumerConditionVariable() {
    let mutex = Lock()
    let changed = ConditionVariable()
    let slot = GuardedValue(0)
    let sums = GuardedValue<[Int]>([0, 0, 0])
    runConcurrently(3) { index in
      if index == 0 {
        var total = 0
        for value in Array(1..<100) + [-1, -1] {
          if value > 0 { total += value }
          mutex.withLock {
            changed.wait(mutex, until: { slot.value == 0 })
            slot.value = value
            if value % 10 == 0 { changed.broadcast() } else { changed.signal() }
          }
        }
        mutex.withLock { sums.value[0] = total }
      } else {
        var accumulated = 0
        while true {
          let value = mutex.withLock {
            changed.wait(mutex, until: { slot.value != 0 })
            defer { slot.value = 0 }
            changed.broadcast()
            return slot.value
          }
          if value == -1 { break }
          accumulated += value
        }
        mutex.withLock { sums.value[index] = accumulated }
      }
    }
    let sumsSeen = mutex.withLock { sums.value }
    #expect(sumsSeen[0] == 99 * 100 / 2)
    #expect(sumsSeen[1] + sumsSeen[2] == sumsSeen[0])
  }

  @Test("a barrier built on a condition releases all five threads together (cond2)")
  func barrierOnCondition() {
    let condition = Condition()
    let parties = 5
    let remaining = GuardedValue(parties)
    let generation = GuardedValue(0)
    let check = AtomicInteger<Int>(0)
    let checkAfterBarrier = GuardedValue<[Int]>([])
    runConcurrently(parties) { index in
      check.increment(ordering: .relaxed)
      for _ in 0..<(index * 200) { sched_yield() }  // arrive at different times
      check.increment(ordering: .relaxed)
      condition.withLock {
        let myGeneration = generation.value
        remaining.value -= 1
        if remaining.value == 0 {
          remaining.value = parties
          generation.value += 1
          condition.broadcast()
        } else {
          condition.wait(until: { generation.value != myGeneration })
        }
      }
      let seen = check.load(ordering: .relaxed)
      condition.withLock { checkAfterBarrier.value.append(seen) }
    }
    #expect(checkAfterBarrier.value == Array(repeating: 2 * parties, count: parties))
  }

  @Test("wait(before:) returns false once the monotonic deadline has passed, never before, lock held (wait_until)")
  func waitUntilDeadlineCondition() {
    let condition = Condition()
    let deadline = MonotonicInstant.now + .milliseconds(100)
    condition.lock()
    #expect(!condition.wait(before: deadline))
    #expect(MonotonicInstant.now >= deadline)
    #expect(condition.isHeldByCurrentThread)
    // An already-passed deadline: false at once, the lock never released.
    #expect(!condition.wait(before: deadline))
    #expect(!condition.wait(timeout: .zero))
    #expect(!condition.wait(timeout: .milliseconds(-10)))
    #expect(condition.isHeldByCurrentThread)
    condition.unlock()
  }

  @Test("ConditionVariable.wait(_:before:) returns false once the deadline has passed, mutex held (wait_until)")
  func waitUntilDeadlineConditionVariable() {
    let mutex = Lock()
    let condition = ConditionVariable()
    let deadline = MonotonicInstant.now + .milliseconds(100)
    mutex.lock()
    #expect(!condition.wait(mutex, before: deadline))
    #expect(MonotonicInstant.now >= deadline)
    #expect(mutex.isHeldByCurrentThread)
    #expect(!condition.wait(mutex, before: .distantPast))
    #expect(!condition.wait(mutex, timeout: .zero))
    #expect(mutex.isHeldByCurrentThread)
    mutex.unlock()
  }

  @Test("a timed wait that times out leaves errno as it was (wait_until_errno)")
  func timedWaitPreservesErrno() {
    let condition = Condition()
    let mutex = Lock()
    let variable = ConditionVariable()
    condition.lock()
    errno = 12345
    #expect(!condition.wait(timeout: .milliseconds(5)))
    #expect(errno == 12345)
    condition.unlock()
    mutex.lock()
    errno = 54321
    #expect(!variable.wait(mutex, timeout: .milliseconds(5)))
    #expect(errno == 54321)
    mutex.unlock()
  }

  @Test("a signal before the deadline ends a timed wait with true")
  func signalBeforeDeadline() {
    let condition = Condition()
    let ready = GuardedValue(false)
    let waiterResult = GuardedValue<Bool?>(nil)
    let waiting = Gate()
    runConcurrently(2) { index in
      if index == 0 {
        condition.withLock {
          waiting.open()
          let result = condition.wait(until: { ready.value }, before: .now + .seconds(30))
          waiterResult.value = result
        }
      } else {
        waiting.wait()
        condition.withLock {
          ready.value = true
          condition.signal()
        }
      }
    }
    #expect(condition.withLock { waiterResult.value } == true)
  }
}

@Suite("GLib peer scenarios: Once and Lazy", .timeLimit(.minutes(3)))
struct PeerScenariosGLibOnceTests {
  @Test("the initializer runs once; later reads return the same value without running it (once1, once3)")
  func lazyComputesOnce() {
    let runs = AtomicInteger<Int>(0)
    let lazy = Lazy<Int> {
      runs.increment(ordering: .relaxed)
      return 42
    }
    #expect(!lazy.isInitialized)
    #expect(lazy.value == 42)
    #expect(lazy.value == 42)
    #expect(lazy.isInitialized)
    #expect(runs.load(ordering: .relaxed) == 1)

    let once = Once()
    #expect(!once.isCompleted)
    once.run { runs.increment(ordering: .relaxed) }
    once.run { runs.increment(ordering: .relaxed) }
    #expect(once.isCompleted)
    #expect(runs.load(ordering: .relaxed) == 2)
  }

  @Test("many threads entering at once: exactly one initializes, all see its value (once2, once4, init-multi-threaded)")
  func manyThreadsExactlyOnce() {
    for _ in 0..<10 {
      let runs = AtomicInteger<Int>(0)
      let arrived = AtomicInteger<Int>(0)
      let lazy = Lazy<[Int]> {
        runs.increment(ordering: .relaxed)
        for _ in 0..<50 { sched_yield() }  // keep the others arriving while it runs
        return Array(0..<100)
      }
      let sums = GuardedValue<[Int]>(Array(repeating: 0, count: 8))
      let sumsLock = Lock()
      runConcurrently(8) { index in
        arrived.increment(ordering: .relaxed)
        while arrived.load(ordering: .relaxed) < 8 { sched_yield() }  // start together
        let sum = lazy.value.reduce(0, +)
        sumsLock.withLock { sums.value[index] = sum }
      }
      #expect(runs.load(ordering: .relaxed) == 1)
      #expect(sumsLock.withLock { sums.value } == Array(repeating: 4950, count: 8))
    }
  }

  @Test(
    "an initializer that throws leaves the Once not done; the next caller runs it again (toolkit rule; GLib has no failure)"
  )
  func throwingBodyRunsAgain() {
    struct Failed: Error {}
    let once = Once()
    let runs = AtomicInteger<Int>(0)
    #expect(throws: Failed.self) {
      try once.run { () throws(Failed) in
        runs.increment(ordering: .relaxed)
        throw Failed()
      }
    }
    #expect(!once.isCompleted)
    once.run { runs.increment(ordering: .relaxed) }
    #expect(once.isCompleted)
    #expect(runs.load(ordering: .relaxed) == 2)
  }
}

@Suite("GLib peer scenarios: atomics", .timeLimit(.minutes(3)))
struct PeerScenariosGLibAtomicTests {
  /// GLib's `types` test for one integer width: every operation's return value.
  func checkReturnValues<Value: AtomicIntegerValue>(_: Value.Type) {
    let atomic = AtomicInteger<Value>(0)
    atomic.store(5, ordering: .releasing)
    #expect(atomic.load(ordering: .acquiring) == 5)
    #expect(atomic.compareAndSwap(expected: 5, desired: 6, ordering: .full))
    #expect(!atomic.compareAndSwap(expected: 5, desired: 7, ordering: .full))
    #expect(atomic.load(ordering: .relaxed) == 6)
    let failed = atomic.compareExchange(expected: 5, desired: 9, ordering: .full)
    #expect(failed.exchanged == false && failed.original == 6)  // compare_and_exchange_full's preval
    let swapped = atomic.compareExchange(expected: 6, desired: 9, ordering: .full)
    #expect(swapped.exchanged && swapped.original == 6)
    #expect(atomic.exchange(3, ordering: .full) == 9)
    #expect(atomic.fetchAdd(4, ordering: .full) == 3)  // g_atomic_int_add: the value before
    #expect(atomic.add(1, ordering: .full) == 8)
    #expect(atomic.increment(ordering: .full) == 9)
    #expect(atomic.fetchSubtract(8, ordering: .full) == 9)
    #expect(atomic.decrement(ordering: .full) == 0)  // g_atomic_int_dec_and_test: TRUE
    atomic.store(2, ordering: .relaxed)
    #expect(atomic.decrement(ordering: .full) != 0)  // dec_and_test: FALSE
    atomic.store(0b1100, ordering: .relaxed)
    #expect(atomic.fetchAnd(0b1010, ordering: .full) == 0b1100)  // g_atomic_int_and: before
    #expect(atomic.load(ordering: .relaxed) == 0b1000)
    #expect(atomic.fetchOr(0b0011, ordering: .full) == 0b1000)
    #expect(atomic.load(ordering: .relaxed) == 0b1011)
    #expect(atomic.fetchXor(0b1111, ordering: .full) == 0b1011)
    #expect(atomic.load(ordering: .relaxed) == 0b0100)
    #expect(atomic.and(0b0110, ordering: .full) == 0b0100)
    #expect(atomic.or(0b0001, ordering: .full) == 0b0101)
    #expect(atomic.xor(0b0101, ordering: .full) == 0)
  }

  @Test("every operation returns what GLib's does: old value for fetch/and/or/xor/exchange, whether for CAS (types)")
  func returnValuesEveryWidth() {
    checkReturnValues(Int8.self)
    checkReturnValues(UInt8.self)
    checkReturnValues(Int16.self)
    checkReturnValues(UInt16.self)
    checkReturnValues(Int32.self)
    checkReturnValues(UInt32.self)
    checkReturnValues(Int64.self)
    checkReturnValues(UInt64.self)
    checkReturnValues(Int.self)
    checkReturnValues(UInt.self)
  }

  func checkWrapAround<Value: AtomicIntegerValue>(_: Value.Type) {
    let atomic = AtomicInteger<Value>(.max)
    #expect(atomic.increment(ordering: .full) == .min)
    #expect(atomic.decrement(ordering: .full) == .max)
    #expect(atomic.fetchAdd(2, ordering: .full) == .max)
    #expect(atomic.load(ordering: .relaxed) == Value.min &+ 1)
    atomic.store(.min, ordering: .relaxed)
    #expect(atomic.fetchSubtract(1, ordering: .full) == .min)
    #expect(atomic.load(ordering: .relaxed) == .max)
    #expect(atomic.subtract(Value.max, ordering: .full) == 0)
    #expect(atomic.add(Value.max, ordering: .full) == .max)
    #expect(atomic.add(Value.max, ordering: .full) == Value.max &+ Value.max)
  }

  @Test("arithmetic wraps around at both ends of every width (inc on G_MAXUINT, add past G_MAXINT)")
  func wrapAroundEveryWidth() {
    checkWrapAround(Int8.self)
    checkWrapAround(UInt8.self)
    checkWrapAround(Int16.self)
    checkWrapAround(UInt16.self)
    checkWrapAround(Int32.self)
    checkWrapAround(UInt32.self)
    checkWrapAround(Int64.self)
    checkWrapAround(UInt64.self)
    checkWrapAround(Int.self)
    checkWrapAround(UInt.self)
  }

  @Test("booleans: exchange, compare-exchange and the logical operations return the value before")
  func booleans() {
    let flag = AtomicBool(false)
    #expect(flag.exchange(true, ordering: .full) == false)
    let failed = flag.compareExchange(expected: false, desired: false, ordering: .full)
    #expect(!failed.exchanged && failed.original == true)
    let swapped = flag.compareExchange(expected: true, desired: false, ordering: .full)
    #expect(swapped.exchanged && swapped.original == true)
    #expect(flag.fetchOr(true, ordering: .full) == false)
    #expect(flag.fetchAnd(false, ordering: .full) == true)
    #expect(flag.fetchXor(true, ordering: .full) == false)
    #expect(flag.load(ordering: .relaxed) == true)
  }

  @Test("pointers: set, get, exchange and compare-and-exchange with nil (pointer types)")
  func references() {
    final class Node {}
    let first = Node()
    let second = Node()
    let reference = AtomicReference<Node>()
    #expect(reference.load() == nil)
    let fromNil = reference.compareExchange(expected: nil, desired: first)
    #expect(fromNil.exchanged && fromNil.original == nil)
    let stale = reference.compareExchange(expected: nil, desired: second)
    #expect(!stale.exchanged && stale.original === first)
    #expect(reference.exchange(second) === first)
    #expect(reference.load() === second)
    reference.store(nil)
    #expect(reference.exchange(first) == nil)
    #expect(reference.load() === first)
  }

  @Test("threaded: concurrent adds, subtracts and bit sets add up exactly (threaded)")
  func threaded() {
    let threads = 8
    let rounds = isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer ? 2_000 : 50_000
    let sum = AtomicInteger<Int32>(0)
    let balance = AtomicInteger<UInt64>(0)
    let bits = AtomicInteger<UInt32>(0)
    let winners = AtomicInteger<Int>(0)
    let token = AtomicInteger<Int>(0)
    runConcurrently(threads) { index in
      for round in 0..<rounds {
        sum.fetchAdd(Int32(index + 1), ordering: .relaxed)
        balance.increment(ordering: .relaxed)
        balance.decrement(ordering: .relaxed)
        let mask = UInt32(1) << UInt32(index)
        if round % 2 == 0 {
          if bits.fetchOr(mask, ordering: .relaxed) & mask != 0 { winners.increment(ordering: .relaxed) }
        } else {
          if bits.fetchAnd(~mask, ordering: .relaxed) & mask == 0 { winners.increment(ordering: .relaxed) }
        }
      }
      if token.compareAndSwap(expected: 0, desired: index + 1, ordering: .full) {
        winners.add(1000, ordering: .relaxed)
      }
    }
    #expect(sum.load(ordering: .relaxed) == Int32(rounds * threads * (threads + 1) / 2))
    #expect(balance.load(ordering: .relaxed) == 0)
    #expect(bits.load(ordering: .relaxed) == 0, "each thread cleared its own bit last")
    #expect(winners.load(ordering: .relaxed) == 1000, "no own bit was seen in the wrong state; one CAS won")
    #expect(token.load(ordering: .relaxed) != 0)
  }
}

@Suite("GLib peer scenarios: far deadlines and writer preference", .timeLimit(.minutes(3)))
struct PeerScenariosGLibDeadlineEdgeTests {
  /// Deadlines GLib callers compute as `g_get_monotonic_time () + huge` or pass as
  /// `G_MAXINT64`: far in the future, but not the toolkit's `distantFuture` sentinel.
  static let farDeadlines: [MonotonicInstant] = [
    MonotonicInstant(nanoseconds: .max - 1),
    MonotonicInstant.now + .seconds(Int64.max),
    MonotonicInstant.now + .seconds(300 * 365 * 24 * 3600),
  ]

  @Test("a timed lock with a far deadline or a huge timeout waits for the release and takes the lock")
  func lockWithFarDeadline() {
    for deadline in Self.farDeadlines + [.distantFuture] {
      let lock = Lock()
      let holding = Gate()
      let results = GuardedValue<[Bool]>([])
      runConcurrently(2) { index in
        if index == 0 {
          holding.wait()
          let got = lock.lock(before: deadline)
          results.value.append(got)
          if got { lock.unlock() }
          let gotAgain = lock.lock(timeout: .seconds(Int64.max))
          results.value.append(gotAgain)
          if gotAgain { lock.unlock() }
        } else {
          lock.lock()
          holding.open()
          usleep(5_000)  // not synchronization: lets the waiters reach the kernel wait with their deadline
          lock.unlock()
        }
      }
      #expect(results.value == [true, true], "deadline \(deadline)")
    }
  }

  @Test("condition, semaphore and atomic waits with a far deadline end when woken, with true")
  func waitsWithFarDeadline() {
    for deadline in Self.farDeadlines {
      let condition = Condition()
      let flag = GuardedValue(false)
      let semaphore = Semaphore(value: 0)
      let word = AtomicInteger<UInt32>(0)
      let results = GuardedValue<[Bool]>([])
      let resultsLock = Lock()
      runConcurrently(4) { index in
        switch index {
        case 0:
          let woke = condition.withLock { condition.wait(until: { flag.value }, before: deadline) }
          resultsLock.withLock { results.value.append(woke) }
        case 1:
          let got = semaphore.wait(before: deadline)
          resultsLock.withLock { results.value.append(got) }
        case 2:
          while word.load(ordering: .acquiring) == 0 {
            if !word.wait(whileEqualTo: 0, before: deadline) {
              resultsLock.withLock { results.value.append(false) }
              return
            }
          }
          resultsLock.withLock { results.value.append(true) }
        default:
          usleep(5_000)  // not synchronization: lets the waiters reach the kernel wait with their deadline
          condition.withLock {
            flag.value = true
            condition.broadcast()
          }
          semaphore.signal()
          word.store(1, ordering: .releasing)
          word.wakeAll()
        }
      }
      #expect(resultsLock.withLock { results.value } == [true, true, true], "deadline \(deadline)")
    }
  }

  @Test("read-write timed locks with a far deadline wait for the release")
  func readWriteLockWithFarDeadline() {
    for deadline in Self.farDeadlines {
      let lock = ReadWriteLock()
      let holding = Gate()
      let results = GuardedValue<[Bool]>([])
      runConcurrently(2) { index in
        if index == 0 {
          holding.wait()
          let read = lock.readLock(before: deadline)
          results.value.append(read)
          if read { lock.unlock() }
          let write = lock.writeLock(timeout: .seconds(Int64.max))
          results.value.append(write)
          if write { lock.unlock() }
        } else {
          lock.writeLock()
          holding.open()
          usleep(5_000)  // not synchronization: lets the waiters reach the kernel wait with their deadline
          lock.unlock()
        }
      }
      #expect(results.value == [true, true], "deadline \(deadline)")
    }
  }

  @Test("while a writer waits, new readers are refused, unlike glibc's default reader-preferring GRWLock (documented)")
  func waitingWriterHoldsBackNewReaders() {
    let lock = ReadWriteLock()
    lock.readLock()
    let writerResult = GuardedValue<Bool?>(nil)
    let readerResults = GuardedValue<[Bool]>([])
    let writerWaiting = Gate()
    runConcurrently(2) { index in
      if index == 0 {
        writerWaiting.open()
        let got = lock.writeLock(timeout: .seconds(30))
        writerResult.value = got
        if got { lock.unlock() }
      } else {
        writerWaiting.wait()
        // The writer announces itself before it sleeps; wait until a reader is refused.
        let giveUp = monotonicSeconds() + 30
        while lock.tryReadLock() {
          lock.unlock()
          if monotonicSeconds() > giveUp { break }
          sched_yield()
        }
        readerResults.value.append(lock.tryReadLock())
        readerResults.value.append(lock.readLock(timeout: .milliseconds(10)))
        lock.unlock()  // the first read lock, taken on the test's thread: readers are not tagged
      }
    }
    #expect(readerResults.value == [false, false])
    #expect(writerResult.value == true)
    #expect(lock.tryReadLock())
    lock.unlock()
  }
}

@Suite("GLib peer scenarios: wake-ups", .timeLimit(.minutes(3)))
struct PeerScenariosGLibWakeUpTests {
  @Test("a signal or broadcast with nobody waiting is not kept for a later wait (GCond is not a semaphore)")
  func signalIsNotSticky() {
    let condition = Condition()
    condition.withLock {
      condition.signal()
      condition.broadcast()
    }
    let start = MonotonicInstant.now
    let woke = condition.withLock { condition.wait(timeout: .milliseconds(20)) }
    // A spurious wake-up is allowed by the contract; a kept signal would return at once.
    if woke {
      #expect(start.duration(to: .now) >= .milliseconds(1), "returned at once: the earlier signal was kept")
    } else {
      #expect(start.duration(to: .now) >= .milliseconds(20))
    }

    let mutex = Lock()
    let variable = ConditionVariable()
    mutex.withLock { variable.signal() }
    let start2 = MonotonicInstant.now
    let woke2 = mutex.withLock { variable.wait(mutex, timeout: .milliseconds(20)) }
    if woke2 {
      #expect(start2.duration(to: .now) >= .milliseconds(1), "returned at once: the earlier signal was kept")
    } else {
      #expect(start2.duration(to: .now) >= .milliseconds(20))
    }
  }

  @Test("when the running initializer throws, a waiting thread runs it next; exactly one run succeeds")
  func waitersTakeOverAfterAThrow() {
    struct Failed: Error {}
    for _ in 0..<5 {
      let once = Once()
      let attempts = AtomicInteger<Int>(0)
      let successes = AtomicInteger<Int>(0)
      let failures = AtomicInteger<Int>(0)
      let firstRunning = Gate()
      let othersArrived = AtomicInteger<Int>(0)
      runConcurrently(4) { index in
        if index != 0 {
          firstRunning.wait()
          othersArrived.increment(ordering: .relaxed)
        }
        do throws(Failed) {
          try once.run { () throws(Failed) in
            let attempt = attempts.increment(ordering: .relaxed)
            if attempt == 1 {
              firstRunning.open()
              // Fail only once the others are about to wait on this run.
              while othersArrived.load(ordering: .relaxed) < 3 { sched_yield() }
              for _ in 0..<50 { sched_yield() }
              throw Failed()
            }
            successes.increment(ordering: .relaxed)
          }
        } catch {
          failures.increment(ordering: .relaxed)
        }
      }
      #expect(failures.load(ordering: .relaxed) == 1)
      #expect(successes.load(ordering: .relaxed) == 1)
      #expect(attempts.load(ordering: .relaxed) == 2)
      #expect(once.isCompleted)
    }
  }
}

@Suite("GLib peer scenarios: passed deadlines make one attempt", .timeLimit(.minutes(3)))
struct PeerScenariosGLibPassedDeadlineTests {
  @Test(
    "semaphore, atomic and predicate waits with a passed deadline succeed when they need not wait, else fail at once")
  func passedDeadlinesMakeOneAttempt() {
    let semaphore = Semaphore(value: 1)
    #expect(semaphore.wait(before: .distantPast))
    #expect(!semaphore.wait(before: .distantPast))
    #expect(!semaphore.wait(timeout: .zero))
    semaphore.signal()
    #expect(semaphore.wait(timeout: .milliseconds(-3)))
    #expect(semaphore.value == 0)

    let word = AtomicInteger<UInt32>(5)
    #expect(word.wait(whileEqualTo: 4, before: .distantPast), "the value differs: no wait, not a timeout")
    #expect(!word.wait(whileEqualTo: 5, before: .distantPast))
    #expect(!word.wait(whileEqualTo: 5, timeout: .zero))

    let condition = Condition()
    condition.withLock {
      #expect(condition.wait(until: { true }, before: .distantPast))
      #expect(!condition.wait(until: { false }, before: .distantPast))
      #expect(!condition.wait(until: { false }, timeout: .zero))
      #expect(condition.isHeldByCurrentThread)
    }
    let mutex = Lock()
    let variable = ConditionVariable()
    mutex.withLock {
      #expect(variable.wait(mutex, until: { true }, before: .distantPast))
      #expect(!variable.wait(mutex, until: { false }, timeout: .milliseconds(-1)))
      #expect(mutex.isHeldByCurrentThread)
    }
  }
}
