/// A failure the environment caused: a pthread function or system call returned an error.
///
/// Every pthread and syscall result in the toolkit is checked. When the cause lies outside
/// the program (no memory, too many threads, no permission for a real-time priority, a peer
/// that went away), the operation throws a `SystemCallError` naming the call that failed and
/// the ``code`` it reported. Programming errors (unlocking a lock you do not hold, joining a
/// thread twice) are not thrown: they stop the process with a message that names the misuse.
/// A failure that no call reported has its own error type instead (a thread configuration
/// out of range is the Threads module's `ThreadConfigurationError`, a lock broken by another
/// process is ``ProcessLockError/notOwner``); those types wrap a `SystemCallError` in a
/// `.system` case for the failures that are calls'.
///
/// ```swift
/// do {
///     let lock = try ProcessLock(path: "/var/lock/myapp.lock")
///     _ = try lock.tryLock()
/// } catch let error where error.code == .readOnlyFileSystem {
///     // the lock's directory is on a read-only file system
/// }
/// ```
public struct SystemCallError: Error, Hashable, Sendable, CustomStringConvertible {
  /// The C function or system call that failed, for example `"pthread_create"`.
  public let call: String

  /// The error code the call reported (``SystemErrorCode/tryAgain``,
  /// ``SystemErrorCode/noMemory``, ...).
  public let code: SystemErrorCode

  /// Creates an error for `call` failing with `code`.
  public init(call: String, code: SystemErrorCode) {
    self.call = call
    self.code = code
  }

  /// Creates an error for `call` failing with the C error number `errno`.
  @available(*, deprecated, renamed: "init(call:code:)")
  public init(call: String, errno: Int32) {
    self.init(call: call, code: SystemErrorCode(rawValue: errno))
  }

  /// The C error number the call reported: `code.rawValue`.
  @available(*, deprecated, message: "use code, a SystemErrorCode (code.rawValue is the number)")
  public var errno: Int32 { code.rawValue }

  /// The C name of the error number (`"EAGAIN"`), or `"errno N"` for a number the toolkit
  /// does not name.
  @available(*, deprecated, message: "use code.name or code.description")
  public var errnoName: String { code.name ?? "errno \(code.rawValue)" }

  /// `"<call> failed: <C name> (<message>)"`, for example
  /// `"pthread_create failed: EAGAIN (Resource temporarily unavailable)"`.
  public var description: String {
    "\(call) failed: \(code)"
  }
}
