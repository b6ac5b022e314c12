#if canImport(Glibc)
  import Glibc
#endif

/// The error number a failed system call or pthread function reported, with a name for each
/// code the toolkit can report.
///
/// Match a code without importing Glibc:
///
/// ```swift
/// do {
///     let lock = try ProcessLock(path: "/var/lock/myapp.lock")
///     _ = try lock.tryLock()
/// } catch let error where error.code == .permissionDenied {
///     // the directory is not writable by this process
/// }
/// ```
///
/// Each named member's documentation starts with its C name. A code without a named member
/// (the kernel reports more than the toolkit names) is still carried exactly:
/// `SystemErrorCode(rawValue:)` accepts any number, and ``description`` shows it.
public struct SystemErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
  /// The C error number (`errno`'s value).
  public let rawValue: Int32

  /// The code for the C error number `rawValue`.
  public init(rawValue: Int32) {
    self.rawValue = rawValue
  }

  /// `EPERM`: Operation not permitted: the caller lacks the privilege (for example a real-time priority without `CAP_SYS_NICE`), or a lock is released by a process that does not hold it.
  public static let operationNotPermitted = SystemErrorCode(rawValue: EPERM)

  /// `ENOENT`: No such file or directory.
  public static let noSuchFileOrDirectory = SystemErrorCode(rawValue: ENOENT)

  /// `ESRCH`: No such process or thread.
  public static let noSuchProcess = SystemErrorCode(rawValue: ESRCH)

  /// `EINTR`: A signal interrupted the call. The toolkit retries the calls for which a retry is safe, so it rarely reports this.
  public static let interrupted = SystemErrorCode(rawValue: EINTR)

  /// `EIO`: A low-level input/output error.
  public static let ioError = SystemErrorCode(rawValue: EIO)

  /// `EBADF`: The descriptor is not open (or not open for this operation).
  public static let badFileDescriptor = SystemErrorCode(rawValue: EBADF)

  /// `EAGAIN`: The resource is temporarily unavailable: the system refused another thread, or a non-blocking operation would have to wait. On Linux `EWOULDBLOCK` is the same number, see ``wouldBlock``.
  public static let tryAgain = SystemErrorCode(rawValue: EAGAIN)

  /// `EWOULDBLOCK`: a non-blocking operation would have to wait (or another process
  /// holds a `flock`). The same number as `EAGAIN` on Linux, so it equals ``tryAgain``.
  public static let wouldBlock = SystemErrorCode(rawValue: EWOULDBLOCK)

  /// `ENOMEM`: Not enough memory (or too many mappings) to complete the call.
  public static let noMemory = SystemErrorCode(rawValue: ENOMEM)

  /// `EACCES`: Permission denied by the file system or by the system's policy.
  public static let permissionDenied = SystemErrorCode(rawValue: EACCES)

  /// `EFAULT`: An address passed to the call is outside the process's memory.
  public static let badAddress = SystemErrorCode(rawValue: EFAULT)

  /// `EBUSY`: The resource is busy.
  public static let resourceBusy = SystemErrorCode(rawValue: EBUSY)

  /// `EEXIST`: The file exists.
  public static let fileExists = SystemErrorCode(rawValue: EEXIST)

  /// `ENOTDIR`: A component of the path is not a directory.
  public static let notDirectory = SystemErrorCode(rawValue: ENOTDIR)

  /// `EISDIR`: The path names a directory.
  public static let isDirectory = SystemErrorCode(rawValue: EISDIR)

  /// `EINVAL`: An argument is invalid (for example a stack size the system does not accept).
  public static let invalidArgument = SystemErrorCode(rawValue: EINVAL)

  /// `ENFILE`: The system-wide limit on open files is reached.
  public static let tooManyOpenFilesInSystem = SystemErrorCode(rawValue: ENFILE)

  /// `EMFILE`: The process's limit on open descriptors (`RLIMIT_NOFILE`) is reached.
  public static let tooManyOpenFiles = SystemErrorCode(rawValue: EMFILE)

  /// `ENOSPC`: No space left on the device.
  public static let noSpace = SystemErrorCode(rawValue: ENOSPC)

  /// `EROFS`: The file system is read-only.
  public static let readOnlyFileSystem = SystemErrorCode(rawValue: EROFS)

  /// `EPIPE`: The peer closed its end of the pipe or socket.
  public static let brokenPipe = SystemErrorCode(rawValue: EPIPE)

  /// `ERANGE`: A result does not fit its buffer or type.
  public static let outOfRange = SystemErrorCode(rawValue: ERANGE)

  /// `EDEADLK`: The operation would deadlock.
  public static let deadlock = SystemErrorCode(rawValue: EDEADLK)

  /// `ENAMETOOLONG`: The path (or a Unix-domain socket path) is too long.
  public static let fileNameTooLong = SystemErrorCode(rawValue: ENAMETOOLONG)

  /// `ENOSYS`: The kernel does not implement the call.
  public static let notImplemented = SystemErrorCode(rawValue: ENOSYS)

  /// `ETIMEDOUT`: The operation timed out.
  public static let timedOut = SystemErrorCode(rawValue: ETIMEDOUT)

  /// `ECONNREFUSED`: Nobody listens at the address.
  public static let connectionRefused = SystemErrorCode(rawValue: ECONNREFUSED)

  /// `ECONNRESET`: The peer reset the connection.
  public static let connectionReset = SystemErrorCode(rawValue: ECONNRESET)

  /// `ENOTCONN`: The socket is not connected.
  public static let socketNotConnected = SystemErrorCode(rawValue: ENOTCONN)

  /// `EADDRINUSE`: The address is already in use.
  public static let addressInUse = SystemErrorCode(rawValue: EADDRINUSE)

  /// `EMSGSIZE`: The message is too long for the transport.
  public static let messageTooLong = SystemErrorCode(rawValue: EMSGSIZE)

  /// `EPROTO`: The peer or the kernel broke the protocol.
  public static let protocolError = SystemErrorCode(rawValue: EPROTO)

  /// `EINPROGRESS`: A non-blocking operation has started and not finished yet.
  public static let inProgress = SystemErrorCode(rawValue: EINPROGRESS)

  /// `EOWNERDEAD`: The previous owner of a robust lock died while holding it.
  public static let previousOwnerDied = SystemErrorCode(rawValue: EOWNERDEAD)

  /// The C name of the code (`"EAGAIN"`), or nil for a number the toolkit does not name.
  /// `EWOULDBLOCK` has the number of `EAGAIN` on Linux and is named `"EAGAIN"`.
  public var name: String? {
    switch rawValue {
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
    case ENFILE: return "ENFILE"
    case EMFILE: return "EMFILE"
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
    case EMSGSIZE: return "EMSGSIZE"
    case EPROTO: return "EPROTO"
    case EINPROGRESS: return "EINPROGRESS"
    case EOWNERDEAD: return "EOWNERDEAD"
    default: return nil
    }
  }

  /// The C library's text for the code (`strerror_r`), for example
  /// `"Resource temporarily unavailable"`, and `"Unknown error N"` for a number the C
  /// library does not know.
  public var message: String {
    var buffer = [CChar](repeating: 0, count: 256)
    return buffer.withUnsafeMutableBufferPointer { buffer -> String in
      // Swift sees the XSI strerror_r, which fills the buffer and returns 0; for a number
      // it does not know, glibc still writes "Unknown error N" but returns EINVAL. Its text
      // is used whenever it wrote one.
      let result = strerror_r(rawValue, buffer.baseAddress!, buffer.count)
      guard result == 0 || buffer[0] != 0 else {
        return "Unknown error \(rawValue)"
      }
      return String(cString: buffer.baseAddress!)
    }
  }

  /// The C name and the C library's text: `"EAGAIN (Resource temporarily unavailable)"`;
  /// `"errno 9999 (Unknown error 9999)"` for a number without a name.
  public var description: String {
    "\(name ?? "errno \(rawValue)") (\(message))"
  }
}
