// Hand-off rows: a round trip between two threads through a condition (two signal-to-wake
// hand-offs) and through a pair of semaphores (ping-pong), each beside its peers (raw
// pthread / POSIX, Foundation, Synchronization), measured in the same run.

import Foundation
import Sync
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Registers the condition hand-off and semaphore ping-pong rows.
func registerHandOffBenchmarks(_ harness: Harness) {
  // glibc takes single-thread shortcuts until the first thread is created; start and join
  // one so every row measures the multi-threaded paths.
  handOffJoin(handOffSpawn {})

  // The two threads of each hand-off on two CPUs, the same for every subject.
  PingPongPlacement.withMainPinned {
    registerConditionHandoff(harness)
    registerSemaphorePingPong(harness)
  }
}

// MARK: - Threads

private final class HandOffThreadBody: @unchecked Sendable {
  let body: @Sendable () -> Void
  init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

private func handOffSpawn(_ body: @escaping @Sendable () -> Void) -> pthread_t {
  var thread = pthread_t()
  let box = Unmanaged.passRetained(HandOffThreadBody(body)).toOpaque()
  let result = pthread_create(
    &thread, nil,
    { raw in
      // Every thread these rows start is the partner side of a ping-pong or hand-off.
      PingPongPlacement.pinPartner()
      Unmanaged<HandOffThreadBody>.fromOpaque(raw!).takeRetainedValue().body()
      return nil
    }, box)
  precondition(result == 0, "pthread_create failed: \(result)")
  return thread
}

private func handOffJoin(_ thread: pthread_t) {
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

  harness.measureInterleaved(
    id: id, group: group, operations: rounds,
    [
      (
        .toolkit("Sync.Condition"),
        { iterations in
          let condition = Sync.Condition()
          let turn = Turn()
          let partner = handOffSpawn {
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
          handOffJoin(partner)
        }
      ),
      (
        .toolkit("Sync.ConditionVariable+Lock"),
        { iterations in
          let mutex = Sync.Lock()
          let condition = ConditionVariable()
          let turn = Turn()
          let partner = handOffSpawn {
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
          handOffJoin(partner)
        }
      ),
      (
        .peer("pthread_cond"),
        { iterations in
          let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
          let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
          precondition(pthread_mutex_init(mutex, nil) == 0)
          precondition(pthread_cond_init(condition, nil) == 0)
          nonisolated(unsafe) let m = mutex
          nonisolated(unsafe) let c = condition
          let turn = Turn()
          let partner = handOffSpawn {
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
          handOffJoin(partner)
          precondition(pthread_cond_destroy(condition) == 0)
          precondition(pthread_mutex_destroy(mutex) == 0)
          condition.deallocate()
          mutex.deallocate()
        }
      ),
      (
        .peer("Foundation.NSCondition"),
        { iterations in
          let condition = NSCondition()
          let c = condition
          let turn = Turn()
          let partner = handOffSpawn {
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
          handOffJoin(partner)
        }
      ),
    ])
}

// MARK: - semaphore.pingpong

/// One operation = one round trip: main signals `ping` and waits on `pong`; the partner
/// waits on `ping` and signals `pong`.
private func registerSemaphorePingPong(_ harness: Harness) {
  let id = "semaphore.pingpong"
  let group = "Semaphores: ping-pong round trip between two threads"
  let rounds = 20_000

  harness.measureInterleaved(
    id: id, group: group, operations: rounds,
    [
      (
        .toolkit("Sync.Semaphore"),
        { iterations in
          let ping = Sync.Semaphore()
          let pong = Sync.Semaphore()
          let partner = handOffSpawn {
            for _ in 0..<iterations {
              ping.wait()
              pong.signal()
            }
          }
          for _ in 0..<iterations {
            ping.signal()
            pong.wait()
          }
          handOffJoin(partner)
        }
      ),
      (
        .peer("POSIX sem_t"),
        { iterations in
          let semaphores = UnsafeMutablePointer<sem_t>.allocate(capacity: 2)
          precondition(sem_init(semaphores, 0, 0) == 0)
          precondition(sem_init(semaphores + 1, 0, 0) == 0)
          nonisolated(unsafe) let ping = semaphores
          nonisolated(unsafe) let pong = semaphores + 1
          let partner = handOffSpawn {
            for _ in 0..<iterations {
              while sem_wait(ping) != 0 { precondition(errno == EINTR) }
              precondition(sem_post(pong) == 0)
            }
          }
          for _ in 0..<iterations {
            precondition(sem_post(ping) == 0)
            while sem_wait(pong) != 0 { precondition(errno == EINTR) }
          }
          handOffJoin(partner)
          precondition(sem_destroy(ping) == 0 && sem_destroy(pong) == 0)
          semaphores.deallocate()
        }
      ),
      (
        .peer("Dispatch.DispatchSemaphore"),
        { iterations in
          let ping = DispatchSemaphore(value: 0)
          let pong = DispatchSemaphore(value: 0)
          let partner = handOffSpawn {
            for _ in 0..<iterations {
              ping.wait()
              pong.signal()
            }
          }
          for _ in 0..<iterations {
            ping.signal()
            pong.wait()
          }
          handOffJoin(partner)
        }
      ),
    ])
}
