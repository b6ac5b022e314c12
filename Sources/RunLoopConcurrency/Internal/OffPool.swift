import Threads

/// Runs `body`, which blocks, on a short-lived helper thread named `name` and resumes the
/// awaiting task when it returns, so no cooperative thread blocks. When the system refuses
/// the helper thread (`EAGAIN`), `body` runs on the calling thread instead: correct, but that
/// thread blocks meanwhile.
func runOffPool(name: String, _ body: @escaping @Sendable () -> Void) async {
  // Under ThreadSanitizer only: orders the helper's `resume` before the task's next writes.
  let fence = ResumerFence()
  await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
    do throws(ThreadStartError) {
      _ = try Thread.detach(name: name) {
        body()
        continuation.resume()
        fence.markResumed()
      }
    } catch {
      body()
      continuation.resume()
      fence.markResumed()
    }
  }
  fence.waitForResumer()
}
