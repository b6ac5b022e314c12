import Glibc
import ProcessTestSupport
import Sync
import Testing

// Scenarios of SwiftNIO's NIOConcurrencyHelpers tests (atomics, the atomic box, the lock, the
// condition lock), asked of the toolkit's Sync types. Written for the toolkit's API: an
// `Atomic<T>`/`NIOAtomic<T>` is an ``AtomicInteger`` or ``AtomicBool``, the `AtomicBox` an
// ``AtomicReference``, `NIOLock` a ``Lock``, NIO's `ConditionLock(value:)` a
// ``ConditionLock`` (`lock(whenValue:)` is `lock(whenCondition:)`, `unlock(withValue:)` is
// `unlock(withCondition:)`, `timeoutSeconds:` is `timeout:`).

/// Stress sizes scale down under a sanitizer (it slows every atomic and allocation).
private let underSanitizer = isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer

/// An object that counts its deinitializations and poisons its value as it goes, so a
/// reader that got a released object would see a negative value.
private final class TrackedInt: @unchecked Sendable {
  private(set) var value: Int
  let deallocations: AtomicInteger<Int>

  init(_ value: Int, deallocations: AtomicInteger<Int>) {
    self.value = value
    self.deallocations = deallocations
  }

  deinit {
    value = -1
    deallocations.increment(ordering: .relaxed)
  }
}

private final class Plain: Sendable {}

/// Runs `body(index)` on `count` threads that all start together, and joins them.
private func race(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
  let arrived = AtomicInteger<Int>(0)
  let go = Gate()
  runConcurrently(count + 1) { index in
    if index == count {
      while arrived.load(ordering: .acquiring) < count { sched_yield() }
      go.open()
      return
    }
    arrived.increment(ordering: .releasing)
    go.wait()
    body(index)
  }
}

