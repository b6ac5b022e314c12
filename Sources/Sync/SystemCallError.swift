import CThreadingShims

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A failure the environment caused: a pthread function or system call returned an error.
///
/// Every pthread and syscall result in the toolkit is checked. When the cause lies outside
/// the program (no memory, too many threads, no permission for a real-time priority, a peer
/// that went away), the operation throws a `SystemCallError` naming the call that failed and
/// the `errno` it reported. Programming errors (unlocking a lock you do not hold, joining a
/// thread twice) are not thrown: they stop the process with a message that names the misuse.
///
/// ```swift
/// do {
///     try something()
/// } catch let error as SystemCallError where error.errno == EAGAIN {
///     // the system refused another thread; retry later
/// }
/// ```
public struct SystemCallError: Error, Hashable, Sendable, CustomStringConvertible {
  /// The C function or system call that failed, for example `"pthread_create"`.
  public let call: String

  /// The error number the call reported (`EAGAIN`, `ENOMEM`, `EPERM`, ...).
  public let errno: Int32

  /// Creates an error for `call` failing with `errno`.
  public init(call: String, errno: Int32) {
    self.call = call
    self.errno = errno
  }

  /// The symbolic name of ``errno`` (`"EAGAIN"`), or `"errno N"` for a number the toolkit
  /// does not name.
  public var errnoName: String {
    switch errno {
    case EPERM: return "EPERM"
    case ENOENT: return "ENOENT"
    case ESRCH: return "ESRCH"
    case EINTR: return "EINTR"
    case EIO: return "EIO"
    case EBADF: return "EBADF"
    case EAGAIN: return "EAGAIN"
    case ENOMEM: return "ENOMEM"
    case EACCES: return "EACCES"
    case EFAULT: return "EFAULT"
    case EBUSY: return "EBUSY"
    case EEXIST: return "EEXIST"
    case ENOTDIR: return "ENOTDIR"
    case EISDIR: return "EISDIR"
    case EINVAL: return "EINVAL"
    case EMFILE: return "EMFILE"
    case ENFILE: return "ENFILE"
    case ENOSPC: return "ENOSPC"
    case EROFS: return "EROFS"
    case EPIPE: return "EPIPE"
    case ERANGE: return "ERANGE"
    case EDEADLK: return "EDEADLK"
    case ENAMETOOLONG: return "ENAMETOOLONG"
    case ENOSYS: return "ENOSYS"
    case ETIMEDOUT: return "ETIMEDOUT"
    case ECONNREFUSED: return "ECONNREFUSED"
    case ECONNRESET: return "ECONNRESET"
    case ENOTCONN: return "ENOTCONN"
    case EADDRINUSE: return "EADDRINUSE"
    case EOWNERDEAD: return "EOWNERDEAD"
    default: return "errno \(errno)"
    }
  }

  /// `"<call> failed: <ERRNO> (<message>)"`.
  public var description: String {
    "\(call) failed: \(errnoName) (\(SystemCallError.message(for: errno)))"
  }

  /// The C library's text for an error number, read thread-safely (`strerror_r`).
  static func message(for errno: Int32) -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    return buffer.withUnsafeMutableBufferPointer { buffer -> String in
      // Swift sees the XSI strerror_r, which fills the buffer and returns 0.
      guard strerror_r(errno, buffer.baseAddress!, buffer.count) == 0 else {
        return "unknown error \(errno)"
      }
      return String(cString: buffer.baseAddress!)
    }
  }
}
