/// Why a ``ProcessLock`` call that reads the lock file failed (``ProcessLock/unlock()``,
/// ``ProcessLock/owner()``, ``ProcessLock/tryLockBreakingStaleLock()``, ...): the lock was no
/// longer this object's, the name is not a lock file, or a file-system call failed.
///
/// ```swift
/// do throws(ProcessLockError) {
///     try lock.unlock()
/// } catch .notOwner {
///     // another process broke the lock while we held it: the work just done may have
///     // overlapped with someone else's
/// } catch {
///     print(error)
/// }
/// ```
public enum ProcessLockError: Error, Hashable, Sendable, CustomStringConvertible {
  /// The lock file is not this object's any more: another process broke the lock
  /// (``ProcessLock/breakLock()``) while this object held it, and the file is now gone or
  /// records another owner. The file was left alone and this object no longer holds the
  /// lock; the critical section it protected may not have been exclusive.
  case notOwner

  /// Something other than a regular file is at the lock's path (a FIFO, a symlink, a
  /// directory, ...): not a lock file, and never opened for reading nor followed. Remove it
  /// by hand (or with ``ProcessLock/breakLock()``) once you know what put it there.
  case notARegularFile(path: String)

  /// A file-system call failed (reading the lock file, or removing it). This object no
  /// longer holds the lock; the lock file may still be there (``ProcessLock/owner()`` tells).
  case system(SystemCallError)

  /// The failed call for ``system(_:)``, `nil` otherwise.
  public var systemError: SystemCallError? {
    if case .system(let error) = self { return error }
    return nil
  }

  /// `"the process lock was broken by another process: this object no longer owns it"`, or
  /// the failed call's description.
  public var description: String {
    switch self {
    case .notOwner: return "the process lock was broken by another process: this object no longer owns it"
    case .notARegularFile(let path): return "\(path) is not a regular file, so not a process lock's file"
    case .system(let error): return error.description
    }
  }
}
