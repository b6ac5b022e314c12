import Glibc
import ProcessTestSupport
import Sync
import Testing

// libuv's threading tests (test-mutexes.c, test-condvar.c, test-semaphore.c,
// test-barrier.c, test-once.c) translated to Sync: `uv_mutex_t` is `Lock` (or
// `RecursiveLock` for `uv_mutex_init_recursive`), `uv_rwlock_t` is `ReadWriteLock`,
// `uv_cond_t` is `ConditionVariable`, `uv_sem_t` is `Semaphore`, `uv_barrier_t` is
// `ThreadBarrier`, `uv_once_t` is `Once`.

/// State shared by the two sides of a lock-step scenario: a counter both sides advance
/// under `mutex`, as libuv's `synchronize()` does.
private final class LockStep: @unchecked Sendable {
  // @unchecked: `step` is read and written only with `mutex` held.
  let mutex = Lock()
  let condition = ConditionVariable()
  var step = 0

  /// Advances the step and wakes the other side (libuv's `synchronize_nowait`). Call it
  /// holding `mutex`.
  func advance() {
    step += 1
    condition.signal()
  }

  /// Advances the step, then waits for the other side to advance it once more, tolerating
  /// spurious wake-ups (libuv's `synchronize`). Call it holding `mutex`; returns whether the
  /// other side advanced exactly once.
  func synchronize() -> Bool {
    advance()
    let current = step
    while step == current { condition.wait(mutex) }
    return step == current + 1
  }
}

@Suite("libuv scenarios: mutexes and read-write locks", .timeLimit(.minutes(3)))
struct PeerLibuvMutexTests {
  @Test("thread_mutex: a lock is taken and released; its holder's tryLock fails")
  func mutexLockUnlock() {
    let mutex = Lock()
    mutex.lock()
    #expect(mutex.isHeldByCurrentThread)
    #expect(!mutex.tryLock())  // UV_MUTEX_SIMPLE: not recursive, so the holder gets EBUSY
    mutex.unlock()
    #expect(!mutex.isHeldByCurrentThread)
    #expect(mutex.tryLock())
    mutex.unlock()
  }

  @Test("thread_mutex_recursive: the holder re-locks and try-locks; another thread waits for the last unlock")
  func recursiveMutex() {
    let mutex = RecursiveLock()
    mutex.lock()
    mutex.lock()
    #expect(mutex.tryLock())
    #expect(mutex.levelsHeldByCurrentThread == 3)
    let tookItWhileHeld = AtomicBool(true)
    runConcurrently(1) { _ in tookItWhileHeld.store(mutex.tryLock(), ordering: .relaxed) }
    #expect(!tookItWhileHeld.load(ordering: .relaxed))
    mutex.unlock()
    mutex.unlock()
    #expect(mutex.levelsHeldByCurrentThread == 1)
    mutex.unlock()
    #expect(!mutex.isHeldByCurrentThread)
    let tookItAfterRelease = AtomicBool(false)
    runConcurrently(1) { _ in
      let took = mutex.tryLock()
      if took { mutex.unlock() }
      tookItAfterRelease.store(took, ordering: .relaxed)
    }
    #expect(tookItAfterRelease.load(ordering: .relaxed))
  }

