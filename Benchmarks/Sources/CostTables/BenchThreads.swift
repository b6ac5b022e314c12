// Raw pthread helpers for benchmarks: start N threads behind a common start gate, time the
// work from the gate opening until the last thread is joined. Independent of the Threads
// module so a slow or broken Threads cannot distort the lock figures.

import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// Heap box that carries a closure into a pthread entry routine.
private final class ThreadEntry {
  let body: () -> Void
  init(_ body: @escaping () -> Void) { self.body = body }
}

enum BenchThreads {
  /// Starts a pthread running `body`; returns its handle for `join`.
  static func start(_ body: @escaping @Sendable () -> Void) -> pthread_t {
    var thread = pthread_t()
    let context = Unmanaged.passRetained(ThreadEntry(body)).toOpaque()
    let result = pthread_create(
      &thread, nil,
      { raw in
        let entry = Unmanaged<ThreadEntry>.fromOpaque(raw!).takeRetainedValue()
        entry.body()
        return nil
      }, context)
    if result != 0 {
      fatalError("cost-tables: pthread_create failed with errno \(result)")
    }
    return thread
  }

  /// Waits for `thread` to end.
  static func join(_ thread: pthread_t) {
    let result = pthread_join(thread, nil)
    if result != 0 {
      fatalError("cost-tables: pthread_join failed with errno \(result)")
    }
  }

  /// glibc's locks skip their atomic instructions until a process has started a second
  /// thread. Start and join one so every uncontended figure is a multithreaded one.
  static func makeProcessMultithreaded() {
    join(start {})
  }

  /// Runs `body(threadIndex)` on `count` new threads that all start together, and returns
  /// the nanoseconds from the start gate opening until the last thread has been joined
  /// (thread creation is outside the timed span, joining inside).
  static func timedRun(count: Int, _ body: @escaping @Sendable (Int) -> Void) -> UInt64 {
    let ready = AtomicInteger<Int>(0)
    let gate = AtomicInteger<Int>(0)
    var threads: [pthread_t] = []
    threads.reserveCapacity(count)
    for index in 0..<count {
      threads.append(
        start {
          _ = ready.add(1, ordering: .full)
          while gate.load(ordering: .acquiring) == 0 { sched_yield() }
          body(index)
        })
    }
    while ready.load(ordering: .acquiring) < count { sched_yield() }
    let start = Harness.now()
    gate.store(1, ordering: .releasing)
    for thread in threads { join(thread) }
    return Harness.now() - start
  }
}

/// Keeps a value alive and observable so the optimiser cannot delete the loop producing it.
@inline(never)
@_optimize(none)
func opaqueSink<T>(_ value: T) {}
