import Sync

/// The states of a `JoinableThread` handle.
enum JoinState {
  static let joinable: UInt32 = 0
  static let joined: UInt32 = 1
  static let detached: UInt32 = 2
}

/// Where a spawned thread leaves its result for the joiner, the handle's join/detach state,
/// and the reporting of an error once the handle has been detached.
@usableFromInline
final class JoinOutcome<Value: Sendable, Failure: Error>: @unchecked Sendable {
  // @unchecked: `result` and `state` are only touched with the word lock held.

  /// [0] the `WordLock`, [1] unused: one allocation.
  private let lockWord: UnsafeMutablePointer<UInt32>
  private var result: Result<Value, Failure>?
  private var state = JoinState.joinable

  @usableFromInline
  init() {
    lockWord = .allocate(capacity: 2)
    lockWord.initialize(repeating: 0, count: 2)
  }

  deinit {
    lockWord.deallocate()
  }

  /// Called on the spawned thread when its body returns or throws.
  @usableFromInline
  func complete(_ outcome: Result<Value, Failure>) {
    let report: Bool = WordLock.withLock(lockWord) {
      if state == JoinState.detached { return true }
      result = outcome
      return false
    }
    if report, case .failure(let error) = outcome {
      DetachedErrors.report(error, from: Thread.current)
    }
  }

  /// Moves joinable -> joined; returns the previous state (the caller reports misuse).
  func beginJoin() -> UInt32 {
    WordLock.withLock(lockWord) {
      let previous = state
      if previous == JoinState.joinable { state = JoinState.joined }
      return previous
    }
  }

  /// Called by the joiner after `pthread_join` returned (the result is there).
  func take() -> Result<Value, Failure> {
    let taken = WordLock.withLock(lockWord) { () -> Result<Value, Failure>? in
      defer { result = nil }
      return result
    }
    guard let taken else { fatalError("JoinableThread internal error: joined thread left no result") }
    return taken
  }

  /// Moves joinable -> detached and reports an error already stored; returns the previous
  /// state (nothing changes unless it was joinable).
  func detach(thread: Thread) -> UInt32 {
    let (previous, stored) = WordLock.withLock(lockWord) { () -> (UInt32, Result<Value, Failure>?) in
      let previous = state
      guard previous == JoinState.joinable else { return (previous, nil) }
      state = JoinState.detached
      defer { result = nil }
      return (previous, result)
    }
    if case .failure(let error) = stored {
      DetachedErrors.report(error, from: thread)
    }
    return previous
  }
}