  @Test("waiters that gave up on a held lock (one of them starving by then) leave it free for the next taker")
  func timedOutWaitersLeaveTheLockFree() {
    let mutex = Lock()
    mutex.lock()
    let timedOut = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      // The first to give up does not wake the other; each sleeps to its own deadline.
      if !mutex.lock(timeout: index == 0 ? .milliseconds(10) : .milliseconds(40)) {
        timedOut.increment(ordering: .relaxed)
      }
    }
    #expect(timedOut.load(ordering: .relaxed) == 2)
    mutex.unlock()
    let tookIt = AtomicBool(false)
    runConcurrently(1) { _ in
      let took = mutex.tryLock()
      if took { mutex.unlock() }
      tookIt.store(took, ordering: .relaxed)
    }
    #expect(tookIt.load(ordering: .relaxed))
  }

  @Test("stress: timed and untimed lockers together: exclusion holds and the lock ends free")
  func timedAndUntimedLockers() {
    let mutex = Lock()
    let inside = AtomicInteger<Int>(0)
    let violations = AtomicInteger<Int>(0)
    let iterations = isRunningUnderSanitizer ? 500 : 5_000
    runConcurrently(4) { index in
      for round in 0..<iterations {
        let took =
          index < 2
          ? mutex.lock(timeout: .microseconds(10 * (round % 7)))
          : {
            mutex.lock()
            return true
          }()
        guard took else { continue }
        if inside.add(1, ordering: .relaxed) != 1 { violations.increment(ordering: .relaxed) }
        _ = inside.subtract(1, ordering: .relaxed)
        mutex.unlock()
      }
    }
    #expect(violations.load(ordering: .relaxed) == 0)
    #expect(mutex.tryLock())
    mutex.unlock()
  }

  @Test("thread_rwlock: read lock and write lock are taken and released in turn")
  func readWriteLockBasics() {
    let lock = ReadWriteLock()
    lock.readLock()
    #expect(!lock.isWriteLockedByCurrentThread)
    lock.unlock()
    lock.writeLock()
    #expect(lock.isWriteLockedByCurrentThread)
    lock.unlock()
    #expect(lock.tryWriteLock())
    lock.unlock()
  }

  @Test("thread_rwlock_trylock: try-locks agree with who holds the lock, step by step across two threads")
  func readWriteTryLockLockStep() {
    let rwlock = ReadWriteLock()
    let sync = LockStep()
    let failures = AtomicInteger<Int>(0)
    @Sendable func check(_ condition: Bool) { if !condition { failures.increment(ordering: .relaxed) } }

    runConcurrently(2) { side in
      sync.mutex.lock()
      defer { sync.mutex.unlock() }
      if side == 0 {
        // libuv's main thread.
        check(rwlock.tryWriteLock())  // hold the write lock
        check(sync.synchronize())
        // Release the write lock and take a read lock (no upgrade or downgrade).
        rwlock.unlock()
        check(rwlock.tryReadLock())
        check(sync.synchronize())
        rwlock.unlock()  // release the read lock
        check(sync.synchronize())
        // The write lock is held by the other thread.
        check(!rwlock.tryReadLock())
        check(!rwlock.tryWriteLock())
        check(sync.synchronize())
        // A read lock is held by the other thread: another reader gets in, a writer does not.
        check(rwlock.tryReadLock())
        rwlock.unlock()
        check(!rwlock.tryWriteLock())
        check(sync.synchronize())
      } else {
        // libuv's peer thread; it starts once the main side holds the write lock.
        while sync.step == 0 { sync.condition.wait(sync.mutex) }
        // The write lock is held by the other thread.
        check(!rwlock.tryReadLock())
        check(!rwlock.tryWriteLock())
        check(sync.synchronize())
        // A read lock is held by the other thread.
        check(rwlock.tryReadLock())
        rwlock.unlock()
        check(!rwlock.tryWriteLock())
        check(sync.synchronize())
        // Take the write lock.
        check(rwlock.tryWriteLock())
        check(sync.synchronize())
        // Release it and take a read lock.
        rwlock.unlock()
        check(rwlock.tryReadLock())
        check(sync.synchronize())
        rwlock.unlock()
        sync.advance()  // going away
      }
    }
    #expect(failures.load(ordering: .relaxed) == 0)
    #expect(rwlock.tryWriteLock())
    rwlock.unlock()
  }

  @Test("a read lock is re-entrant while no writer waits: a reader takes another read lock and try-lock succeeds")
  func readLockTakenTwiceWithoutWriters() {
    let rwlock = ReadWriteLock()
    rwlock.readLock()
    #expect(rwlock.tryReadLock())
    #expect(rwlock.readLock(timeout: .zero))
    #expect(!rwlock.tryWriteLock())
    #expect(!rwlock.writeLock(timeout: .zero))
    rwlock.unlock()
    rwlock.unlock()
    rwlock.unlock()
    #expect(rwlock.tryWriteLock())
    rwlock.unlock()
  }

  @Test("a writer that gave up waiting (pthread_rwlock_timedwrlock timing out) does not keep new readers out")
  func timedOutWriterLetsReadersIn() {
    let rwlock = ReadWriteLock()
    rwlock.readLock()
    let writerTimedOut = AtomicBool(false)
    runConcurrently(1) { _ in writerTimedOut.store(!rwlock.writeLock(timeout: .milliseconds(20)), ordering: .relaxed) }
    #expect(writerTimedOut.load(ordering: .relaxed))
    // No writer waits any more: another reader gets in at once, as with pthread's lock.
    let readerGotIn = AtomicBool(false)
    runConcurrently(1) { _ in
      let took = rwlock.tryReadLock()
      if took { rwlock.unlock() }
      readerGotIn.store(took, ordering: .relaxed)
    }
    #expect(readerGotIn.load(ordering: .relaxed))
    rwlock.unlock()
  }

  @Test("writers that all gave up, one after waking the other and having it starve, do not keep new readers out")
  func timedOutWritersLetReadersIn() {
    let rwlock = ReadWriteLock()
    rwlock.readLock()
    let timedOut = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      // The first to give up wakes the other, which has slept past the starvation threshold.
      if !rwlock.writeLock(timeout: index == 0 ? .milliseconds(20) : .milliseconds(60)) {
        timedOut.increment(ordering: .relaxed)
      }
    }
    #expect(timedOut.load(ordering: .relaxed) == 2)
    let readerGotIn = AtomicBool(false)
    runConcurrently(1) { _ in
      let took = rwlock.readLock(timeout: .milliseconds(200))
      if took { rwlock.unlock() }
      readerGotIn.store(took, ordering: .relaxed)
    }
    #expect(readerGotIn.load(ordering: .relaxed))
    rwlock.unlock()
    #expect(rwlock.tryWriteLock())
    rwlock.unlock()
  }

  @Test("stress: timed writers giving up among readers and untimed writers: exclusion holds, nobody is left asleep")
  func timedWritersAmongReadersAndWriters() {
    let rwlock = ReadWriteLock()
    // Bits 0-15 count readers inside, bit 16 a writer inside.
    let inside = AtomicInteger<Int>(0)
    let violations = AtomicInteger<Int>(0)
    let iterations = isRunningUnderSanitizer ? 300 : 3_000
    runConcurrently(6) { index in
      for round in 0..<iterations {
        switch index {
        case 0, 1, 2:
          let took =
            index == 2
            ? rwlock.readLock(timeout: .microseconds(50 * (round % 4)))
            : {
              rwlock.readLock()
              return true
            }()
          guard took else { continue }
          if inside.add(1, ordering: .relaxed) >= 1 << 16 { violations.increment(ordering: .relaxed) }
          _ = inside.subtract(1, ordering: .relaxed)
          rwlock.unlock()
        default:
          let took =
            index == 5
            ? {
              rwlock.writeLock()
              return true
            }() : rwlock.writeLock(timeout: .microseconds(20 * (round % 5)))
          guard took else { continue }
          if inside.add(1 << 16, ordering: .relaxed) != 1 << 16 { violations.increment(ordering: .relaxed) }
          _ = inside.subtract(1 << 16, ordering: .relaxed)
          rwlock.unlock()
        }
      }
    }
    #expect(violations.load(ordering: .relaxed) == 0)
    #expect(rwlock.tryWriteLock())
    rwlock.unlock()
    #expect(rwlock.tryReadLock())
    rwlock.unlock()
  }

  @Test("while a timed writer still waits, new readers queue; once it gives up they get in")
  func readersQueueBehindATimedWriterUntilItGivesUp() {
    let rwlock = ReadWriteLock()
    rwlock.readLock()
    let writerWaiting = Gate()
    let results = [AtomicBool(true), AtomicBool(false)]
    runConcurrently(2) { index in
      if index == 0 {
        writerWaiting.open()
        results[0].store(rwlock.writeLock(timeout: .milliseconds(100)), ordering: .relaxed)
      } else {
        writerWaiting.wait()
        // Queued behind the writer, admitted once it gives up (bounded so that a reader
        // kept out for good fails instead of hanging: the main thread's read lock is
        // released only after this thread is joined).
        let took = rwlock.readLock(timeout: .seconds(5))
        results[1].store(took, ordering: .relaxed)
        if took { rwlock.unlock() }
      }
    }
    #expect(!results[0].load(ordering: .relaxed))
    #expect(results[1].load(ordering: .relaxed))
    rwlock.unlock()
  }
}

