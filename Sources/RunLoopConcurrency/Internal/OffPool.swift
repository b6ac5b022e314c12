import Threads

/// Runs `body`, which blocks, on a short-lived helper thread named `name` and resumes the
/// awaiting task when it returns, so no cooperative thread blocks. When the system refuses
/// the helper thread (`EAGAIN`), `body` runs on the calling thread instead: correct, but that
/// thread blocks meanwhile.
func runOffPool(name: String, _ body: @escaping @Sendable () -> Void) async {
  let request = OffPoolRequest()
  await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
    do throws(ThreadStartError) {
      _ = try Thread.detach(name: name) {
        body()
        continuation.resume()
        request.fence.markResumed(request)
      }
    } catch {
      body()
      continuation.resume()
      request.fence.markResumed(request)
    }
  }
  request.fence.waitForResumer(request)
}

/// One off-pool call, kept alive by the helper thread's closure until it has marked the
/// resume: under ThreadSanitizer only, its fence orders the helper's `resume` before the
/// task's next writes (see `ResumerFence`).
private final class OffPoolRequest: Sendable {
  let fence = ResumerFence()
}