@Suite("SwiftNIO atomics scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosNIOAtomicsTests {
  @Test("a contended sum of fetchAdds from many threads loses nothing")
  func largeContendedSum() {
    let threads: UInt64 = underSanitizer ? 4 : 16
    let counts: UInt64 = 2_000
    let sum = AtomicInteger<UInt64>(0)
    race(Int(threads)) { index in
      for _ in 0..<counts { sum.fetchAdd(UInt64(index) + 1, ordering: .relaxed) }
    }
    #expect(sum.load(ordering: .relaxed) == threads * (threads + 1) / 2 * counts)
  }

  @Test("compare-exchange of a Bool succeeds exactly when the expected value is there")
  func compareExchangeBool() {
    let flag = AtomicBool(true)
    #expect(flag.compareExchange(expected: false, desired: false, ordering: .full) == (false, true))
    #expect(flag.compareExchange(expected: true, desired: true, ordering: .full) == (true, true))
    #expect(flag.compareExchange(expected: false, desired: false, ordering: .full) == (false, true))
    #expect(flag.compareExchange(expected: true, desired: false, ordering: .full) == (true, true))
    #expect(flag.compareExchange(expected: false, desired: false, ordering: .full) == (true, false))
    #expect(flag.compareExchange(expected: false, desired: true, ordering: .full) == (true, false))
    #expect(flag.load(ordering: .relaxed))
  }

  @Test("every Bool operation sees the value the previous one left")
  func allOperationsBool() {
    let flag = AtomicBool(false)
    #expect(!flag.load(ordering: .acquiring))
    flag.store(false, ordering: .releasing)
    #expect(!flag.load(ordering: .acquiring))
    flag.store(true, ordering: .releasing)
    #expect(flag.load(ordering: .acquiring))
    flag.store(true, ordering: .releasing)
    #expect(flag.load(ordering: .acquiring))
    #expect(flag.exchange(true, ordering: .full))
    #expect(flag.exchange(false, ordering: .full))
    #expect(!flag.exchange(false, ordering: .full))
    #expect(flag.compareExchange(expected: false, desired: true, ordering: .full).exchanged)
    #expect(!flag.compareExchange(expected: false, desired: true, ordering: .full).exchanged)
  }

  /// Counts down from the all-ones value 255 times by compare-exchange.
  private func countDownFromMaximum<T: AtomicIntegerValue & UnsignedInteger>(_: T.Type) {
    let zero: T = 0
    let maximum = ~zero
    let atomic = AtomicInteger<T>(maximum)
    #expect(!atomic.compareAndSwap(expected: zero, desired: zero, ordering: .full), "\(T.self)")
    #expect(atomic.compareAndSwap(expected: maximum, desired: maximum, ordering: .full), "\(T.self)")
    #expect(!atomic.compareAndSwap(expected: zero, desired: zero, ordering: .full), "\(T.self)")
    #expect(atomic.compareAndSwap(expected: maximum, desired: zero, ordering: .full), "\(T.self)")
    #expect(atomic.compareAndSwap(expected: zero, desired: zero, ordering: .full), "\(T.self)")
    #expect(atomic.compareAndSwap(expected: zero, desired: maximum, ordering: .full), "\(T.self)")
    var counter = maximum
    var failures = 0
    for _ in 0..<255 {
      let (exchanged, original) = atomic.compareExchange(expected: counter, desired: counter - 1, ordering: .full)
      if !exchanged || original != counter { failures += 1 }
      counter -= 1
    }
    #expect(failures == 0, "\(T.self)")
    #expect(atomic.load(ordering: .relaxed) == maximum - 255, "\(T.self)")
  }

  @Test("compare-exchange counts unsigned values down from their maximum at every width")
  func compareExchangeUnsigned() {
    countDownFromMaximum(UInt8.self)
    countDownFromMaximum(UInt16.self)
    countDownFromMaximum(UInt32.self)
    countDownFromMaximum(UInt64.self)
    countDownFromMaximum(UInt.self)
  }

  /// Counts down from 127 through zero 255 times (to -128), checking that a stale expected
  /// value never matches.
  private func countDownThroughZero<T: AtomicIntegerValue & SignedInteger>(_: T.Type) {
    let zero: T = 0
    let upperBound: T = 127
    let atomic = AtomicInteger<T>(upperBound)
    #expect(!atomic.compareAndSwap(expected: zero, desired: zero, ordering: .full), "\(T.self)")
    #expect(atomic.compareAndSwap(expected: upperBound, desired: upperBound, ordering: .full), "\(T.self)")
    #expect(atomic.compareAndSwap(expected: upperBound, desired: zero, ordering: .full), "\(T.self)")
    #expect(atomic.compareAndSwap(expected: zero, desired: upperBound, ordering: .full), "\(T.self)")
    var counter = upperBound
    var failures = 0
    for _ in 0..<255 {
      if !atomic.compareAndSwap(expected: counter, desired: counter - 1, ordering: .full) { failures += 1 }
      let stale = atomic.compareExchange(expected: counter, desired: counter, ordering: .full)
      if stale.exchanged || stale.original != counter - 1 { failures += 1 }
      counter -= 1
    }
    #expect(failures == 0, "\(T.self)")
    #expect(atomic.load(ordering: .relaxed) == -128, "\(T.self)")
  }

  @Test("compare-exchange counts signed values down through zero at every width")
  func compareExchangeSigned() {
    countDownThroughZero(Int8.self)
    countDownThroughZero(Int16.self)
    countDownThroughZero(Int32.self)
    countDownThroughZero(Int64.self)
    countDownThroughZero(Int.self)
  }

  /// fetchAdd/fetchSubtract return the value before; add/subtract the value after.
  private func addAndSubtract<T: AtomicIntegerValue>(_: T.Type) {
    let atomic = AtomicInteger<T>(0)
    #expect(atomic.fetchAdd(1, ordering: .full) == 0, "\(T.self)")
    #expect(atomic.fetchAdd(41, ordering: .full) == 1, "\(T.self)")
    #expect(atomic.fetchAdd(23, ordering: .full) == 42, "\(T.self)")
    #expect(atomic.load(ordering: .relaxed) == 65, "\(T.self)")
    #expect(atomic.fetchSubtract(23, ordering: .full) == 65, "\(T.self)")
    #expect(atomic.fetchSubtract(41, ordering: .full) == 42, "\(T.self)")
    #expect(atomic.fetchSubtract(1, ordering: .full) == 1, "\(T.self)")
    #expect(atomic.load(ordering: .relaxed) == 0, "\(T.self)")
    atomic.store(100, ordering: .relaxed)
    #expect(atomic.add(1, ordering: .full) == 101, "\(T.self)")
    #expect(atomic.subtract(1, ordering: .full) == 100, "\(T.self)")
    #expect(atomic.load(ordering: .relaxed) == 100, "\(T.self)")
  }

  /// exchange returns the value replaced; store then load round-trips.
  private func exchangeAndStore<T: AtomicIntegerValue>(_: T.Type) {
    let atomic = AtomicInteger<T>(0)
    #expect(atomic.exchange(1, ordering: .full) == 0, "\(T.self)")
    #expect(atomic.exchange(42, ordering: .full) == 1, "\(T.self)")
    #expect(atomic.exchange(65, ordering: .full) == 42, "\(T.self)")
    #expect(atomic.load(ordering: .acquiring) == 65, "\(T.self)")
    #expect(atomic.exchange(0, ordering: .full) == 65, "\(T.self)")
    atomic.store(42, ordering: .releasing)
    #expect(atomic.load(ordering: .acquiring) == 42, "\(T.self)")
    atomic.store(0, ordering: .releasing)
    #expect(atomic.load(ordering: .acquiring) == 0, "\(T.self)")
  }

  @Test("add, subtract, exchange, load and store at every width")
  func arithmeticExchangeLoadStore() {
    addAndSubtract(Int8.self)
    addAndSubtract(Int16.self)
    addAndSubtract(Int32.self)
    addAndSubtract(Int64.self)
    addAndSubtract(Int.self)
    addAndSubtract(UInt8.self)
    addAndSubtract(UInt16.self)
    addAndSubtract(UInt32.self)
    addAndSubtract(UInt64.self)
    addAndSubtract(UInt.self)
    exchangeAndStore(Int8.self)
    exchangeAndStore(Int16.self)
    exchangeAndStore(Int32.self)
    exchangeAndStore(Int64.self)
    exchangeAndStore(Int.self)
    exchangeAndStore(UInt8.self)
    exchangeAndStore(UInt16.self)
    exchangeAndStore(UInt32.self)
    exchangeAndStore(UInt64.self)
    exchangeAndStore(UInt.self)
  }
}