/// libuv's `worker_config`: two flags, each set once by one side and awaited by the other.
private final class ConditionScenario: @unchecked Sendable {
  // @unchecked: the flags are read and written only with `mutex` held.
  let mutex = Lock()
  let condition = ConditionVariable()
  var posted1 = false
  var posted2 = false
  let useBroadcast: Bool
  let failures = AtomicInteger<Int>(0)

  init(useBroadcast: Bool = false) { self.useBroadcast = useBroadcast }

  /// Sets a flag under the mutex and signals (or broadcasts).
  func post(_ flag: ReferenceWritableKeyPath<ConditionScenario, Bool>, delay: Duration = .zero) {
    if delay > .zero { sleepFor(delay) }
    mutex.withLock {
      if self[keyPath: flag] { failures.increment(ordering: .relaxed) }
      self[keyPath: flag] = true
      if useBroadcast { condition.broadcast() } else { condition.signal() }
    }
  }

  /// Waits for a flag, looping over spurious wake-ups; `timeout` makes each wait a timed
  /// one that must not time out (libuv's `condvar_timedwait`); `delay` holds the mutex a
  /// while first, so the signal is sent before the wait starts or while it is being set up.
  func waitFor(_ flag: KeyPath<ConditionScenario, Bool>, timeout: Duration? = nil, delay: Duration = .zero) {
    mutex.withLock {
      if delay > .zero { sleepFor(delay) }
      while !self[keyPath: flag] {
        if let timeout {
          if !condition.wait(mutex, timeout: timeout) { failures.increment(ordering: .relaxed) }
        } else {
          condition.wait(mutex)
        }
      }
    }
  }

