import Glibc
import ProcessTestSupport
import Sync
import Testing

// Scenarios of WebKit's WTF tests (Lock, Condition, ParkingLot) translated to the toolkit:
// the WTF lock stress runs over the toolkit's locks, the bounded-queue producer/consumer runs
// over `Lock` + `ConditionVariable` and `Condition`, and the parking-lot latch runs over
// `Semaphore` and a futex-style `AtomicInteger` wait.

/// Counters protected by a lock under test (plain memory: a lost increment shows a broken lock).
private final class Words: @unchecked Sendable {
  let words: UnsafeMutablePointer<Double>
  let count: Int
  init(_ count: Int) {
    self.count = count
    words = .allocate(capacity: count)
    words.initialize(repeating: 0, count: count)
  }
  deinit { words.deallocate() }
}

/// The lock kinds the stress runs use: every toolkit lock that admits any number of threads.
private enum LockKind: String, CaseIterable, CustomTestStringConvertible {
  case lock, spinLock, condition, recursiveLock
  var testDescription: String { rawValue }
  func make() -> any Locking {
    switch self {
    case .lock: return Lock()
    case .spinLock: return SpinLock()
    case .condition: return Condition()
    case .recursiveLock: return RecursiveLock()
    }
  }
}

/// WTF's lock stress: `groups` locks, each guarding one counter, `threadsPerGroup` threads per
/// lock each entering `iterations` critical sections of `work` increments. Then, as WTF checks
/// that the lock is "fully reset", the lock must be free and behave as new.
private func runLockStress(_ kind: LockKind, groups: Int, threadsPerGroup: Int, work: Int, iterations: Int) {
  let locks = (0..<groups).map { _ in kind.make() }
  let words = Words(groups)
  runConcurrently(groups * threadsPerGroup) { index in
    let group = index / threadsPerGroup
    let lock = locks[group]
    for _ in 0..<iterations {
      lock.lock()
      for _ in 0..<work { words.words[group] += 1 }
      lock.unlock()
    }
  }
  let expected = Double(iterations * work * threadsPerGroup)
  for group in 0..<groups {
    #expect(words.words[group] == expected, "group \(group) lost increments")
    for _ in 0..<2 {
      locks[group].lock()
      locks[group].unlock()
    }
    #expect(locks[group].tryLock(), "group \(group)'s lock is not free after the stress")
    locks[group].unlock()
  }
}

/// Stress loops scale down under the sanitizers, which slow every lock operation tenfold or more.
private let scale = isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer ? 10 : 1

@Suite("WebKit WTF scenarios: locks", .timeLimit(.minutes(3)))
struct PeerWebKitLockTests {
  @Test("uncontended short sections count exactly", arguments: LockKind.allCases)
  fileprivate func uncontendedShortSection(_ kind: LockKind) {
    runLockStress(kind, groups: 1, threadsPerGroup: 1, work: 1, iterations: 200_000 / scale)
  }

  @Test("uncontended long sections count exactly", arguments: LockKind.allCases)
  fileprivate func uncontendedLongSection(_ kind: LockKind) {
    runLockStress(kind, groups: 1, threadsPerGroup: 1, work: 1_000, iterations: 200 / scale)
  }

  @Test("ten threads on one lock, short sections: no increment lost", arguments: LockKind.allCases)
  fileprivate func contendedShortSection(_ kind: LockKind) {
    runLockStress(kind, groups: 1, threadsPerGroup: 10, work: 1, iterations: 10_000 / scale)
  }

  @Test("ten threads on one lock, long sections: no increment lost", arguments: LockKind.allCases)
  fileprivate func contendedLongSection(_ kind: LockKind) {
    runLockStress(kind, groups: 1, threadsPerGroup: 10, work: 1_000, iterations: 100 / scale)
  }

  @Test("ten locks with ten threads each, short sections: no increment lost", arguments: LockKind.allCases)
  fileprivate func manyContendedShortSections(_ kind: LockKind) {
    runLockStress(kind, groups: 10, threadsPerGroup: 10, work: 1, iterations: 1_000 / scale)
  }

  @Test("ten locks with ten threads each, long sections: no increment lost", arguments: LockKind.allCases)
  fileprivate func manyContendedLongSections(_ kind: LockKind) {
    runLockStress(kind, groups: 10, threadsPerGroup: 10, work: 1_000, iterations: 20 / scale)
  }