@Suite("SwiftNIO atomic box scenarios on AtomicReference", .timeLimit(.minutes(3)))
struct PeerScenariosNIOAtomicReferenceTests {
  @Test("an object stored and loaded is released once the reference and the copies are gone")
  func doesNotLeak() {
    weak var stored: Plain?
    weak var loaded: Plain?
    do {
      let object = Plain()
      stored = object
      let reference = AtomicReference(object)
      let copy = reference.load()
      loaded = copy
      #expect(copy === object)
      #expect(stored != nil && loaded != nil)
    }
    #expect(stored == nil)
    #expect(loaded == nil)
  }

  @Test("compare-exchange replaces the object only when the expected one is there, by identity")
  func compareExchangeByIdentity() {
    weak var first: Plain?
    weak var second: Plain?
    do {
      let object1 = Plain()
      let object2 = Plain()
      first = object1
      second = object2
      let reference = AtomicReference(object1)
      #expect(!reference.compareExchange(expected: object2, desired: object2).exchanged)
      #expect(!reference.compareExchange(expected: Plain(), desired: object2).exchanged, "a fresh object never matches")
      #expect(reference.load() === object1)
      let swapped = reference.compareExchange(expected: object1, desired: object2)
      #expect(swapped.exchanged && swapped.original === object1)
      #expect(reference.load() === object2)
      reference.store(object1)
      #expect(reference.load() === object1)
    }
    #expect(first == nil)
    #expect(second == nil)
  }

  @Test("compare-exchange of an object onto itself from two threads always succeeds and keeps it alive")
  func compareExchangeOntoItself() {
    weak var weakObject: Plain?
    do {
      let object = Plain()
      weakObject = object
      let reference = AtomicReference(object)
      let failures = AtomicInteger<Int>(0)
      race(2) { _ in
        for _ in 0..<1_000 where !reference.compareExchange(expected: object, desired: object).exchanged {
          failures.increment(ordering: .relaxed)
        }
      }
      #expect(failures.load(ordering: .relaxed) == 0)
      #expect(reference.load() === object)
      #expect(!reference.compareExchange(expected: Plain(), desired: Plain()).exchanged)
    }
    #expect(weakObject == nil)
  }

  @Test("a reader racing a writer's stores never gets an object that was released")
  func massLoadAndStore() {
    let iterations = underSanitizer ? 2_000 : 50_000
    let deallocations = AtomicInteger<Int>(0)
    let bad = AtomicInteger<Int>(0)
    do {
      let reference = AtomicReference(TrackedInt(iterations, deallocations: deallocations))
      race(2) { index in
        if index == 0 {
          for value in 0..<iterations { reference.store(TrackedInt(value, deallocations: deallocations)) }
        } else {
          for _ in 0..<iterations where (reference.load()?.value ?? -1) < 0 { bad.increment(ordering: .relaxed) }
        }
      }
    }
    #expect(bad.load(ordering: .relaxed) == 0)
    #expect(deallocations.load(ordering: .relaxed) == iterations + 1)
  }