  /// The worker's side: posts the first flag, then waits for the second.
  func worker(signalDelay: Duration, timeout: Duration?, waitDelay: Duration) {
    post(\.posted1, delay: signalDelay)
    waitFor(\.posted2, timeout: timeout, delay: waitDelay)
  }

  /// Runs the worker against the calling thread playing the other side, as libuv's
  /// `condvar_N` do, and returns the number of failed checks.
  func run(signalDelay: Duration = .zero, timeout: Duration? = nil, waitDelay: Duration = .zero) -> Int {
    runConcurrently(2) { side in
      if side == 0 {
        self.worker(signalDelay: signalDelay, timeout: timeout, waitDelay: waitDelay)
      } else {
        self.waitFor(\.posted1, timeout: timeout, delay: waitDelay)
        self.post(\.posted2, delay: signalDelay)
      }
    }
    return failures.load(ordering: .relaxed)
  }
}

/// Sleeps on the monotonic clock; the scenarios use it to shift one side's timing (never
/// as synchronization: every scenario is correct for any delay).
private func sleepFor(_ duration: Duration) {
  var request = MonotonicInstant.now.advanced(by: duration).timespec
  while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &request, nil) == EINTR {}
}

@Suite("libuv scenarios: condition variables", .timeLimit(.minutes(3)))
struct PeerLibuvConditionVariableTests {
  // The delays are libuv's 100 ms scaled down: they only shift the interleaving.
  static let delay = Duration.milliseconds(20)

  @Test("condvar_1: a waiter that holds the mutex a while before waiting still gets the signal")
  func waiterDelayed() {
    #expect(ConditionScenario().run(waitDelay: Self.delay) == 0)
  }

  @Test("condvar_2: a signal sent after the waiter sleeps wakes it")
  func signallerDelayed() {
    #expect(ConditionScenario().run(signalDelay: Self.delay) == 0)
  }

  @Test("condvar_3/4: a timed wait that is signalled in time reports a wake-up, not a timeout")
  func timedWaitSignalledInTime() {
    #expect(ConditionScenario().run(signalDelay: Self.delay, timeout: .seconds(10)) == 0)
  }

  @Test("condvar_5: broadcast wakes the waiter")
  func broadcastWakes() {
    #expect(ConditionScenario(useBroadcast: true).run(signalDelay: Self.delay) == 0)
  }

