import Sync

/// Where a spawned thread leaves its result for the joiner, or reports its error once the
/// handle has been detached.
final class JoinOutcome<Value: Sendable, Failure: Error>: @unchecked Sendable {
  // @unchecked: `result` and `detached` are only touched with `lock` held.
  private let lock = Mutex()
  private var result: Result<Value, Failure>?
  private var detached = false

  /// Called on the spawned thread when its body returns or throws.
  func complete(_ outcome: Result<Value, Failure>) {
    let report: Bool = lock.withLock {
      if detached { return true }
      result = outcome
      return false
    }
    if report, case .failure(let error) = outcome {
      DetachedErrors.report(error, from: Thread.current)
    }
  }

  /// Called by the joiner after `pthread_join` returned (the result is there).
  func take() -> Result<Value, Failure> {
    let taken = lock.withLock { () -> Result<Value, Failure>? in
      defer { result = nil }
      return result
    }
    guard let taken else { fatalError("JoinableThread internal error: joined thread left no result") }
    return taken
  }

  /// Marks the outcome detached; an error already stored is reported now.
  func detach(thread: Thread) {
    let stored = lock.withLock { () -> Result<Value, Failure>? in
      detached = true
      defer { result = nil }
      return result
    }
    if case .failure(let error) = stored {
      DetachedErrors.report(error, from: thread)
    }
  }
}