  /// One writer replaces the object `iterations` times (with `replace`), readers check the
  /// values they load until they see the last; every object is released exactly once.
  private func hammer(
    iterations: Int, readers: Int,
    replace: @escaping @Sendable (AtomicReference<TrackedInt>, Int, AtomicInteger<Int>) -> Bool
  ) {
    let deallocations = AtomicInteger<Int>(0)
    let bad = AtomicInteger<Int>(0)
    do {
      let reference = AtomicReference(TrackedInt(0, deallocations: deallocations))
      race(readers + 1) { index in
        if index == 0 {
          for value in 1...iterations where !replace(reference, value, deallocations) {
            bad.increment(ordering: .relaxed)
          }
          return
        }
        while true {
          let value = reference.load()?.value ?? -1
          if value < 0 || value > iterations { bad.increment(ordering: .relaxed) }
          if value == iterations || value < 0 { break }
          sched_yield()
        }
      }
    }
    #expect(bad.load(ordering: .relaxed) == 0)
    #expect(deallocations.load(ordering: .relaxed) == iterations + 1)
  }

  @Test("exchange hammered by one writer and several readers: each exchange returns the previous object")
  func exchangeHammering() {
    hammer(iterations: underSanitizer ? 1_000 : 10_000, readers: 3) { reference, value, deallocations in
      reference.exchange(TrackedInt(value, deallocations: deallocations))?.value == value - 1
    }
  }

  @Test("store hammered by one writer and several readers: every replaced object is released once")
  func storeHammering() {
    hammer(iterations: underSanitizer ? 1_000 : 10_000, readers: 3) { reference, value, deallocations in
      reference.store(TrackedInt(value, deallocations: deallocations))
      return true
    }
  }

  @Test("load-then-compare-exchange hammered by one writer and several readers always succeeds")
  func compareExchangeHammering() {
    hammer(iterations: underSanitizer ? 300 : 1_000, readers: 3) { reference, value, deallocations in
      guard let old = reference.load(), old.value == value - 1 else { return false }
      return reference.compareExchange(expected: old, desired: TrackedInt(value, deallocations: deallocations))
        .exchanged
    }
  }

  @Test("loads racing a writer's stores see the values in the order stored")
  func loadsSeeStoresInOrder() {
    let iterations = underSanitizer ? 1_000 : 10_000
    let deallocations = AtomicInteger<Int>(0)
    let regressions = AtomicInteger<Int>(0)
    do {
      let reference = AtomicReference(TrackedInt(0, deallocations: deallocations))
      race(3) { index in
        if index == 1 {
          for value in 1...iterations { reference.store(TrackedInt(value, deallocations: deallocations)) }
          return
        }
        var last = Int.min
        while last < iterations {
          let value = reference.load()?.value ?? -1
          if value < last { regressions.increment(ordering: .relaxed) }
          last = max(last, value)
          if value < 0 { break }
        }
      }
    }
    #expect(regressions.load(ordering: .relaxed) == 0)
    #expect(deallocations.load(ordering: .relaxed) == iterations + 1)
  }
}