  @Test("a broadcast wakes every waiter; a signal wakes at least one")
  func broadcastWakesAll() {
    let mutex = Lock()
    let condition = ConditionVariable()
    nonisolated(unsafe) var generation = 0  // protected by `mutex`
    nonisolated(unsafe) var waiting = 0  // protected by `mutex`
    let woken = AtomicInteger<Int>(0)
    let waiters = 4
    runConcurrently(waiters + 1) { index in
      mutex.lock()
      defer { mutex.unlock() }
      if index < waiters {
        let mine = generation
        waiting += 1
        condition.broadcast()  // tells the broadcaster one more waits
        while generation == mine { condition.wait(mutex) }
        woken.increment(ordering: .relaxed)
      } else {
        while waiting < waiters { condition.wait(mutex) }
        generation += 1
        condition.broadcast()
      }
    }
    #expect(woken.load(ordering: .relaxed) == waiters)
  }

  @Test("a timed wait nobody signals times out, never before its timeout, and holds the mutex again")
  func timedWaitTimesOut() {
    let mutex = Lock()
    let condition = ConditionVariable()
    mutex.lock()
    defer { mutex.unlock() }
    let timeout = Duration.milliseconds(30)
    let start = MonotonicInstant.now
    // A `true` is a spurious wake-up (allowed); loop until the timeout is reported.
    let deadline = start + timeout
    while condition.wait(mutex, before: deadline) {}
    #expect(MonotonicInstant.now - start >= timeout)
    #expect(mutex.isHeldByCurrentThread)
  }

  @Test("a wait with a timeout of zero, a negative timeout or a passed deadline returns false at once, mutex kept")
  func zeroTimeoutWait() {
    let mutex = Lock()
    let condition = ConditionVariable()
    mutex.lock()
    defer { mutex.unlock() }
    #expect(!condition.wait(mutex, timeout: .zero))
    #expect(mutex.isHeldByCurrentThread)
    #expect(!condition.wait(mutex, timeout: .milliseconds(-5)))
    #expect(!condition.wait(mutex, before: .now - .seconds(1)))
    #expect(!condition.wait(mutex, before: .distantPast))
    #expect(mutex.isHeldByCurrentThread)
    // The predicate form reports the predicate's value.
    #expect(!condition.wait(mutex, until: { false }, timeout: .zero))
    #expect(condition.wait(mutex, until: { true }, timeout: .zero))
  }

  @Test("a timed predicate wait signalled before its deadline returns true; state changes are never lost")
  func timedPredicateWaitNotLost() {
    let mutex = Lock()
    let condition = ConditionVariable()
    nonisolated(unsafe) var value = 0  // protected by `mutex`
    let rounds = isRunningUnderSanitizer ? 200 : 2_000
    let misses = AtomicInteger<Int>(0)
    runConcurrently(2) { side in
      for round in 1...rounds {
        mutex.lock()
        if side == 0 {
          value = round
          condition.signal()
          // Wait for the other side to acknowledge (it sets the value negative).
          if !condition.wait(mutex, until: { value == -round }, timeout: .seconds(10)) {
            misses.increment(ordering: .relaxed)
          }
        } else {
          if !condition.wait(mutex, until: { value == round }, timeout: .seconds(10)) {
            misses.increment(ordering: .relaxed)
          }
          value = -round
          condition.signal()
        }
        mutex.unlock()
      }
    }
    #expect(misses.load(ordering: .relaxed) == 0)
  }
}

@Suite("libuv scenarios: semaphores", .timeLimit(.minutes(3)))
struct PeerLibuvSemaphoreTests {
  @Test("semaphore_1: a wait on an empty semaphore returns once another thread posts")
  func waitForPost() {
    let semaphore = Semaphore(value: 0)
    let posted = AtomicBool(false)
    runConcurrently(2) { side in
      if side == 0 {
        sleepFor(.milliseconds(10))
        posted.store(true, ordering: .relaxed)
        semaphore.signal()
      } else {
        semaphore.wait()
        // Acquire: the signal released the store above.
        #expect(posted.load(ordering: .relaxed))
      }
    }
    #expect(semaphore.value == 0)
  }

  @Test("semaphore_2: a semaphore made with one permit lets one wait through, then try-wait fails")
  func initialCountOne() {
    let semaphore = Semaphore(value: 1)
    semaphore.wait()
    #expect(!semaphore.tryWait())
    #expect(!semaphore.wait(timeout: .zero))
    semaphore.signal()
    #expect(semaphore.tryWait())
  }

