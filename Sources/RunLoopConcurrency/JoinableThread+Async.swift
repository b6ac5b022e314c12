import Sync
import Threads

extension JoinableThread {
  /// Waits for the thread's body to finish without blocking the calling task's thread, and
  /// returns its value or rethrows its error. Consumes the handle (the thread is joined).
  ///
  /// ```swift
  /// let parser = try Thread.spawn(name: "parser") { () throws(ParseError) -> Document in
  ///   try parse(data)
  /// }
  /// let document = try await parser.value()   // rethrows ParseError
  /// ```
  ///
  /// The join happens on a short-lived helper thread (named "join-helper", default
  /// configuration) that resumes the awaiting task once the thread has ended, so no
  /// cooperative thread blocks. Returns after the thread's body and its exit handlers have
  /// run, as ``/Threads/JoinableThread/join()`` does. When the system refuses the helper
  /// thread (`EAGAIN`), the join happens on the calling thread instead: correct, but that
  /// thread blocks until the joined one ends.
  ///
  /// **Cancellation** of the awaiting task does not end the wait, and does not touch the
  /// thread, as with `Task.value`: the thread runs on, and the call returns its result when
  /// it ends. To ask the thread to stop when the task is cancelled, keep its object and
  /// request an exit in a cancellation handler (the body checks
  /// ``/Threads/Thread/isExitRequested``):
  ///
  /// ```swift
  /// let thread = worker.thread
  /// var handle = Optional(consume worker)  // the operation closure may not consume a capture
  /// let result = try await withTaskCancellationHandler {
  ///   try await handle.take()!.value()
  /// } onCancel: {
  ///   thread.requestExit()
  /// }
  /// ```
  public consuming func value() async throws(Failure) -> Value {
    let slot = JoinSlot(self)
    // Under ThreadSanitizer only: orders the helper's `resume` before the task's next writes.
    let fence = ResumerFence()
    let result: Result<Value, Failure> = await withUnsafeContinuation { continuation in
      do throws(ThreadStartError) {
        try Thread.detach(name: "join-helper") {
          continuation.resume(returning: slot.join())
          fence.markResumed()
        }
      } catch {
        // No helper thread: join here (blocking this thread) rather than never resuming.
        continuation.resume(returning: slot.join())
        fence.markResumed()
      }
    }
    fence.waitForResumer()
    return try result.get()
  }
}

/// Carries the noncopyable handle to the thread that joins it.
private final class JoinSlot<Value: Sendable, Failure: Error>: @unchecked Sendable {
  // @unchecked: `handle` is taken once, by the one thread that joins (the helper, or the
  // caller when no helper could be started); the helper's start orders it after `init`.
  private var handle: JoinableThread<Value, Failure>?

  init(_ handle: consuming JoinableThread<Value, Failure>) {
    self.handle = consume handle
  }

  /// Joins the thread (blocking) and returns its outcome.
  func join() -> Result<Value, Failure> {
    guard let handle = handle.take() else {
      preconditionFailure("JoinableThread.value: the handle was joined twice")
    }
    do throws(Failure) {
      return .success(try handle.join())
    } catch {
      return .failure(error)
    }
  }
}