@Suite("SwiftNIO lock and condition lock scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosNIOLockTests {
  /// Mutual exclusion: the main thread holds the lock (through `hold`/`release`), another
  /// thread announces itself and then blocks in `acquireAndSet`; it must not get through
  /// until the release, and its write is seen after.
  private func checkMutualExclusion(
    hold: () -> Void, release: () -> Void, acquireAndSet: @escaping @Sendable (Box<Int>) -> Void,
    read: (Box<Int>) -> Int
  ) {
    let value = Box(1)
    let arrived = Latch(count: 1)
    let done = Latch(count: 1)
    hold()
    let other = startThread {
      arrived.countDown()
      acquireAndSet(value)
      done.countDown()
    }
    arrived.wait()
    #expect(!done.wait(timeout: .milliseconds(50)), "the other thread got through a held lock")
    #expect(value.unprotected == 1)
    release()
    done.wait()
    joinThread(other)
    #expect(read(value) == 2)
  }

  @Test("a held Lock keeps another thread out until it is released")
  func lockMutualExclusion() {
    let lock = Lock()
    checkMutualExclusion(
      hold: { lock.lock() }, release: { lock.unlock() },
      acquireAndSet: { value in lock.withLock { value.unprotected = 2 } },
      read: { value in lock.withLock { value.unprotected } })
  }

  @Test("a held ConditionLock keeps another thread's lock() out until it is released")
  func conditionLockMutualExclusion() {
    let lock = ConditionLock(condition: 0)
    checkMutualExclusion(
      hold: { lock.lock() }, release: { lock.unlock() },
      acquireAndSet: { value in
        lock.lock()
        value.unprotected = 2
        lock.unlock()
      },
      read: { value in lock.withLock { value.unprotected } })
  }

  @Test("a withLock body of a LockedValue keeps another thread's withLock out until it ends")
  func lockedValueMutualExclusion() {
    let locked = LockedValue(1)
    let arrived = Latch(count: 1)
    let done = Latch(count: 1)
    let other = Box<pthread_t?>(nil)
    locked.withLock { value in
      other.unprotected = startThread {
        arrived.countDown()
        locked.withLock { $0 = 2 }
        done.countDown()
      }
      arrived.wait()
      #expect(!done.wait(timeout: .milliseconds(50)), "the other thread got through a held lock")
      #expect(value == 1)
    }
    done.wait()
    joinThread(other.unprotected!)
    #expect(locked.withLock { $0 } == 2)
  }

  @Test("the condition lock hands over by value, and timed waits give up or succeed as the value says")
  func conditionLockValues() {
    let lock = ConditionLock(condition: 0)
    #expect(lock.condition == 0)
    lock.lock()
    lock.unlock(withCondition: 1)
    #expect(lock.condition == 1)

    let handedBack = Latch(count: 1)
    let waiter = startThread {
      lock.lock(whenCondition: 2)
      lock.unlock(withCondition: 3)
      handedBack.countDown()
    }
    lock.lock()
    lock.unlock(withCondition: 2)
    handedBack.wait()
    joinThread(waiter)
    lock.lock(whenCondition: 3)
    lock.unlock()

    #expect(!lock.lock(whenCondition: 4, timeout: .milliseconds(100)))
    #expect(!lock.isHeldByCurrentThread)
    #expect(lock.lock(whenCondition: 3, timeout: .milliseconds(10)))
    lock.unlock()
    #expect(lock.lock(whenCondition: 3, timeout: .zero), "a zero timeout with the value there succeeds")
    lock.unlock()
    #expect(!lock.lock(whenCondition: 4, timeout: .zero))
    #expect(!lock.lock(whenCondition: 4, timeout: .seconds(-1)))

    let setter = startThread {
      lock.lock()
      lock.unlock(withCondition: 4)
    }
    #expect(lock.lock(whenCondition: 4, timeout: .seconds(10)))
    lock.unlock()
    joinThread(setter)
  }

  @Test("two threads waiting for different values each wake for their own, 200 times over")
  func differentConditions() {
    let rounds = underSanitizer ? 50 : 200
    var misses = 0
    for _ in 0..<rounds {
      let lock = ConditionLock(condition: 0)
      let ready = Semaphore(value: 0)
      let done = Semaphore(value: 0)
      let seen = Box<[Int]>([])
      let waiters = [1, 2].map { wanted in
        startThread {
          ready.signal()
          lock.lock(whenCondition: wanted)
          lock.unlock()
          let condition = lock.condition
          seen.update { $0.append(condition) }
          done.signal()
        }
      }
      ready.wait()
      ready.wait()
      lock.lock()
      lock.unlock(withCondition: 1)
      done.wait()
      if lock.condition != 1 { misses += 1 }
      lock.lock()
      lock.unlock(withCondition: 2)
      done.wait()
      for waiter in waiters { joinThread(waiter) }
      if seen.update({ $0 }) != [1, 2] { misses += 1 }
    }
    #expect(misses == 0)
  }
}

/// A box for values handed between test threads; `unprotected` is for values another
/// primitive already orders, `update` takes the box's own lock.
private final class Box<Value>: @unchecked Sendable {
  var unprotected: Value
  private let lock = Lock()
  init(_ value: Value) { unprotected = value }
  func update<R>(_ body: (inout Value) -> R) -> R { lock.withLock { body(&unprotected) } }
}