  @Test("semaphore_3: the initial count is exactly the permits available; posts add exactly one each")
  func initialCountThree() {
    let semaphore = Semaphore(value: 3)
    #expect(semaphore.value == 3)
    semaphore.wait()
    semaphore.wait()
    #expect(semaphore.tryWait())
    #expect(!semaphore.tryWait())
    semaphore.signal()
    #expect(semaphore.tryWait())
    #expect(!semaphore.tryWait())
    #expect(semaphore.value == 0)
  }

  @Test("timed waits on an empty semaphore: zero, negative and passed deadlines fail at once; a timeout is never early")
  func timedWaits() {
    let semaphore = Semaphore()
    #expect(!semaphore.wait(timeout: .zero))
    #expect(!semaphore.wait(timeout: .milliseconds(-1)))
    #expect(!semaphore.wait(before: .distantPast))
    let start = MonotonicInstant.now
    #expect(!semaphore.wait(timeout: .milliseconds(20)))
    #expect(MonotonicInstant.now - start >= .milliseconds(20))
    semaphore.signal()
    #expect(semaphore.wait(before: .distantPast))  // a permit present: the one attempt takes it
  }

  @Test("many posters, timed waiters that keep timing out: every post is taken exactly once, none lost")
  func manyPostersTimedWaiters() {
    let semaphore = Semaphore()
    let perThread = isRunningUnderSanitizer ? 1_000 : 10_000
    let taken = AtomicInteger<Int>(0)
    let timeouts = AtomicInteger<Int>(0)
    runConcurrently(4) { index in
      if index < 2 {
        for round in 0..<perThread {
          semaphore.signal()
          if round % 64 == 0 { sched_yield() }
        }
      } else {
        var mine = 0
        while mine < perThread {
          if semaphore.wait(timeout: .microseconds(5)) {
            mine += 1
          } else {
            timeouts.increment(ordering: .relaxed)
          }
        }
        taken.add(mine, ordering: .relaxed)
      }
    }
    #expect(taken.load(ordering: .relaxed) == 2 * perThread)
    #expect(semaphore.value == 0)
    #expect(!semaphore.tryWait())
  }

  @Test("many posters, many waiters: every post is taken exactly once, none lost")
  func manyPosters() {
    let semaphore = Semaphore()
    let posters = 4
    let waiters = 4
    let perThread = isRunningUnderSanitizer ? 2_000 : 20_000
    let taken = AtomicInteger<Int>(0)
    runConcurrently(posters + waiters) { index in
      if index < posters {
        for _ in 0..<perThread { semaphore.signal() }
      } else {
        for _ in 0..<perThread {
          semaphore.wait()
          taken.increment(ordering: .relaxed)
        }
      }
    }
    #expect(taken.load(ordering: .relaxed) == posters * perThread)
    #expect(semaphore.value == 0)
    #expect(!semaphore.tryWait())
  }
}

@Suite("libuv scenarios: barriers", .timeLimit(.minutes(3)))
struct PeerLibuvBarrierTests {
  /// libuv's `worker_config`: a barrier of two, the main thread and one worker each wait
  /// `rounds` times; returns how many `true` each side got.
  func twoParties(rounds: Int, workerDelay: Duration = .zero, mainDelay: Duration = .zero) -> (main: Int, worker: Int) {
    let barrier = ThreadBarrier(parties: 2)
    let counts = [AtomicInteger<Int>(0), AtomicInteger<Int>(0)]
    runConcurrently(2) { side in
      sleepFor(side == 0 ? mainDelay : workerDelay)
      for _ in 0..<rounds where barrier.arriveAndWait() {
        counts[side].increment(ordering: .relaxed)
      }
    }
    return (counts[0].load(ordering: .relaxed), counts[1].load(ordering: .relaxed))
  }

  @Test("barrier_1: the main thread arrives late; exactly one side is the serial thread")
  func mainArrivesLate() {
    let (main, worker) = twoParties(rounds: 1, mainDelay: .milliseconds(20))
    #expect(main ^ worker == 1)
  }

  @Test("barrier_2: the worker arrives late; exactly one side is the serial thread")
  func workerArrivesLate() {
    let (main, worker) = twoParties(rounds: 1, workerDelay: .milliseconds(20))
    #expect(main ^ worker == 1)
  }