  @Test("ten locks with ten threads each, one very long section each", arguments: LockKind.allCases)
  fileprivate func manyContendedLongerSections(_ kind: LockKind) {
    runLockStress(kind, groups: 10, threadsPerGroup: 10, work: 100_000 / scale, iterations: 1)
  }

  @Test("locks allocated side by side do not disturb each other", arguments: LockKind.allCases)
  fileprivate func sectionAddressCollision(_ kind: LockKind) {
    runLockStress(kind, groups: 4, threadsPerGroup: 2, work: 1_000, iterations: 200 / scale)
  }

  @Test("threads mixing tryLock and lock on one lock count exactly", arguments: LockKind.allCases)
  fileprivate func tryLockUnderContention(_ kind: LockKind) {
    let lock = kind.make()
    let words = Words(2)  // [0]: increments, [1]: failed tryLocks (protected by the lock too)
    let perThread = 5_000 / scale
    runConcurrently(8) { index in
      for _ in 0..<perThread {
        if index % 2 == 0 {
          lock.lock()
          words.words[0] += 1
          lock.unlock()
        } else {
          while !lock.tryLock() { sched_yield() }
          words.words[0] += 1
          lock.unlock()
        }
      }
    }
    #expect(words.words[0] == Double(8 * perThread))
    #expect(lock.tryLock())
    lock.unlock()
  }
}

// MARK: - Condition.cpp: bounded queues

private enum NotifyStyle: String, CaseIterable, CustomTestStringConvertible {
  /// Signal one waiter after every change.
  case alwaysNotifyOne
  /// Broadcast only when the queue leaves the empty (or full) state.
  case tacticallyNotifyAll
  var testDescription: String { rawValue }
}

/// The queue and its flags, protected by the mutex (or the condition) of the run.
private final class BoundedQueue: @unchecked Sendable {
  var items: [Int] = []
  var head = 0
  var shouldContinue = true
  var received: [Int] = []  // protected by `receivedLock`
  let receivedLock = Lock()
  var count: Int { items.count - head }
  func append(_ value: Int) { items.append(value) }
  func takeFirst() -> Int {
    let value = items[head]
    head += 1
    if head > 1024 && head * 2 > items.count {
      items.removeFirst(head)
      head = 0
    }
    return value
  }
}

/// One configuration of WTF's Condition test.
private struct QueueRun: CustomTestStringConvertible, Sendable {
  var producers: Int
  var consumers: Int
  var slots: Int
  var messagesPerProducer: Int
  var style: NotifyStyle
  var testDescription: String {
    "\(producers) producers, \(consumers) consumers, \(slots) slots, \(style.rawValue)"
  }
}

private let queueRuns: [QueueRun] = [
  QueueRun(producers: 1, consumers: 1, slots: 1, messagesPerProducer: 20_000 / scale, style: .tacticallyNotifyAll),
  QueueRun(producers: 1, consumers: 1, slots: 100, messagesPerProducer: 50_000 / scale, style: .tacticallyNotifyAll),
  QueueRun(producers: 10, consumers: 1, slots: 1, messagesPerProducer: 2_000 / scale, style: .tacticallyNotifyAll),
  QueueRun(producers: 10, consumers: 1, slots: 100, messagesPerProducer: 2_000 / scale, style: .tacticallyNotifyAll),
  QueueRun(producers: 10, consumers: 1, slots: 100, messagesPerProducer: 2_000 / scale, style: .alwaysNotifyOne),
  QueueRun(producers: 1, consumers: 10, slots: 1, messagesPerProducer: 5_000 / scale, style: .tacticallyNotifyAll),
  QueueRun(producers: 1, consumers: 10, slots: 100, messagesPerProducer: 20_000 / scale, style: .tacticallyNotifyAll),
  QueueRun(producers: 1, consumers: 10, slots: 100, messagesPerProducer: 20_000 / scale, style: .alwaysNotifyOne),
  QueueRun(producers: 10, consumers: 10, slots: 1, messagesPerProducer: 1_000 / scale, style: .tacticallyNotifyAll),
  QueueRun(producers: 10, consumers: 10, slots: 100, messagesPerProducer: 2_000 / scale, style: .tacticallyNotifyAll),
  QueueRun(producers: 10, consumers: 10, slots: 100, messagesPerProducer: 2_000 / scale, style: .alwaysNotifyOne),
]

