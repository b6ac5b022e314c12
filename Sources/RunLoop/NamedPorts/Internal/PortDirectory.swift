import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// The per-user directory that holds named ports' sockets and name-claim lock files.
///
/// Location (``prepare()``), the first that applies:
/// 1. `$XDG_RUNTIME_DIR/threading-toolkit` when that variable is an absolute path short
///    enough for socket addresses (the runtime directory systemd makes private to the user:
///    nobody else can create anything in it);
/// 2. `$HOME/.tk-ports` when it exists (see 4);
/// 3. `/tmp/threading-toolkit-<uid>` when it is safe or can be created;
/// 4. otherwise, when the `/tmp` path is taken (another user created it first to deny this
///    user named ports, or it breaks a rule below), `$HOME/.tk-ports`, created.
///    Once it exists it comes before the `/tmp` path (2), so every process of the user keeps
///    agreeing on one directory whatever happens to the `/tmp` path later. Its path must
///    leave room for the longest name in a socket address (``maximumPathLength``, 37
///    bytes): with a longer home directory, set `XDG_RUNTIME_DIR`.
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
/// the process dies, so a crashed owner's stale socket is recognised and replaced). Both are
/// removed when the port is invalidated; a crashed owner's files are removed by the next
/// lookup of the name (its socket refuses the connection and nobody holds the claim), or
/// taken over by the next registration.
struct PortDirectory: Sendable, Equatable {
  let path: String

  /// Directory paths longer than this leave no room for the longest name in a socket
  /// address (`<path>/<64-byte name>.sock` must fit in 107 bytes).
  static var maximumPathLength: Int { tk_unix_path_capacity() - 1 - PortName.maximumLength - 5 }

  /// The directory for the effective user, created if needed (see the type's
  /// documentation). Throws as ``prepare(path:)``.
  static func prepare() throws(PortError) -> PortDirectory {
    func environment(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
    return try prepare(
      runtimeDirectory: environment("XDG_RUNTIME_DIR"), sharedPath: "/tmp/threading-toolkit-\(geteuid())",
      home: environment("HOME"))
  }

  /// The location rule of the type's documentation with its inputs given: the value of
  /// `XDG_RUNTIME_DIR`, the shared path under `/tmp`, and the value of `HOME`.
  static func prepare(runtimeDirectory: String?, sharedPath: String, home: String?) throws(PortError)
    -> PortDirectory
  {
    if let base = runtimeDirectory, base.hasPrefix("/") {
      let candidate = base.hasSuffix("/") ? base + "threading-toolkit" : base + "/threading-toolkit"
      if candidate.utf8.count <= maximumPathLength { return try prepare(path: candidate) }
    }
    var fallback: String?
    if let home, home.hasPrefix("/") {
      fallback = home.hasSuffix("/") ? home + ".tk-ports" : home + "/.tk-ports"
    }
    var status = stat()
    if let fallback, lstat(fallback, &status) == 0 { return try prepare(path: fallback) }
    let sharedError: PortError
    do {
      return try prepare(path: sharedPath)
    } catch {
      sharedError = error
    }
    guard let fallback else {
      throw PortError(
        sharedError.status, cause: sharedError.cause, reason: sharedError.reason,
        detail: sharedError.detail + "; set XDG_RUNTIME_DIR or HOME to a private directory")
    }
    do {
      return try prepare(path: fallback)
    } catch {
      throw PortError(
        error.status, cause: error.cause, reason: error.reason,
        detail: "\(sharedError.detail); the fallback: \(error.detail); set XDG_RUNTIME_DIR to a private directory")
    }
  }

  /// Creates (mode 0700) or verifies the directory at `path` and returns it.
  ///
  /// Throws ``PortError`` with ``PortStatus/transportError``: with the failing call as its
  /// `cause` (`mkdir`, `lstat`), or with the broken rule as its `reason` (a path too long, not
  /// a directory or a symbolic link, another owner, group or world access).
  static func prepare(path: String) throws(PortError) -> PortDirectory {
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