  @Test("barrier_3: reused for five rounds, one serial thread per round")
  func reusedAcrossRounds() {
    let (main, worker) = twoParties(rounds: 5)
    #expect(main + worker == 5)
  }

  @Test(
    "barrier_serial_thread: the barrier released right after the serial thread's last wait is not used after release")
  func releasedAfterLastWait() {
    // libuv destroys the barrier in the thread that got the serial result; here each thread
    // holds its own reference only until its last wait returns, and the barrier is freed
    // when the last one lets go, while other threads may still be leaving their wait.
    final class Holder: @unchecked Sendable {
      // @unchecked: each slot is written by its own thread only; read after the joins.
      var references: [ThreadBarrier?]
      init(_ barrier: ThreadBarrier, count: Int) { references = Array(repeating: barrier, count: count) }
    }
    let parties = 5
    let rounds = isRunningUnderSanitizer ? 20 : 200
    for _ in 0..<rounds {
      weak var watched: ThreadBarrier?
      let serialCount = AtomicInteger<Int>(0)
      do {
        let barrier = ThreadBarrier(parties: parties)
        watched = barrier
        let holder = Holder(barrier, count: parties)
        let slots = UnsafeMutableBufferPointer<ThreadBarrier?>.allocate(capacity: parties)
        slots.initialize(repeating: nil)
        defer { slots.deallocate() }
        nonisolated(unsafe) let mine = slots
        for index in 0..<parties {
          mine[index] = holder.references[index]
        }
        holder.references = []
        runConcurrently(parties) { index in
          for _ in 0..<5 { mine[index]!.arriveAndWait() }
          if mine[index]!.arriveAndWait() { serialCount.increment(ordering: .relaxed) }
          mine[index] = nil
        }
      }
      #expect(serialCount.load(ordering: .relaxed) == 1)
      #expect(watched == nil)
    }
  }

  @Test("barrier_serial_thread_single: a barrier of one returns the serial result to its only thread")
  func singleParty() {
    let barrier = ThreadBarrier(parties: 1)
    for _ in 0..<3 { #expect(barrier.arriveAndWait()) }
  }
}

@Suite("libuv scenarios: once", .timeLimit(.minutes(3)))
struct PeerLibuvOnceTests {
  @Test("once whose first body throws: a waiting thread runs it again; exactly one run completes")
  func onceRetriedAfterAThrow() {
    struct Failed: Error {}
    let once = Once()
    let attempts = AtomicInteger<Int>(0)
    let completions = AtomicInteger<Int>(0)
    let errors = AtomicInteger<Int>(0)
    let gate = Gate()
    runConcurrently(isRunningUnderSanitizer ? 8 : 32) { index in
      if index == 0 { gate.open() } else { gate.wait() }
      do {
        try once.run { () throws(Failed) in
          if attempts.increment(ordering: .relaxed) == 1 { throw Failed() }
          completions.increment(ordering: .relaxed)
        }
        // Returning normally means the body has completed.
        if !once.isCompleted { errors.increment(ordering: .relaxed) }
      } catch {
        errors.increment(ordering: .relaxed)
      }
    }
    #expect(attempts.load(ordering: .relaxed) == 2)
    #expect(completions.load(ordering: .relaxed) == 1)
    #expect(errors.load(ordering: .relaxed) == 1)  // the thrower only
  }

  @Test("thread_once: many threads racing through one Once run its body exactly once, and all see its effect")
  func onceFromManyThreads() {
    let rounds = isRunningUnderSanitizer ? 5 : 50
    for _ in 0..<rounds {
      let once = Once()
      let runs = AtomicInteger<Int>(0)
      nonisolated(unsafe) var initialized = 0  // written by the body only
      let sawItUninitialized = AtomicInteger<Int>(0)
      let gate = Gate()
      runConcurrently(isRunningUnderSanitizer ? 16 : 100) { index in
        if index == 0 { gate.open() } else { gate.wait() }
        once.run {
          runs.increment(ordering: .relaxed)
          initialized += 1
        }
        if initialized != 1 { sawItUninitialized.increment(ordering: .relaxed) }
      }
      #expect(runs.load(ordering: .relaxed) == 1)
      #expect(initialized == 1)
      #expect(sawItUninitialized.load(ordering: .relaxed) == 0)
      #expect(once.isCompleted)
    }
  }
}
