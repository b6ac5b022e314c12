// ThreadPool rows: the round trip of an empty job awaited from a task, and the throughput of
// eight tasks submitting small jobs, each beside two peers measured in the same run:
// Dispatch's global queue resumed through a checked continuation (what async code reaches
// for today; on Linux its block often runs on the very thread the awaiting task left, so it
// crosses no thread) and dedicated threads behind a mutex and a condition variable (the
// like-for-like design, which crosses to another thread and back as the toolkit's pool does).
//
// Allocations per job (counted with a malloc-counting preload around 100,000 round trips of
// a warmed-up detached task, not timed): the pool allocates one job record per round trip
// (the continuation lives in the task); a closure that captures values adds its own
// context, allocated by Swift when the escaping closure is formed. The Dispatch peer
// allocates the block and the checked continuation's box.

import Dispatch
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// The like-for-like peer: dedicated threads fed through a mutex and a condition variable
/// (see `CondvarThreadPool`), as many as the CPUs this process may use.
private let condvarPoolSubject = "dedicated threads, pthread mutex + condition (NIOThreadPool's design)"
private let condvarPoolThreads = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))

/// Registers the ThreadPool benchmark rows.
func registerPoolBenchmarks(_ harness: Harness) {
  benchmarkPoolRoundTrip(harness)
  benchmarkPoolThroughput(harness)
}

/// Runs `body` in a detached task (not on the main actor, which the top-level code's tasks
/// would inherit: each await would hop back to it) and blocks the calling (benchmark)
/// thread until it returns its elapsed nanoseconds.
private func timedInTask(_ body: @escaping @Sendable () async -> UInt64) -> UInt64 {
  let done = Semaphore()
  let elapsed = ElapsedBox()
  Task.detached {
    elapsed.value = await body()
    done.signal()
  }
  done.wait()
  return elapsed.value
}

/// The elapsed time a task hands back (written before the semaphore's signal, read after its
/// wait, which orders the two).
private final class ElapsedBox: @unchecked Sendable {
  var value: UInt64 = 0
}

/// A small job: a few hundred nanoseconds of arithmetic, kept from being optimized away.
@inline(never)
private func smallJob(_ seed: Int) -> Int {
  var value = seed
  for _ in 0..<64 { value = value &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407 }
  return value
}

// MARK: Round trip of an empty job

private func benchmarkPoolRoundTrip(_ harness: Harness) {
  let id = "pool.round-trip.empty-job"
  guard harness.wants(id) else { return }
  let pool = ThreadPool(name: "bench-pool")
  let condvarPool = CondvarThreadPool(threadCount: condvarPoolThreads)
  harness.sampleInterleaved(
    id: id, group: "ThreadPool", operations: 20_000,
    [
      (
        subject: .toolkit("ThreadPool.run"),
        body: { n in
          timedInTask {
            let start = Harness.now()
            for _ in 0..<n { try? await pool.run {} }
            return Harness.now() - start
          }
        }
      ),
      (
        subject: .peer("DispatchQueue.global().async + withCheckedContinuation"),
        body: { n in
          timedInTask {
            let start = Harness.now()
            for _ in 0..<n {
              await withCheckedContinuation { continuation in
                DispatchQueue.global().async { continuation.resume() }
              }
            }
            return Harness.now() - start
          }
        }
      ),
      (
        subject: .peer(condvarPoolSubject),
        body: { n in
          timedInTask {
            let start = Harness.now()
            for _ in 0..<n {
              await withCheckedContinuation { continuation in
                condvarPool.submit { continuation.resume() }
              }
            }
            return Harness.now() - start
          }
        }
      ),
    ])
  timedShutdown(pool)
  condvarPool.shutdown()
}

// MARK: Throughput of eight submitting tasks

private func benchmarkPoolThroughput(_ harness: Harness) {
  let id = "pool.throughput.8-tasks-small-jobs"
  guard harness.wants(id) else { return }
  let pool = ThreadPool(name: "bench-pool")
  let condvarPool = CondvarThreadPool(threadCount: condvarPoolThreads)
  let tasks = 8
  harness.sampleInterleaved(
    id: id, group: "ThreadPool", operations: 40_000,
    [
      (
        subject: .toolkit("ThreadPool.run"),
        body: { n in
          timedInTask {
            let start = Harness.now()
            await withTaskGroup(of: Void.self) { group in
              for task in 0..<tasks {
                group.addTask {
                  for index in 0..<(n / tasks) { _ = try? await pool.run { smallJob(task &+ index) } }
                }
              }
            }
            return Harness.now() - start
          }
        }
      ),
      (
        subject: .peer("DispatchQueue.global().async + withCheckedContinuation"),
        body: { n in
          timedInTask {
            let start = Harness.now()
            await withTaskGroup(of: Void.self) { group in
              for task in 0..<tasks {
                group.addTask {
                  for index in 0..<(n / tasks) {
                    _ = await withCheckedContinuation { continuation in
                      DispatchQueue.global().async { continuation.resume(returning: smallJob(task &+ index)) }
                    }
                  }
                }
              }
            }
            return Harness.now() - start
          }
        }
      ),
      (
        subject: .peer(condvarPoolSubject),
        body: { n in
          timedInTask {
            let start = Harness.now()
            await withTaskGroup(of: Void.self) { group in
              for task in 0..<tasks {
                group.addTask {
                  for index in 0..<(n / tasks) {
                    _ = await withCheckedContinuation { continuation in
                      condvarPool.submit { continuation.resume(returning: smallJob(task &+ index)) }
                    }
                  }
                }
              }
            }
            return Harness.now() - start
          }
        }
      ),
    ])
  timedShutdown(pool)
  condvarPool.shutdown()
}

/// Shuts a benchmark pool down from the benchmark thread.
private func timedShutdown(_ pool: ThreadPool) {
  _ = timedInTask {
    await pool.shutDown()
    return 0
  }
}
