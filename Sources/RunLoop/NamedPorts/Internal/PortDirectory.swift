import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// The per-user directory that holds named ports' sockets and name-claim lock files.
///
/// Default location: `$XDG_RUNTIME_DIR/threading-toolkit` when that variable is an absolute
/// path short enough for socket addresses, else `/tmp/threading-toolkit-<uid>`.
///
/// Safety rules, checked every time a port is registered or looked up:
/// - created with mode 0700 when missing (`mkdir`);
/// - must be a real directory, not a symbolic link (`lstat`);
/// - must be owned by the effective user;
/// - must not be accessible to group or others (no bit of 0077): another user who could
///   write there could plant a socket and impersonate a port. A directory that breaks a rule
///   is refused, never repaired, because its contents cannot be trusted.
///
/// Inside, port `N` is the socket `N.sock`, and `N.lock` is a lock file whose `flock` the
/// owning process holds for as long as the port is registered (the kernel releases it when
/// the process dies, so a crashed owner's stale socket is recognised and replaced).
struct PortDirectory: Sendable, Equatable {
  let path: String

  /// Directory paths longer than this leave no room for the longest name in a socket
  /// address (`<path>/<64-byte name>.sock` must fit in 107 bytes).
  static var maximumPathLength: Int { tk_unix_path_capacity() - 1 - PortName.maximumLength - 5 }

  /// The default location for the effective user (see the type's documentation).
  static var defaultPath: String {
    if let runtime = getenv("XDG_RUNTIME_DIR") {
      let base = String(cString: runtime)
      let candidate = base.hasSuffix("/") ? base + "threading-toolkit" : base + "/threading-toolkit"
      if base.hasPrefix("/") && candidate.utf8.count <= maximumPathLength { return candidate }
    }
    return "/tmp/threading-toolkit-\(geteuid())"
  }

  /// Creates (mode 0700) or verifies the directory at `path` and returns it.
  ///
  /// Throws ``PortError`` with ``PortStatus/transportError``: with the failing call as its
  /// `cause` (`mkdir`, `lstat`), or with the broken rule as its `reason` (a path too long, not
  /// a directory or a symbolic link, another owner, group or world access).
  static func prepare(path: String = PortDirectory.defaultPath) throws(PortError) -> PortDirectory {
    if path.utf8.count > maximumPathLength || !path.hasPrefix("/") {
      throw PortError(
        .transportError, reason: .directoryPathInvalid,
        detail: "port directory \(path) must be absolute and at most \(maximumPathLength) bytes")
    }
    do throws(SystemCallError) {
      _ = try systemCall("mkdir") { mkdir(path, 0o700) }
    } catch  where error.code == .fileExists {
      // Verified below.
    } catch {
      throw PortError(.transportError, cause: error, detail: "cannot create the port directory \(path)")
    }
    var status = stat()
    do throws(SystemCallError) {
      _ = try systemCall("lstat") { lstat(path, &status) }
    } catch {
      throw PortError(.transportError, cause: error, detail: "cannot inspect the port directory \(path)")
    }
    if status.st_mode & S_IFMT != S_IFDIR {
      throw PortError(
        .transportError, reason: .directoryNotADirectory,
        detail: "port directory \(path) is not a directory (or is a symbolic link)")
    }
    if status.st_uid != geteuid() {
      throw PortError(
        .transportError, reason: .directoryOwnedByAnotherUser,
        detail: "port directory \(path) is owned by uid \(status.st_uid), not by uid \(geteuid())")
    }
    if status.st_mode & 0o077 != 0 {
      throw PortError(
        .transportError, reason: .directoryNotPrivate,
        detail:
          "port directory \(path) has mode 0\(String(status.st_mode & 0o777, radix: 8)): group or others may access it")
    }
    return PortDirectory(path: path)
  }

  /// The socket path of the port named `name` (already validated).
  func socketPath(for name: String) -> String { path + "/" + name + ".sock" }

  /// The lock-file path that claims `name` (already validated).
  func lockPath(for name: String) -> String { path + "/" + name + ".lock" }
}
