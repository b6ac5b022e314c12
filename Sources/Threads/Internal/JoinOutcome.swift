import Sync

/// Where a spawned thread leaves its result for the joiner, whether its handle was detached,
/// and the reporting of an error once it has been.
///
/// The join path (`complete`, `take`) is inlinable so it is specialized for the concrete
/// `Value`/`Failure` in the caller: unspecialized, every access to the stored `Result` would
/// look up generic metadata at run time, on every thread start and join.
///
/// The handle (`JoinableThread`) is noncopyable and consumed by its join or detach, so each
/// outcome sees at most one of `take` and `detach`, never twice.
@usableFromInline
final class JoinOutcome<Value: Sendable, Failure: Error>: @unchecked Sendable {
  // @unchecked: `result` and `isDetached` are only touched with the word lock held.

  /// The `WordLock` guarding `result` and `isDetached`.
  @usableFromInline
  let lockWord: UnsafeMutablePointer<UInt32>
  // Guarded by the word lock; see `Thread` for why dynamic exclusivity checks are off.
  @usableFromInline
  @exclusivity(unchecked) var result: Result<Value, Failure>?
  @usableFromInline
  @exclusivity(unchecked) var isDetached = false

  @usableFromInline
  init() {
    lockWord = .allocate(capacity: 1)
    lockWord.initialize(to: 0)
  }

  deinit {
    lockWord.deallocate()
  }

  /// Called on the spawned thread when its body returns or throws.
  @inlinable
  func complete(_ outcome: Result<Value, Failure>) {
    WordLock.lock(lockWord)
    let detached = isDetached
    if !detached { result = outcome }
    WordLock.unlock(lockWord)
    if detached, case .failure(let error) = outcome {
      DetachedErrors.report(error, from: Thread.current)
    }
  }

  /// Called by the joiner after `pthread_join` returned (the result is there).
  @inlinable
  func take() -> Result<Value, Failure> {
    WordLock.lock(lockWord)
    let taken = result
    result = nil
    WordLock.unlock(lockWord)
    guard let taken else { joinedThreadLeftNoResult() }
    return taken
  }

  /// Marks the outcome detached and reports an error already stored (on the calling thread;
  /// a later one is reported by `complete` on the spawned thread).
  func detach(thread: Thread) {
    WordLock.lock(lockWord)
    isDetached = true
    let stored = result
    result = nil
    WordLock.unlock(lockWord)
    if case .failure(let error) = stored {
      DetachedErrors.report(error, from: thread)
    }
  }
}

/// The internal-error stop for `JoinOutcome.take` (kept out of line).
@usableFromInline
func joinedThreadLeftNoResult() -> Never {
  fatalError("JoinableThread internal error: joined thread left no result")
}
