/// Why a ``SharedMemoryLock`` (or a ``SharedMemoryCondition`` wait on one) could not be
/// acquired.
///
/// ```swift
/// do throws(SharedMemoryLockError) {
///     let acquisition = try lock.lock()
///     ...
/// } catch .notRecoverable {
///     // an earlier owner died and its successor gave up on the data: re-create the
///     // shared state (a new region, a new lock) and tell the other processes
/// } catch {
///     print(error)
/// }
/// ```
public enum SharedMemoryLockError: Error, Hashable, Sendable, CustomStringConvertible {
  /// The lock is permanently unusable: a holder died, and the thread that acquired it next
  /// unlocked it without calling ``SharedMemoryLock/markConsistent()`` (it could not repair
  /// the data). Every acquisition in every process fails this way from then on; the lock was
  /// not acquired. The corresponding C error is `ENOTRECOVERABLE`.
  case notRecoverable

  /// A pthread call failed for a reason the environment caused. The lock was not acquired.
  case system(SystemCallError)

  /// The failed call for ``system(_:)``, `nil` for ``notRecoverable``.
  public var systemError: SystemCallError? {
    if case .system(let error) = self { return error }
    return nil
  }

  /// `"the shared-memory lock is not recoverable: ..."`, or the failed call's description.
  public var description: String {
    switch self {
    case .notRecoverable:
      return
        "the shared-memory lock is not recoverable: a holder died and its successor unlocked it without markConsistent()"
    case .system(let error): return error.description
    }
  }
}
