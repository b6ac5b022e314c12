#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The file-system and process calls ``ProcessLock`` makes, each turning the C error
/// convention into a thrown ``SystemCallError`` and retrying `EINTR` where that is safe.
enum FileCalls {
  /// `EPERM`, for errors the lock reports itself.
  static let operationNotPermitted = EPERM

  /// Creates `path` exclusively (fails with EEXIST if it exists), writes `contents`, and
  /// closes it. On a failure after creation the file is removed again.
  static func createExclusive(_ path: String, contents: String) throws(SystemCallError) {
    let fd = path.withCString { open($0, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644) }
    if fd < 0 { throw SystemCallError(call: "open", errno: errno) }
    var failure: SystemCallError?
    var bytes = Array(contents.utf8)
    var offset = 0
    while offset < bytes.count {
      let written = bytes.withUnsafeMutableBytes { buffer in
        write(fd, buffer.baseAddress! + offset, buffer.count - offset)
      }
      if written < 0 {
        if errno == EINTR { continue }
        failure = SystemCallError(call: "write", errno: errno)
        break
      }
      offset += written
    }
    bytes.removeAll()
    // close is not retried on EINTR: on Linux the descriptor is gone either way.
    if close(fd) != 0, failure == nil {
      failure = SystemCallError(call: "close", errno: errno)
    }
    if let failure {
      _ = try? unlink(path)
      throw failure
    }
  }

  /// `link(existing, new)`; returns false for EEXIST (the new name is taken).
  static func link(_ existing: String, _ new: String) throws(SystemCallError) -> Bool {
    let result = existing.withCString { from in new.withCString { to in Glibc.link(from, to) } }
    if result == 0 { return true }
    if errno == EEXIST { return false }
    throw SystemCallError(call: "link", errno: errno)
  }

  /// How many names `path` has (`stat`'s `st_nlink`).
  static func linkCount(_ path: String) throws(SystemCallError) -> UInt {
    var info = stat()
    if path.withCString({ stat($0, &info) }) != 0 { throw SystemCallError(call: "stat", errno: errno) }
    return UInt(info.st_nlink)
  }

  /// `unlink(path)`; returns false for ENOENT (nothing there).
  @discardableResult
  static func unlink(_ path: String) throws(SystemCallError) -> Bool {
    if path.withCString({ Glibc.unlink($0) }) == 0 { return true }
    if errno == ENOENT { return false }
    throw SystemCallError(call: "unlink", errno: errno)
  }

  /// The first 4 KiB of `path` as text, or nil if it does not exist.
  static func read(_ path: String) throws(SystemCallError) -> String? {
    let fd = path.withCString { open($0, O_RDONLY | O_CLOEXEC) }
    if fd < 0 {
      if errno == ENOENT { return nil }
      throw SystemCallError(call: "open", errno: errno)
    }
    defer { _ = close(fd) }  // read-only descriptor: a close error loses nothing
    var buffer = [UInt8](repeating: 0, count: 4096)
    var total = 0
    while total < buffer.count {
      let count = buffer.withUnsafeMutableBytes { raw in
        Glibc.read(fd, raw.baseAddress! + total, raw.count - total)
      }
      if count < 0 {
        if errno == EINTR { continue }
        throw SystemCallError(call: "read", errno: errno)
      }
      if count == 0 { break }
      total += count
    }
    return String(decoding: buffer[0..<total], as: UTF8.self)
  }

  /// Throws unless `directory` exists, is a directory, and the caller may create files in
  /// it (`access(W_OK | X_OK)`; ENOENT, ENOTDIR, EACCES or EROFS).
  static func checkWritableDirectory(_ directory: String) throws(SystemCallError) {
    let exists = directory.withCString { access($0, F_OK) }
    if exists != 0 { throw SystemCallError(call: "access", errno: errno) }
    var info = stat()
    if directory.withCString({ stat($0, &info) }) != 0 {
      throw SystemCallError(call: "stat", errno: errno)
    }
    if info.st_mode & S_IFMT != S_IFDIR { throw SystemCallError(call: "stat", errno: ENOTDIR) }
    if directory.withCString({ access($0, W_OK | X_OK) }) != 0 {
      throw SystemCallError(call: "access", errno: errno)
    }
  }

  /// This machine's host name (`gethostname`).
  static func hostName() throws(SystemCallError) -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    if gethostname(&buffer, buffer.count - 1) != 0 {
      throw SystemCallError(call: "gethostname", errno: errno)
    }
    return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
  }

  /// The calling process's id.
  static func processID() -> Int32 { getpid() }

  /// Whether process `pid` exists on this machine: `kill(pid, 0)` succeeds, or fails with
  /// EPERM (it exists but belongs to another user). ESRCH means it is gone.
  static func processExists(_ pid: Int32) -> Bool {
    if pid <= 0 { return false }
    if kill(pid, 0) == 0 { return true }
    return errno == EPERM
  }

  /// Wall-clock time since 1970 (`CLOCK_REALTIME`), for display only.
  static func wallClockNow() -> Duration {
    var time = timespec()
    // CLOCK_REALTIME always exists on Linux; a failure would mean a broken libc.
    if clock_gettime(CLOCK_REALTIME, &time) != 0 {
      fatalError("clock_gettime(CLOCK_REALTIME) failed: \(SystemCallError(call: "clock_gettime", errno: errno))")
    }
    return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
  }
}
