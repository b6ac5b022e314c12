#if canImport(Glibc)
  import Glibc
#endif

/// The file-system and process calls ``ProcessLock`` makes, each turning the C error
/// convention into a thrown ``SystemCallError`` (through `systemCall`) and retrying `EINTR`
/// where that is safe.
enum FileCalls {
  /// Creates `path` exclusively (fails with EEXIST if it exists), writes `contents`, and
  /// closes it. On a failure after creation the file is removed again.
  static func createExclusive(_ path: String, contents: String) throws(SystemCallError) {
    let fd = try systemCall("open") {
      path.withCString { open($0, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644) }
    }
    var failure: SystemCallError?
    var bytes = Array(contents.utf8)
    var offset = 0
    while offset < bytes.count {
      do throws(SystemCallError) {
        offset += try systemCall("write", retryingInterrupts: true) {
          bytes.withUnsafeMutableBytes { buffer in write(fd, buffer.baseAddress! + offset, buffer.count - offset) }
        }
      } catch {
        failure = error
        break
      }
    }
    bytes.removeAll()
    // close is not retried on EINTR: on Linux the descriptor is gone either way.
    do throws(SystemCallError) {
      _ = try systemCall("close") { close(fd) }
    } catch {
      if failure == nil { failure = error }
    }
    if let failure {
      _ = try? unlink(path)
      throw failure
    }
  }

  /// `link(existing, new)`; returns false for EEXIST (the new name is taken).
  static func link(_ existing: String, _ new: String) throws(SystemCallError) -> Bool {
    do throws(SystemCallError) {
      _ = try systemCall("link") { existing.withCString { from in new.withCString { to in Glibc.link(from, to) } } }
      return true
    } catch  where error.code == .fileExists {
      return false
    }
  }

  /// How many names `path` has (`stat`'s `st_nlink`).
  static func linkCount(_ path: String) throws(SystemCallError) -> UInt {
    var info = stat()
    _ = try systemCall("stat") { path.withCString { stat($0, &info) } }
    return UInt(info.st_nlink)
  }

  /// `unlink(path)`; returns false for ENOENT (nothing there).
  @discardableResult
  static func unlink(_ path: String) throws(SystemCallError) -> Bool {
    do throws(SystemCallError) {
      _ = try systemCall("unlink") { path.withCString { Glibc.unlink($0) } }
      return true
    } catch  where error.code == .noSuchFileOrDirectory {
      return false
    }
  }

  /// The first 4 KiB of the lock file at `path` as text, or nil if nothing is there.
  ///
  /// Opened with `O_NOFOLLOW | O_NONBLOCK` and checked with `fstat`, so a name that is not a
  /// regular file never blocks the reader (a FIFO would wait for a writer) and is never
  /// followed (a symlink): both throw ``ProcessLockError/notARegularFile(path:)``. Failed
  /// calls throw ``ProcessLockError/system(_:)``.
  static func readLockFile(_ path: String) throws(ProcessLockError) -> String? {
    let fd: Int32
    do throws(SystemCallError) {
      fd = try systemCall("open") {
        path.withCString { open($0, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) }
      }
    } catch  where error.code == .noSuchFileOrDirectory {
      return nil
    } catch  where error.code.rawValue == ELOOP {
      // O_NOFOLLOW's answer for a symlink: the kernel refused it for that reason.
      throw .notARegularFile(path: path)
    } catch {
      throw .system(error)
    }
    defer { _ = close(fd) }  // read-only descriptor: a close error loses nothing
    var info = stat()
    do throws(SystemCallError) {
      _ = try systemCall("fstat") { fstat(fd, &info) }
    } catch {
      throw .system(error)
    }
    guard info.st_mode & S_IFMT == S_IFREG else { throw .notARegularFile(path: path) }
    var buffer = [UInt8](repeating: 0, count: 4096)
    var total = 0
    while total < buffer.count {
      let count: Int
      do throws(SystemCallError) {
        count = try systemCall("read", retryingInterrupts: true) {
          buffer.withUnsafeMutableBytes { raw in Glibc.read(fd, raw.baseAddress! + total, raw.count - total) }
        }
      } catch {
        throw .system(error)
      }
      if count == 0 { break }
      total += count
    }
    return String(decoding: buffer[0..<total], as: UTF8.self)
  }

  /// Opens (creating it if needed) the companion file that serializes lock breakers and
  /// takes an exclusive `flock` on it without waiting. Returns the descriptor holding the
  /// lock (close it to release), or nil when another breaker holds it now. The lock goes
  /// away with its holder's descriptor, so a breaker that dies cannot leave it behind. A
  /// name that is not a regular file throws ``ProcessLockError/notARegularFile(path:)``.
  static func lockBreakerFile(_ path: String) throws(ProcessLockError) -> Int32? {
    let fd: Int32
    do throws(SystemCallError) {
      fd = try systemCall("open") {
        path.withCString { open($0, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o644) }
      }
    } catch  where error.code.rawValue == ELOOP {
      throw .notARegularFile(path: path)
    } catch {
      throw .system(error)
    }
    var info = stat()
    do throws(SystemCallError) {
      _ = try systemCall("fstat") { fstat(fd, &info) }
    } catch {
      _ = close(fd)
      throw .system(error)
    }
    guard info.st_mode & S_IFMT == S_IFREG else {
      _ = close(fd)
      throw .notARegularFile(path: path)
    }
    do throws(SystemCallError) {
      _ = try systemCall("flock", retryingInterrupts: true) { flock(fd, LOCK_EX | LOCK_NB) }
      return fd
    } catch  where error.code == .wouldBlock {
      _ = close(fd)
      return nil
    } catch {
      _ = close(fd)
      throw .system(error)
    }
  }

  /// Throws unless `directory` exists, is a directory, and the caller may create files in
  /// it: `access(W_OK | X_OK)` on the path with a trailing slash, which the kernel resolves
  /// only to a directory (ENOENT, ENOTDIR, then EACCES or EROFS).
  static func checkWritableDirectory(_ directory: String) throws(SystemCallError) {
    let asDirectory = directory.hasSuffix("/") ? directory : directory + "/"
    _ = try systemCall("access") { asDirectory.withCString { access($0, W_OK | X_OK) } }
  }

  /// This machine's host name (`gethostname`).
  static func hostName() throws(SystemCallError) -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    _ = try systemCall("gethostname") { gethostname(&buffer, buffer.count - 1) }
    return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
  }

  /// The calling process's id.
  static func processID() -> Int32 { getpid() }

  /// Whether process `pid` exists on this machine: `kill(pid, 0)` succeeds, or fails with
  /// EPERM (it exists but belongs to another user). ESRCH means it is gone.
  static func processExists(_ pid: Int32) -> Bool {
    if pid <= 0 { return false }
    do throws(SystemCallError) {
      _ = try systemCall("kill") { kill(pid, 0) }
      return true
    } catch {
      return error.code == .operationNotPermitted
    }
  }

  /// Wall-clock time since 1970 (`CLOCK_REALTIME`), for display only.
  static func wallClockNow() -> Duration {
    var time = timespec()
    // CLOCK_REALTIME always exists on Linux; a failure would mean a broken libc.
    _ = mustSucceed("ProcessLock") { () throws(SystemCallError) in
      try systemCall("clock_gettime(CLOCK_REALTIME)") { clock_gettime(CLOCK_REALTIME, &time) }
    }
    return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
  }
}