/// Checks WTF's result: every producer's messages arrived exactly once.
private func expectEveryMessageOnce(
  _ received: [Int], _ run: QueueRun, sourceLocation: SourceLocation = #_sourceLocation
) {
  #expect(received.count == run.producers * run.messagesPerProducer, sourceLocation: sourceLocation)
  var counts = [Int](repeating: 0, count: run.messagesPerProducer)
  for message in received where message >= 0 && message < counts.count { counts[message] += 1 }
  #expect(
    counts.allSatisfy { $0 == run.producers }, "a message was lost or delivered twice", sourceLocation: sourceLocation)
}

/// Waits on `condition` with `mutex` until `predicate` holds: without a limit, or (when
/// `slice` is given) in timed waits of `slice` that may time out and are simply retried, as
/// WTF's timeout variant does; `onTimeout` counts the waits that timed out.
private func wait(
  _ condition: ConditionVariable, _ mutex: Lock, slice: Duration?, onTimeout: () -> Void = {},
  until predicate: () -> Bool
) {
  guard let slice else {
    condition.wait(mutex, until: predicate)
    return
  }
  while !predicate() {
    if !condition.wait(mutex, until: predicate, timeout: slice) { onTimeout() }
  }
}

/// WTF's `runTest` over a `Lock` and two `ConditionVariable`s ("not empty", "not full"),
/// notified after the lock is released, as WTF does.
private func runBoundedQueue(_ run: QueueRun, slice: Duration? = nil, consumersFirstTimeOut: Bool = false) {
  let mutex = Lock()
  let notEmpty = ConditionVariable()
  let notFull = ConditionVariable()
  let queue = BoundedQueue()
  let consumerTimeouts = AtomicInteger<Int>(0)
  let consumersIdle = Gate()
  let producersDone = AtomicInteger<Int>(0)
  @Sendable func notify(_ condition: ConditionVariable, _ shouldNotify: Bool) {
    switch run.style {
    case .alwaysNotifyOne: condition.signal()
    case .tacticallyNotifyAll: if shouldNotify { condition.broadcast() }
    }
  }
  runConcurrently(run.consumers + run.producers) { index in
    if index < run.consumers {
      while true {
        mutex.lock()
        wait(
          notEmpty, mutex, slice: slice,
          onTimeout: {
            if consumerTimeouts.increment(ordering: .relaxed) == run.consumers { consumersIdle.open() }
          }
        ) { !queue.shouldContinue || queue.count > 0 }
        if !queue.shouldContinue && queue.count == 0 {
          mutex.unlock()
          return
        }
        let shouldNotify = queue.count == run.slots
        let message = queue.takeFirst()
        mutex.unlock()
        notify(notFull, shouldNotify)
        queue.receivedLock.withLock { queue.received.append(message) }
      }
    } else {
      // The timeout variant starts producing only once the consumers' timed waits timed out.
      if consumersFirstTimeOut { consumersIdle.wait() }
      for message in 0..<run.messagesPerProducer {
        mutex.lock()
        wait(notFull, mutex, slice: slice) { queue.count < run.slots }
        let shouldNotify = queue.count == 0
        queue.append(message)
        mutex.unlock()
        notify(notEmpty, shouldNotify)
      }
      // The last producer to finish tells the consumers to finish (WTF's main thread does
      // it after joining the producers).
      if producersDone.increment(ordering: .relaxed) == run.producers {
        mutex.withLock { queue.shouldContinue = false }
        notEmpty.broadcast()
      }
    }
  }
  if consumersFirstTimeOut { #expect(consumerTimeouts.load(ordering: .relaxed) >= run.consumers) }
  expectEveryMessageOnce(queue.received, run)
}

@Suite("WebKit WTF scenarios: conditions", .timeLimit(.minutes(3)))
struct PeerWebKitConditionTests {
  @Test("bounded queue over a Lock and two ConditionVariables, notified after unlocking", arguments: queueRuns)
  fileprivate func boundedQueueOverConditionVariables(_ run: QueueRun) {
    runBoundedQueue(run)
  }

  @Test("one producer, one consumer, one slot, in 10 ms timed waits that time out and are retried")
  func timedWaitsThatTimeOutAreRetried() {
    let run = QueueRun(
      producers: 1, consumers: 1, slots: 1, messagesPerProducer: 5_000 / scale, style: .tacticallyNotifyAll)
    runBoundedQueue(run, slice: .milliseconds(10), consumersFirstTimeOut: true)
  }

  @Test("ten producers, ten consumers in 1 ms timed waits, signalling one: nothing lost or stranded")
  func manyTimedWaitersWithSignalOne() {
    let run = QueueRun(
      producers: 10, consumers: 10, slots: 1, messagesPerProducer: 500 / scale, style: .alwaysNotifyOne)
    runBoundedQueue(run, slice: .milliseconds(1))
  }

  @Test("bounded queue over one Condition: broadcast after unlocking wakes producers and consumers alike")
  func boundedQueueOverOneCondition() {
    let run = QueueRun(
      producers: 4, consumers: 4, slots: 3, messagesPerProducer: 5_000 / scale, style: .tacticallyNotifyAll)
    let condition = Condition()
    let queue = BoundedQueue()
    let producersDone = AtomicInteger<Int>(0)
    runConcurrently(run.consumers + run.producers) { index in
      if index < run.consumers {
        while true {
          condition.lock()
          condition.wait(until: { !queue.shouldContinue || queue.count > 0 })
          if !queue.shouldContinue && queue.count == 0 {
            condition.unlock()
            return
          }
          let wasFull = queue.count == run.slots
          let message = queue.takeFirst()
          condition.unlock()
          if wasFull { condition.broadcast() }
          queue.receivedLock.withLock { queue.received.append(message) }
        }
      } else {
        for message in 0..<run.messagesPerProducer {
          condition.lock()
          condition.wait(until: { queue.count < run.slots })
          let wasEmpty = queue.count == 0
          queue.append(message)
          condition.unlock()
          if wasEmpty { condition.broadcast() }
        }
        if producersDone.increment(ordering: .relaxed) == run.producers {
          condition.withLock { queue.shouldContinue = false }
          condition.broadcast()
        }
      }
    }
    expectEveryMessageOnce(queue.received, run)
  }

  @Test("a timed predicate wait whose predicate stays false times out with false, the lock held")
  func timeoutTimesOut() {
    let mutex = Lock()
    let condition = ConditionVariable()
    mutex.lock()
    let start = MonotonicInstant.now
    let result = condition.wait(mutex, until: { false }, timeout: .milliseconds(10))
    #expect(!result)
    #expect(start.duration(to: .now) >= .milliseconds(10))
    #expect(mutex.isHeldByCurrentThread)
    mutex.unlock()

    let own = Condition()
    own.lock()
    let ownStart = MonotonicInstant.now
    #expect(!own.wait(until: { false }, timeout: .milliseconds(10)))
    #expect(ownStart.duration(to: .now) >= .milliseconds(10))
    #expect(own.isHeldByCurrentThread)
    own.unlock()
  }

  @Test("a signal or broadcast with nobody waiting is not kept for a later waiter")
  func notificationWithoutWaiterIsNotRemembered() {
    let mutex = Lock()
    let condition = ConditionVariable()
    condition.signal()
    condition.broadcast()
    mutex.lock()
    #expect(!condition.wait(mutex, timeout: .milliseconds(20)), "an earlier notification woke a later waiter")
    mutex.unlock()
  }
}

// MARK: - ParkingLot.cpp: a latch whose waiters are released one at a time, then all

/// Tracks how many of the parked threads have woken (spinning on raw atomics, independent of
/// the primitives under test).
private final class AwakeCount: @unchecked Sendable {
  let value = AtomicInteger<Int>(0)
  func wakeOne() { _ = value.increment(ordering: .releasing) }
  var current: Int { value.load(ordering: .acquiring) }
  func wait(for expected: Int) {
    let giveUp = monotonicSeconds() + 60
    while current < expected {
      if monotonicSeconds() > giveUp { fatalError("AwakeCount: \(current) of \(expected) woke within 60 s") }
      sched_yield()
    }
  }
}

/// What WTF's parking test does with one latch: `threads` threads park; `singleReleases` of
/// them are let through one at a time (each release lets exactly one through), then all the
/// rest at once.
private func runParking(
  threads: Int, singleReleases: Int, park: @escaping @Sendable () -> Void, releaseOne: @escaping @Sendable () -> Void,
  releaseAll: @escaping @Sendable (Int) -> Void
) {
  let awake = AwakeCount()
  runConcurrently(threads + 1) { index in
    if index < threads {
      park()
      awake.wakeOne()
      return
    }
    for released in 0..<singleReleases {
      releaseOne()
      awake.wait(for: released + 1)
      // Each release lets one thread through, never a second.
      #expect(awake.current == released + 1)
    }
    releaseAll(threads - singleReleases)
    awake.wait(for: threads)
  }
  #expect(awake.current == threads)
}

/// ParkingLot's semaphore over a futex word: `down` takes a token or sleeps while there is
/// none; `up` adds one and wakes one sleeper.
private final class FutexSemaphore: @unchecked Sendable {
  let tokens = AtomicInteger<UInt32>(0)
  func down() {
    while true {
      let value = tokens.load(ordering: .acquiring)
      if value > 0 {
        if tokens.compareAndSwap(expected: value, desired: value - 1, ordering: .acquiring) { return }
        continue
      }
      tokens.wait(whileEqualTo: 0)
    }
  }
  func up(_ count: UInt32 = 1) {
    _ = tokens.add(count, ordering: .releasing)
    if count == 1 { tokens.wake(count: 1) } else { tokens.wakeAll() }
  }
}

private struct ParkingRun: CustomTestStringConvertible, Sendable {
  var repeats: Int
  var threads: Int
  var singleReleases: Int
  var testDescription: String { "\(repeats)x \(threads) threads, \(singleReleases) released one by one" }
}

private let parkingRuns: [ParkingRun] = [
  ParkingRun(repeats: 1_000 / scale, threads: 1, singleReleases: 0),  // UnparkAllOneFast
  ParkingRun(repeats: 20 / scale, threads: 100, singleReleases: 0),  // UnparkAllHundredFast
  ParkingRun(repeats: 500 / scale, threads: 1, singleReleases: 1),  // UnparkOneOneFast
  ParkingRun(repeats: 5 / scale + 1, threads: 100, singleReleases: 100),  // UnparkOneHundredFast
  ParkingRun(repeats: 10 / scale + 1, threads: 100, singleReleases: 50),  // UnparkOneFiftyThenFiftyAllFast
]

@Suite("WebKit WTF scenarios: parking", .timeLimit(.minutes(3)))
struct PeerWebKitParkingTests {
  @Test(
    "Semaphore: parked threads released one at a time, then all, each release lets one through", arguments: parkingRuns)
  fileprivate func semaphoreLatch(_ run: ParkingRun) {
    for _ in 0..<run.repeats {
      let semaphore = Semaphore(value: 0)
      runParking(
        threads: run.threads, singleReleases: run.singleReleases, park: { semaphore.wait() },
        releaseOne: { semaphore.signal() },
        releaseAll: { remaining in for _ in 0..<remaining { semaphore.signal() } })
      #expect(semaphore.value == 0)
    }
  }

  @Test("futex word: parked threads released one at a time, then all, with no wake-up lost", arguments: parkingRuns)
  fileprivate func futexLatch(_ run: ParkingRun) {
    for _ in 0..<run.repeats {
      let semaphore = FutexSemaphore()
      runParking(
        threads: run.threads, singleReleases: run.singleReleases, park: { semaphore.down() },
        releaseOne: { semaphore.up() },
        releaseAll: { remaining in if remaining > 0 { semaphore.up(UInt32(remaining)) } })
      #expect(semaphore.tokens.load(ordering: .relaxed) == 0)
    }
  }

  @Test("a wait whose validation fails (the word already changed) returns at once, even with no deadline")
  func waitWithFailedValidation() {
    let word = AtomicInteger<Int32>(5)
    #expect(word.wait(whileEqualTo: 4))
    #expect(word.wait(whileEqualTo: 4, timeout: .zero))
    #expect(word.wait(whileEqualTo: 4, before: .distantPast))
  }

  @Test("a parked thread with a timeout and no waker returns false, never early")
  func parkTimesOut() {
    let word = AtomicInteger<UInt32>(0)
    let start = MonotonicInstant.now
    #expect(!word.wait(whileEqualTo: 0, timeout: .milliseconds(20)))
    #expect(start.duration(to: .now) >= .milliseconds(20))
    #expect(!word.wait(whileEqualTo: 0, timeout: .zero))
    #expect(!word.wait(whileEqualTo: 0, timeout: .milliseconds(-5)))
    #expect(!word.wait(whileEqualTo: 0, before: .distantPast))
  }

  @Test("waking with no thread parked wakes nobody and reports zero")
  func unparkWithNobodyParked() {
    let word = AtomicInteger<UInt32>(0)
    #expect(word.wake(count: 1) == 0)
    #expect(word.wakeAll() == 0)
  }
}
