import Sync
import Threads

/// Runs `body`, which blocks, on a short-lived helper thread named `name` and resumes the
/// awaiting task when it returns, so no cooperative thread blocks. When the system refuses
/// the helper thread (`EAGAIN`), `body` runs in a task on the global concurrent executor
/// instead, blocking one of its threads meanwhile; never on the calling thread, which may be
/// the thread `body` waits for: a run loop's thread awaiting that loop's executor's
/// `shutDown()` (a ``RunLoopThreadGroup`` task, or an actor on another executor of the same
/// loop), where the shutdown's check could never run.
func runOffPool(name: String, _ body: @escaping @Sendable () -> Void) async {
  // Under ThreadSanitizer only: orders the helper's `resume` before the task's next writes.
  let fence = ResumerFence()
  let refused = OffPoolTesting.refusesHelperThreads
  await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
    do throws(ThreadStartError) {
      if refused {
        throw .system(SystemCallError(call: "pthread_create", code: .tryAgain))
      }
      _ = try Thread.detach(name: name) {
        body()
        continuation.resume()
        fence.markResumed()
      }
    } catch {
      // The calling task suspends meanwhile, so its thread is free for what `body` waits for.
      Task.detached {
        body()
        continuation.resume()
        fence.markResumed()
      }
    }
  }
  fence.waitForResumer()
}

/// Test seam for ``runOffPool(name:_:)``.
enum OffPoolTesting {
  /// While bound to true (in a test's task), `runOffPool` acts as if the system refused its
  /// helper thread. False outside tests.
  @TaskLocal static var refusesHelperThreads = false
}