@Suite("SwiftNIO condition-lock edge cases", .timeLimit(.minutes(3)))
struct PeerScenariosNIOConditionLockEdgeTests {
  @Test("the extreme Int values survive as conditions and are waited for exactly")
  func extremeValues() {
    let lock = ConditionLock(condition: Int.min)
    #expect(lock.condition == Int.min)
    #expect(lock.lock(whenCondition: Int.min, timeout: .zero))
    lock.unlock(withCondition: Int.max)
    #expect(!lock.lock(whenCondition: Int.min, timeout: .zero))
    #expect(!lock.lock(whenCondition: -1, timeout: .zero), "Int.max is not read back as -1")
    #expect(lock.lock(whenCondition: Int.max, timeout: .zero))
    lock.unlock(withCondition: -1)
    #expect(lock.condition == -1)
    #expect(lock.tryLock(whenCondition: -1))
    lock.unlock()
  }

  @Test("the holder's tryLock forms fail without blocking or stopping the process")
  func holderTries() {
    let lock = ConditionLock(condition: 1)
    lock.lock()
    #expect(!lock.tryLock())
    #expect(!lock.tryLock(whenCondition: 1))
    #expect(lock.isHeldByCurrentThread, "a failed try by the holder leaves the lock held")
    lock.unlock()
    #expect(!lock.isHeldByCurrentThread)
  }

  @Test("the holder waiting for a value on its own lock is reported as a self-deadlock", .runsExitTests)
  func holderWaitsForValue() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = ConditionLock(condition: 0)
        lock.lock()
        lock.lock(whenCondition: 0)
      }
    }
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = ConditionLock(condition: 0)
        lock.lock()
        _ = lock.lock(whenCondition: 1, timeout: .milliseconds(10))
      }
    }
  }
}

@Suite("SwiftNIO timed waits under wake-ups for other values", .timeLimit(.minutes(3)))
struct PeerScenariosNIOTimedWaitChurnTests {
  /// Runs `wait` on this thread while another thread keeps changing the value to others
  /// (`churn`, each change waking the waiter), and returns its outcome and how long it took.
  private func underChurn(
    churn: @escaping @Sendable (Int) -> Void, wait: () -> Bool
  ) -> (Bool, Duration) {
    let stop = AtomicBool(false)
    let churner = startThread {
      var round = 0
      while !stop.load(ordering: .acquiring) {
        churn(1 + round % 4)
        round += 1
        sched_yield()
      }
    }
    let start = MonotonicInstant.now
    let outcome = wait()
    let elapsed = MonotonicInstant.now - start
    stop.store(true, ordering: .releasing)
    joinThread(churner)
    return (outcome, elapsed)
  }

  @Test("a condition-lock wait for a value never set times out at its deadline, not before, however often it is woken")
  func conditionLockTimesOutUnderChurn() {
    let lock = ConditionLock(condition: 0)
    let (acquired, elapsed) = underChurn(churn: { value in
      lock.lock()
      lock.unlock(withCondition: value)
    }) {
      lock.lock(whenCondition: 5, timeout: .milliseconds(200))
    }
    #expect(!acquired)
    #expect(elapsed >= .milliseconds(200))
    #expect(elapsed < .seconds(20), "the wait did not end near its deadline")
    #expect(!lock.isHeldByCurrentThread)
  }

  @Test("a LockedValue predicate wait never satisfied times out at its deadline, not before, however often it is woken")
  func lockedValueTimesOutUnderChurn() {
    let locked = LockedValue(0)
    let (ran, elapsed) = underChurn(churn: { value in locked.withLock { $0 = value } }) {
      locked.withLock(when: { $0 == 5 }, timeout: .milliseconds(200)) { _ in true } ?? false
    }
    #expect(!ran)
    #expect(elapsed >= .milliseconds(200))
    #expect(elapsed < .seconds(20), "the wait did not end near its deadline")
    #expect(locked.withLockIfAvailable { _ in true } == true, "the lock is free")
  }

  @Test("a condition-lock wait gets its value once set after many others before the deadline")
  func conditionLockSucceedsUnderChurn() {
    let lock = ConditionLock(condition: 0)
    let rounds = AtomicInteger<Int>(0)
    let seen = AtomicInteger<Int>(0)
    let (acquired, _) = underChurn(churn: { value in
      lock.lock()
      lock.unlock(withCondition: rounds.increment(ordering: .relaxed) >= 100 ? 5 : value)
    }) {
      guard lock.lock(whenCondition: 5, timeout: .seconds(30)) else { return false }
      seen.store(lock.condition, ordering: .relaxed)
      lock.unlock()  // before the churner is joined: it may be waiting for the lock
      return true
    }
    #expect(acquired)
    #expect(seen.load(ordering: .relaxed) == 5)
  }
}
