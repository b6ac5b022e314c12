import Sync

/// The states of a `JoinableThread` handle.
@usableFromInline
enum JoinState {
  @usableFromInline static let joinable: UInt32 = 0
  @usableFromInline static let joined: UInt32 = 1
  @usableFromInline static let detached: UInt32 = 2
}

/// Where a spawned thread leaves its result for the joiner, the handle's join/detach state,
/// and the reporting of an error once the handle has been detached.
///
/// The join path (`complete`, `beginJoin`, `take`) is inlinable so it is specialized for the
/// concrete `Value`/`Failure` in the caller: unspecialized, every access to the stored
/// `Result` looked up generic metadata at run time (visible in profiles of create+join).
@usableFromInline
final class JoinOutcome<Value: Sendable, Failure: Error>: @unchecked Sendable {
  // @unchecked: `result` and `state` are only touched with the word lock held.

  /// [0] the `WordLock`, [1] unused: one allocation.
  @usableFromInline
  let lockWord: UnsafeMutablePointer<UInt32>
  // Guarded by the word lock; see `Thread` for why dynamic exclusivity checks are off.
  @usableFromInline
  @exclusivity(unchecked) var result: Result<Value, Failure>?
  @usableFromInline
  @exclusivity(unchecked) var state = JoinState.joinable

  @usableFromInline
  init() {
    lockWord = .allocate(capacity: 2)
    lockWord.initialize(repeating: 0, count: 2)
  }

  deinit {
    lockWord.deallocate()
  }

  /// Called on the spawned thread when its body returns or throws.
  @inlinable
  func complete(_ outcome: Result<Value, Failure>) {
    WordLock.lock(lockWord)
    let detached = state == JoinState.detached
    if !detached { result = outcome }
    WordLock.unlock(lockWord)
    if detached, case .failure(let error) = outcome {
      DetachedErrors.report(error, from: Thread.current)
    }
  }

  /// Moves joinable -> joined; returns the previous state (the caller reports misuse).
  @inlinable
  func beginJoin() -> UInt32 {
    WordLock.lock(lockWord)
    let previous = state
    if previous == JoinState.joinable { state = JoinState.joined }
    WordLock.unlock(lockWord)
    return previous
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

  /// Moves joinable -> detached and reports an error already stored; returns the previous
  /// state (nothing changes unless it was joinable).
  func detach(thread: Thread) -> UInt32 {
    var stored: Result<Value, Failure>? = nil
    WordLock.lock(lockWord)
    let previous = state
    if previous == JoinState.joinable {
      state = JoinState.detached
      stored = result
      result = nil
    }
    WordLock.unlock(lockWord)
    if case .failure(let error) = stored {
      DetachedErrors.report(error, from: thread)
    }
    return previous
  }
}

/// The internal-error stop for `JoinOutcome.take` (kept out of line).
@usableFromInline
func joinedThreadLeftNoResult() -> Never {
  fatalError("JoinableThread internal error: joined thread left no result")
}
