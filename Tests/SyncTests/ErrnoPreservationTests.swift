import Glibc
import Sync
import Testing

/// A value no call below would ever store in errno.
private let sentinel: Int32 = 4242

/// Sets errno to the sentinel, runs `call`, and returns errno afterwards.
private func errnoAfter(_ call: () -> Void) -> Int32 {
  errno = sentinel
  call()
  return errno
}

/// Sets errno to the sentinel, runs a timed call that must time out, and returns errno
/// afterwards (or -1 if the call did not time out).
private func errnoAfterTimeout(_ call: () -> Bool) -> Int32 {
  errno = sentinel
  let succeeded = call()
  let after = errno
  return succeeded ? -1 : after
}

@Suite("Lock and wait calls leave errno as they found it", .timeLimit(.minutes(3)))
struct ErrnoPreservationTests {
  @Test("timed waits that time out")
  func timeouts() {
    let semaphore = Semaphore(value: 0)
    #expect(errnoAfterTimeout { semaphore.wait(timeout: .milliseconds(2)) } == sentinel)

    let condition = Condition()
    condition.lock()
    #expect(errnoAfterTimeout { condition.wait(timeout: .milliseconds(2)) } == sentinel)
    condition.unlock()

    let mutex = Lock()
    let variable = ConditionVariable()
    mutex.lock()
    #expect(errnoAfterTimeout { variable.wait(mutex, timeout: .milliseconds(2)) } == sentinel)
    mutex.unlock()

    let latch = Latch(count: 1)
    #expect(errnoAfterTimeout { latch.wait(timeout: .milliseconds(2)) } == sentinel)

    let word = AtomicInteger<UInt32>(0)
    #expect(errnoAfterTimeout { word.wait(whileEqualTo: 0, before: .after(.milliseconds(2))) } == sentinel)
  }

  @Test("timed lock calls that time out against a holder on another thread")
  func lockTimeouts() {
    let mutex = Lock()
    let recursive = RecursiveLock()
    let spin = SpinLock()
    let readWrite = ReadWriteLock()
    let conditionLock = ConditionLock()
    let held = Gate()
    let done = Gate()
    let seen = GuardedValue<[Int32]>([])
    runConcurrently(2) { index in
      if index == 0 {
        mutex.lock()
        recursive.lock()
        spin.lock()
        readWrite.writeLock()
        conditionLock.lock()
        held.open()
        done.wait()
        conditionLock.unlock()
        readWrite.unlock()
        spin.unlock()
        recursive.unlock()
        mutex.unlock()
      } else {
        held.wait()
        var values: [Int32] = []
        values.append(errnoAfterTimeout { mutex.lock(timeout: .milliseconds(2)) })
        values.append(errnoAfterTimeout { recursive.lock(before: .after(.milliseconds(2))) })
        values.append(errnoAfterTimeout { spin.lock(before: .after(.milliseconds(2))) })
        values.append(errnoAfterTimeout { readWrite.readLock(timeout: .milliseconds(2)) })
        values.append(errnoAfterTimeout { readWrite.writeLock(timeout: .milliseconds(2)) })
        values.append(errnoAfterTimeout { conditionLock.lock(before: .after(.milliseconds(2))) })
        seen.value = values
        done.open()
      }
    }
    #expect(seen.value == Array(repeating: sentinel, count: 6))
  }

  @Test("contended locks, barriers and once")
  func contended() {
    let mutex = Lock()
    let readWrite = ReadWriteLock()
    let recursive = RecursiveLock()
    let barrier = ThreadBarrier(parties: 4)
    let once = Once()
    let changed = GuardedValue(0)
    runConcurrently(4) { index in
      var bad = 0
      for round in 0..<2_000 {
        if errnoAfter({ mutex.withLock {} }) != sentinel { bad += 1 }
        if errnoAfter({ recursive.withLock {} }) != sentinel { bad += 1 }
        if index.isMultiple(of: 2) {
          if errnoAfter({ readWrite.withReadLock {} }) != sentinel { bad += 1 }
        } else {
          if errnoAfter({ readWrite.withWriteLock {} }) != sentinel { bad += 1 }
        }
        if round.isMultiple(of: 100), errnoAfter({ _ = barrier.arriveAndWait() }) != sentinel { bad += 1 }
      }
      // Three threads wait in `run` while the first runs the body.
      if errnoAfter({ once.run { for _ in 0..<1_000 { sched_yield() } } }) != sentinel { bad += 1 }
      mutex.withLock { changed.value += bad }
    }
    #expect(changed.value == 0)
  }
}
