// Sync part 2 rows: condition hand-off, semaphore ping-pong, Once after initialization,
// uncontended synchronized(obj). Each beside its peers (raw pthread / POSIX, Foundation,
// Synchronization), measured in the same run.

import Foundation
import Sync
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Registers the Sync part 2 rows.
func registerSync2Benchmarks(_ harness: Harness) {
  // glibc takes single-thread shortcuts until the first thread is created; start and join
  // one so every row measures the multi-threaded paths.
  sync2Join(sync2Spawn {})

  // The two threads of each hand-off on two CPUs, the same for every subject.
  PingPongPlacement.withMainPinned {
    registerConditionHandoff(harness)
    registerSemaphorePingPong(harness)
  }
  registerOnceInitialized(harness)
  registerSynchronizedUncontended(harness)
}

// MARK: - Threads

private final class Sync2ThreadBody: @unchecked Sendable {
  let body: @Sendable () -> Void
  init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

private func sync2Spawn(_ body: @escaping @Sendable () -> Void) -> pthread_t {
  var thread = pthread_t()
  let box = Unmanaged.passRetained(Sync2ThreadBody(body)).toOpaque()
  let result = pthread_create(&thread, nil, { raw in
    // Every thread these rows start is the partner side of a ping-pong or hand-off.
    PingPongPlacement.pinPartner()
    Unmanaged<Sync2ThreadBody>.fromOpaque(raw!).takeRetainedValue().body()
    return nil
  }, box)
  precondition(result == 0, "pthread_create failed: \(result)")
  return thread
}

private func sync2Join(_ thread: pthread_t) {
  let result = pthread_join(thread, nil)
  precondition(result == 0, "pthread_join failed: \(result)")
}

/// Whose turn it is in a hand-off; protected by the condition's lock under test.
private final class Turn: @unchecked Sendable {
  var value = 0
}

// MARK: - condition.handoff

/// One operation = one round trip: the main thread hands the turn to the partner (signal,
/// partner wakes) and the partner hands it back (signal, main wakes): two signal-to-wake
/// hand-offs.
private func registerConditionHandoff(_ harness: Harness) {
  let id = "condition.handoff"
  let group = "Conditions: round trip of two signal-to-wake hand-offs"
  let rounds = 20_000

  harness.measureInterleaved(id: id, group: group, operations: rounds, [
    ("Sync.Condition", { iterations in
      let condition = Sync.Condition()
      let turn = Turn()
      let partner = sync2Spawn {
        for _ in 0..<iterations {
          condition.lock()
          while turn.value != 1 { condition.wait() }
          turn.value = 0
          condition.signal()
          condition.unlock()
        }
      }
      for _ in 0..<iterations {
        condition.lock()
        turn.value = 1
        condition.signal()
        while turn.value != 0 { condition.wait() }
        condition.unlock()
      }
      sync2Join(partner)
    }),
    ("Sync.ConditionVariable+Mutex", { iterations in
      let mutex = Sync.Mutex()
      let condition = ConditionVariable()
      let turn = Turn()
      let partner = sync2Spawn {
        for _ in 0..<iterations {
          mutex.lock()
          while turn.value != 1 { condition.wait(mutex) }
          turn.value = 0
          condition.signal()
          mutex.unlock()
        }
      }
      for _ in 0..<iterations {
        mutex.lock()
        turn.value = 1
        condition.signal()
        while turn.value != 0 { condition.wait(mutex) }
        mutex.unlock()
      }
      sync2Join(partner)
    }),
    ("pthread_cond", { iterations in
      let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
      let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
      precondition(pthread_mutex_init(mutex, nil) == 0)
      precondition(pthread_cond_init(condition, nil) == 0)
      nonisolated(unsafe) let m = mutex
      nonisolated(unsafe) let c = condition
      let turn = Turn()
      let partner = sync2Spawn {
        for _ in 0..<iterations {
          precondition(pthread_mutex_lock(m) == 0)
          while turn.value != 1 { precondition(pthread_cond_wait(c, m) == 0) }
          turn.value = 0
          precondition(pthread_cond_signal(c) == 0)
          precondition(pthread_mutex_unlock(m) == 0)
        }
      }
      for _ in 0..<iterations {
        precondition(pthread_mutex_lock(m) == 0)
        turn.value = 1
        precondition(pthread_cond_signal(c) == 0)
        while turn.value != 0 { precondition(pthread_cond_wait(c, m) == 0) }
        precondition(pthread_mutex_unlock(m) == 0)
      }
      sync2Join(partner)
      precondition(pthread_cond_destroy(condition) == 0)
      precondition(pthread_mutex_destroy(mutex) == 0)
      condition.deallocate()
      mutex.deallocate()
    }),
    ("Foundation.NSCondition", { iterations in
      let condition = NSCondition()
      let c = condition
      let turn = Turn()
      let partner = sync2Spawn {
        for _ in 0..<iterations {
          c.lock()
          while turn.value != 1 { c.wait() }
          turn.value = 0
          c.signal()
          c.unlock()
        }
      }
      for _ in 0..<iterations {
        condition.lock()
        turn.value = 1
        condition.signal()
        while turn.value != 0 { condition.wait() }
        condition.unlock()
      }
      sync2Join(partner)
    }),
  ])
}

// MARK: - semaphore.pingpong

/// One operation = one round trip: main signals `ping` and waits on `pong`; the partner
/// waits on `ping` and signals `pong`.
private func registerSemaphorePingPong(_ harness: Harness) {
  let id = "semaphore.pingpong"
  let group = "Semaphores: ping-pong round trip between two threads"
  let rounds = 20_000

  harness.measureInterleaved(id: id, group: group, operations: rounds, [
    ("Sync.Semaphore", { iterations in
      let ping = Sync.Semaphore(), pong = Sync.Semaphore()
      let partner = sync2Spawn {
        for _ in 0..<iterations {
          ping.wait()
          pong.signal()
        }
      }
      for _ in 0..<iterations {
        ping.signal()
        pong.wait()
      }
      sync2Join(partner)
    }),
    ("POSIX sem_t", { iterations in
      let semaphores = UnsafeMutablePointer<sem_t>.allocate(capacity: 2)
      precondition(sem_init(semaphores, 0, 0) == 0)
      precondition(sem_init(semaphores + 1, 0, 0) == 0)
      nonisolated(unsafe) let ping = semaphores
      nonisolated(unsafe) let pong = semaphores + 1
      let partner = sync2Spawn {
        for _ in 0..<iterations {
          while sem_wait(ping) != 0 { precondition(errno == EINTR) }
          precondition(sem_post(pong) == 0)
        }
      }
      for _ in 0..<iterations {
        precondition(sem_post(ping) == 0)
        while sem_wait(pong) != 0 { precondition(errno == EINTR) }
      }
      sync2Join(partner)
      precondition(sem_destroy(ping) == 0 && sem_destroy(pong) == 0)
      semaphores.deallocate()
    }),
    ("Dispatch.DispatchSemaphore", { iterations in
      let ping = DispatchSemaphore(value: 0), pong = DispatchSemaphore(value: 0)
      let partner = sync2Spawn {
        for _ in 0..<iterations {
          ping.wait()
          pong.signal()
        }
      }
      for _ in 0..<iterations {
        ping.signal()
        pong.wait()
      }
      sync2Join(partner)
    }),
  ])
}

// MARK: - once.initialized

/// One operation = one call after initialization has completed, beside a plain acquiring
/// atomic load of a word (the least any thread-safe "already initialized?" check can cost).
private func registerOnceInitialized(_ harness: Harness) {
  let id = "once.initialized"
  let group = "One-time initialization: a call after the first"
  let calls = 10_000_000

  let word = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
  word.initialize(to: 3)
  defer { word.deallocate() }

  let once = Once()
  nonisolated(unsafe) var counter = 0
  once.run { counter += 1 }

  let lazy = Lazy { 42 }
  _ = lazy.value

  // Behind an opaque call, so the optimizer cannot prove no other thread writes it and
  // hoist the load out of the loop.
  let holder = sync2Opaque(AtomicHolder())

  let control = UnsafeMutablePointer<pthread_once_t>.allocate(capacity: 1)
  control.initialize(to: pthread_once_t())
  defer { control.deallocate() }
  precondition(pthread_once(control, {}) == 0)

  harness.measureInterleaved(id: id, group: group, operations: calls, [
    ("acquiring atomic load (Sync raw)", { iterations in
      var hits = 0
      for _ in 0..<iterations where UInt32.atomicLoad(at: word, ordering: .acquiring) == 3 { hits &+= 1 }
      precondition(hits == iterations)
    }),
    ("Synchronization.Atomic.load(acquiring)", { iterations in
      var hits = 0
      for _ in 0..<iterations where holder.word.load(ordering: .acquiring) == 3 { hits &+= 1 }
      precondition(hits == iterations)
    }),
    ("Sync.Once", { iterations in
      for _ in 0..<iterations { once.run { counter += 1 } }
    }),
    ("Sync.Lazy.value", { iterations in
      var sum = 0
      for _ in 0..<iterations { sum &+= lazy.value }
      precondition(sum == 42 &* iterations)
    }),
    ("pthread_once", { iterations in
      for _ in 0..<iterations { precondition(pthread_once(control, {}) == 0) }
    }),
  ])
  precondition(counter == 1)
}

private final class AtomicHolder: Sendable {
  let word = Synchronization.Atomic<UInt32>(3)
}

@inline(never)
private func sync2Opaque<T>(_ value: T) -> T { value }

// MARK: - synchronized.uncontended

/// One operation = enter and leave an uncontended critical section that increments a
/// counter.
private func registerSynchronizedUncontended(_ harness: Harness) {
  let id = "synchronized.uncontended"
  let group = "Object-keyed critical section, uncontended"
  let operations = 1_000_000

  final class Account { var balance = 0 }
  let account = Account()

  let mutex = Sync.Mutex()
  let recursive = RecursiveMutex()
  let lock = NSRecursiveLock()

  harness.measureInterleaved(id: id, group: group, operations: operations, [
    ("Sync.synchronized(obj)", { iterations in
      for _ in 0..<iterations { synchronized(account) { account.balance &+= 1 } }
    }),
    ("Sync.Mutex.withLock", { iterations in
      for _ in 0..<iterations { mutex.withLock { account.balance &+= 1 } }
    }),
    ("Sync.RecursiveMutex.withLock", { iterations in
      for _ in 0..<iterations { recursive.withLock { account.balance &+= 1 } }
    }),
    ("Foundation.NSRecursiveLock", { iterations in
      for _ in 0..<iterations {
        lock.lock()
        account.balance &+= 1
        lock.unlock()
      }
    }),
  ])
}
