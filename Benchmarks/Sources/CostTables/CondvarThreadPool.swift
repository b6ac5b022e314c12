// A peer for the ThreadPool rows with the same shape as the toolkit's pool: dedicated
// threads that take closures from a queue guarded by a pthread mutex and sleep on a
// pthread condition variable when it is empty (the design of SwiftNIO's `NIOThreadPool`
// and of most hand-written pools). Dispatch's global queue is the other peer, but on Linux
// the tasks' own threads are Dispatch's, so its block often runs on the thread the awaiting
// task has just left: it measures no hand-off between threads at all. This peer, like the
// toolkit's pool, always crosses to one of its own threads and back.

#if canImport(Glibc)
  import Glibc
#endif

/// A fixed pool of dedicated pthreads fed through a mutex, a condition variable and an array.
final class CondvarThreadPool: @unchecked Sendable {
  // @unchecked: `queue` and `isStopping` are only touched with `mutex` held.
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
  private var queue: [() -> Void] = []
  private var head = 0
  private var isStopping = false
  private var threads: [pthread_t] = []

  /// Starts `threadCount` threads, each waiting for work.
  init(threadCount: Int) {
    precondition(pthread_mutex_init(mutex, nil) == 0, "pthread_mutex_init failed")
    precondition(pthread_cond_init(condition, nil) == 0, "pthread_cond_init failed")
    for _ in 0..<threadCount {
      var thread = pthread_t()
      let context = Unmanaged.passRetained(self).toOpaque()
      let result = pthread_create(
        &thread, nil,
        { context in
          let pool = Unmanaged<CondvarThreadPool>.fromOpaque(context!).takeRetainedValue()
          pool.workerLoop()
          return nil
        }, context)
      precondition(result == 0, "pthread_create failed: \(result)")
      threads.append(thread)
    }
  }

  /// Queues `job` and wakes one waiting thread.
  func submit(_ job: @escaping () -> Void) {
    precondition(pthread_mutex_lock(mutex) == 0)
    queue.append(job)
    precondition(pthread_cond_signal(condition) == 0)
    precondition(pthread_mutex_unlock(mutex) == 0)
  }

  private func workerLoop() {
    while true {
      precondition(pthread_mutex_lock(mutex) == 0)
      while head == queue.count && !isStopping { precondition(pthread_cond_wait(condition, mutex) == 0) }
      if head == queue.count {
        precondition(pthread_mutex_unlock(mutex) == 0)
        return
      }
      let job = queue[head]
      head += 1
      if head == queue.count {
        queue.removeAll(keepingCapacity: true)
        head = 0
      }
      precondition(pthread_mutex_unlock(mutex) == 0)
      job()
    }
  }

  /// Lets the threads finish the queued work, then joins them.
  func shutdown() {
    precondition(pthread_mutex_lock(mutex) == 0)
    isStopping = true
    precondition(pthread_cond_broadcast(condition) == 0)
    precondition(pthread_mutex_unlock(mutex) == 0)
    for thread in threads { precondition(pthread_join(thread, nil) == 0) }
    threads.removeAll()
  }

  deinit {
    pthread_cond_destroy(condition)
    pthread_mutex_destroy(mutex)
    condition.deallocate()
    mutex.deallocate()
  }
}
