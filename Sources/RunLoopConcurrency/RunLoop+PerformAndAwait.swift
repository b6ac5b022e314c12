import RunLoop
import Sync
import Threads

/// Why `RunLoop.performAndAwait(inModes:_:)` returned no value.
public enum AwaitedPerformError<Failure: Error>: Error, CustomStringConvertible {
  /// The block ran and threw this error (its type preserved).
  case failed(Failure)
  /// The awaiting task was cancelled before the block started: it never runs (the role of
  /// `CancellationError`).
  case cancelled
  /// The run loop's thread ended before running the block: it never runs.
  case targetExited

  /// The block's error for ``failed(_:)``, `nil` for the other outcomes (as
  /// `ThreadPoolError.failure`).
  public var failure: Failure? {
    if case .failed(let error) = self { return error }
    return nil
  }

  /// A `CancellationError` for ``cancelled``, `nil` otherwise: lets code that tests for
  /// Swift's cancellation error (`catch is CancellationError`) rethrow this cancellation as
  /// that type: `throw error.cancellationError ?? error` (as `ThreadPoolError.cancellationError`).
  public var cancellationError: CancellationError? {
    if case .cancelled = self { return CancellationError() }
    return nil
  }

  /// A sentence for logs.
  public var description: String {
    switch self {
    case .failed(let error): return "the block threw \(error)"
    case .cancelled: return "the awaiting task was cancelled before the block started"
    case .targetExited: return "the run loop's thread ended before running the block"
    }
  }
}

extension RunLoop {
  /// Runs `block` on the loop's thread during a pass in one of `modes` and returns its value
  /// to the awaiting task, which suspends meanwhile (no thread blocks). The block is queued
  /// as ``perform(inModes:_:)`` queues it, and the loop is woken.
  ///
  /// ```swift
  /// let count = try await worker.runLoop.performAndAwait { () throws(DatabaseError) -> Int in
  ///   try database.count()   // on the worker's thread
  /// }
  /// ```
  ///
  /// **Cancellation.** Cancelling the awaiting task before the block has started withdraws
  /// the request: the call throws ``AwaitedPerformError/cancelled`` at once, the block never
  /// runs, and it leaves the loop's queue (released with its captures) at once. Once the block has started, cancellation does not interrupt it: the call returns
  /// its value (check `Task.isCancelled` afterwards if it matters).
  ///
  /// - Throws: ``AwaitedPerformError``: `.failed` with the block's own error,
  ///   `.cancelled` as above, `.targetExited` when the loop's thread ended before running the
  ///   block. A loop that is never run again in one of `modes` leaves the call waiting until
  ///   the task is cancelled.
  public func performAndAwait<Value: Sendable, Failure: Error>(
    inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () throws(Failure) -> Value
  ) async throws(AwaitedPerformError<Failure>) -> Value {
    let request = AwaitedPerform<Value, Failure>()
    let result: Result<Value, AwaitedPerformError<Failure>> = await withTaskCancellationHandler {
      await withUnsafeContinuation { continuation in
        guard request.install(continuation) else { return }
        let token = AwaitedPerform<Value, Failure>.Token(request)
        performAndWakeUp(inModes: modes, request: request) {
          token.request.run(block)
        }
      }
    } onCancel: {
      // Ended before the block started: the queued block can only refuse to run, so it
      // leaves the loop's queue now, releasing the block and its captures, rather than
      // whenever the loop next runs in one of `modes` (maybe never). `request` is alive
      // here, so its identifier names only this request's block.
      if request.cancel() { withdrawQueuedBlock(request: ObjectIdentifier(request)) }
    }
    request.fence.waitForResumer()
    return try result.get()
  }
}

/// One awaited perform request: resumed exactly once, by the block, the cancellation, or the
/// loop dropping the block unrun.
private final class AwaitedPerform<Value: Sendable, Failure: Error>: @unchecked Sendable, WithdrawableRequest {
  // @unchecked: `phase` and `continuation` are protected by `lock`; continuations are
  // resumed after it is released.
  enum Phase {
    case waiting
    case running
    case done
  }

  private let lock = Lock()
  private var phase = Phase.waiting
  private var cancelledEarly = false
  private var continuation: UnsafeContinuation<Result<Value, AwaitedPerformError<Failure>>, Never>?
  /// Under ThreadSanitizer only: orders the resuming thread's `resume` before the task's
  /// next writes (see `ResumerFence`).
  let fence = ResumerFence()

  /// Stores the continuation; resumes it at once (returning false) when the task was
  /// cancelled before, so the block is not queued.
  func install(_ continuation: UnsafeContinuation<Result<Value, AwaitedPerformError<Failure>>, Never>) -> Bool {
    lock.lock()
    if cancelledEarly {
      phase = .done
      lock.unlock()
      continuation.resume(returning: .failure(.cancelled))
      fence.markResumed()
      return false
    }
    self.continuation = continuation
    lock.unlock()
    return true
  }

  /// Whether the request ended before its block started (cancelled), so a queued block
  /// would do nothing: the run loop drops such a block wherever it finds it, also one queued
  /// after the cancellation looked for it in the queue.
  var isWithdrawn: Bool {
    lock.withLock { phase == .done }
  }

  /// On the loop's thread: runs `block` unless the request was cancelled, and resumes.
  func run(_ block: @Sendable () throws(Failure) -> Value) {
    let proceed: Bool = lock.withLock {
      guard phase == .waiting else { return false }
      phase = .running
      return true
    }
    guard proceed else { return }
    let result: Result<Value, AwaitedPerformError<Failure>>
    do throws(Failure) {
      result = .success(try block())
    } catch {
      result = .failure(.failed(error))
    }
    finish(result)
  }

  /// The task was cancelled: resumes with `.cancelled` unless the block has started.
  /// Returns whether a queued block was left with nothing to do (the request ended before
  /// the block started).
  func cancel() -> Bool {
    lock.lock()
    if continuation == nil && phase == .waiting {
      cancelledEarly = true
      lock.unlock()
      return false
    }
    lock.unlock()
    return finish(.failure(.cancelled), unlessStarted: true)
  }

  /// The loop released the block: if it never ran, its thread ended.
  func dropped() {
    finish(.failure(.targetExited), unlessStarted: true)
  }

  /// Resumes the task once with `result`; with `unlessStarted`, only if the block has not
  /// started (checked in the same critical section that ends the request). Returns whether
  /// this call ended the request.
  @discardableResult
  private func finish(_ result: Result<Value, AwaitedPerformError<Failure>>, unlessStarted: Bool = false) -> Bool {
    let taken: UnsafeContinuation<Result<Value, AwaitedPerformError<Failure>>, Never>? = lock.withLock {
      guard phase != .done, !(unlessStarted && phase == .running), let continuation else { return nil }
      phase = .done
      self.continuation = nil
      return continuation
    }
    guard let taken else { return false }
    taken.resume(returning: result)
    fence.markResumed()
    return true
  }

  /// Owned by the queued block alone: its release (after the block ran, or unrun when the
  /// loop's thread ended) tells the request.
  final class Token: Sendable {
    let request: AwaitedPerform
    init(_ request: AwaitedPerform) { self.request = request }
    deinit { request.dropped() }
  }
}
