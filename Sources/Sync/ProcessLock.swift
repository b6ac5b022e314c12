#if canImport(Glibc)
  import Glibc
#endif

/// A lock shared by processes through the file system: the guide's `NSDistributedLock`.
///
/// The lock is a file at ``path``: whoever creates it holds the lock. ``tryLock()`` never
/// blocks; it returns `false` when another holder has it (retry later, as the guide's
/// pattern does). Only the holder releases it with ``unlock()``; a lock left behind by a
/// process that died is removed with ``breakLock()``. The lock is not released when the
/// holder exits: that is the point of `breakLock`, and of the owner record below.
///
/// **Beyond the guide: the owner record.** The file holds the owner's process id, host
/// name and the wall-clock time it was taken, written *before* the lock file appears (the
/// record is written to a private file, then hard-linked into place with `link`, which is
/// atomic and fails if the name exists, also on NFS). Whether the lock was taken is decided
/// by the private file's link count after `link` (2: the lock file is that file), not by
/// what `link` returned: over NFS a retransmitted `link` can report failure for a link the
/// server made (the recipe of `open(2)`), and trusting the report would leave a lock that
/// nobody holds. ``owner()`` reads the record, so a caller can tell a stale lock from a live
/// one before breaking it.
///
/// **Recovering a stale lock** is one call, ``tryLockBreakingStaleLock()``: it takes the lock
/// if it is free, else removes it only if its owner is dead (on this host) and takes it.
/// Any number of processes may run it at once: at most one of them holds the lock at a time.
///
/// ```swift
/// let lock = try ProcessLock(path: "/var/tmp/myapp.lock")
/// if try lock.tryLockBreakingStaleLock() {
///     defer { try? lock.unlock() }
///     doExclusiveWork()
/// }   // else a live process holds it: retry later
/// ```
///
/// Checking ``owner()`` and then calling ``breakLock()`` is not safe when several processes
/// recover at once: between the two calls another process may break the dead owner's lock
/// and take it, and the `breakLock` then removes that live lock. To break by hand, use
/// ``breakLock(ifOwnerIs:)``, which removes the lock only while it still records the owner
/// that was judged dead.
///
/// Breakers exclude each other with an `flock` on a companion file, `path + ".break"`,
/// created by the first recovery and left in place (removing it would let two breakers lock
/// different files). The `flock` is released when its holder's descriptor closes, also when
/// the holder dies, so it never goes stale itself; it is only taken while breaking. One
/// exception: the descriptor is close-on-exec, but a child that another thread of the
/// breaking process forks without `exec` while the breaker holds it shares the `flock` until
/// that child exits or calls `exec`, and breakers report busy until then.
///
/// **Only a regular file** at ``path`` is a lock: a FIFO, a symlink (even to a regular file)
/// or anything else planted there makes ``owner()`` and the recovery calls throw
/// ``ProcessLockError/notARegularFile(path:)`` instead of blocking or following it, and
/// ``tryLock()`` reports busy (the name is taken). ``breakLock()`` removes such a name.
///
/// **Errors**: a directory for the lock that does not exist (`ENOENT`, `ENOTDIR`) or is not
/// writable (`EACCES`, `EROFS`) fails in the initializer with a ``SystemCallError``;
/// ``tryLock()`` and ``breakLock()`` throw the failed call as a `SystemCallError`. The calls
/// that read the lock file (``owner()``, ``lockDate()``, ``unlock()``,
/// ``breakLock(ifOwnerIs:)``, ``tryLockBreakingStaleLock()``) throw a ``ProcessLockError``:
/// ``ProcessLockError/notOwner`` when the lock was broken behind this object's back (see
/// there), ``ProcessLockError/notARegularFile(path:)`` for a name that is not a lock file,
/// ``ProcessLockError/system(_:)`` for a failed call.
///
/// **Misuse** stops the process with a message: calling ``unlock()`` on an object that does
/// not hold the lock.
///
/// The lock is advisory (it binds only processes that use it) and per object: two
/// `ProcessLock` objects for the same path, even in one process, exclude each other.
/// Process ids are recycled, so ``Owner/isAlive`` can mistake a new process for the dead
/// owner; it never mistakes a live owner for a dead one. The C functions used are `open`
/// with `O_CREAT | O_EXCL`, `link`, `stat`, `unlink`, `kill(pid, 0)`, and `flock` while
/// breaking.
public final class ProcessLock: @unchecked Sendable {
  // @unchecked: `heldToken` is protected by `guardLock`.

  /// Who holds a ``ProcessLock``, as its lock file records it.
  public struct Owner: Sendable, Hashable, CustomStringConvertible {
    /// The owning process's id.
    public let processID: Int32
    /// The host name of the owner's machine.
    public let hostName: String
    /// The wall-clock time the lock was taken, since 1970-01-01 00:00 UTC (the guide's
    /// `lockDate`). For display only: wall clocks jump, so never compute timeouts from it.
    public let acquiredAt: Duration
    /// A token unique to the acquisition.
    let token: String

    /// Whether the owner process is still running: `true` or `false` when the owner is on
    /// this host (checked with `kill(pid, 0)`), `nil` when it is on another host and
    /// cannot be checked from here.
    public var isAlive: Bool? {
      guard let here = try? FileCalls.hostName(), here == hostName else { return nil }
      return FileCalls.processExists(processID)
    }

    /// `"pid 1234 on host, taken at 1764470000.123456789s since 1970"`.
    public var description: String {
      // Sign and magnitude of the full count, not `components`: the record comes from a file
      // any process may have written, and `components` traps past Int64 seconds, while a
      // negative time would give a negative fraction (and a negative padding count).
      let nanoseconds = acquiredAt.attoseconds / 1_000_000_000
      let magnitude = nanoseconds.magnitude
      var fraction = String(magnitude % 1_000_000_000)
      fraction = String(repeating: "0", count: 9 - fraction.count) + fraction
      let sign = nanoseconds < 0 ? "-" : ""
      return "pid \(processID) on \(hostName), taken at \(sign)\(magnitude / 1_000_000_000).\(fraction)s since 1970"
    }
  }

  /// The lock file's path.
  public let path: String

  let guardLock = Lock()
  var heldToken: String?
  /// Makes the hard link: `FileCalls.link`, or a test's stand-in that misreports it.
  let linkFile: @Sendable (String, String) throws(SystemCallError) -> Bool

  /// Creates a lock object for the lock file at `path` (it does not take the lock). Throws
  /// ``SystemCallError`` if the directory that would hold the file does not exist, is not a
  /// directory, or is not writable by this process, and ``SystemErrorCode/invalidArgument``
  /// (call `"ProcessLock(path:)"`) for an empty path or one that contains a NUL byte: the C
  /// calls would see the path cut at the NUL, the name of another file (another lock's,
  /// which ``breakLock()`` would then remove).
  public convenience init(path: String) throws(SystemCallError) {
    try self.init(
      path: path, linkFile: { (existing, new) throws(SystemCallError) -> Bool in try FileCalls.link(existing, new) })
  }

  /// A lock whose `link` calls go through `linkFile` (a test seam: a file system that
  /// performs a link but reports a failure).
  init(path: String, linkFile: @escaping @Sendable (String, String) throws(SystemCallError) -> Bool)
    throws(SystemCallError)
  {
    self.path = path
    self.linkFile = linkFile
    if path.isEmpty || path.utf8.contains(0) {
      throw SystemCallError(call: "ProcessLock(path:)", code: .invalidArgument)
    }
    let directory: String
    if let slash = path.lastIndex(of: "/") {
      directory = slash == path.startIndex ? "/" : String(path[..<slash])
    } else {
      directory = "."
    }
    try FileCalls.checkWritableDirectory(directory)
  }

  /// Whether this object holds the lock (it took it and has not released it). Does not
  /// look at the file: a lock broken by another process still reads `true` here until
  /// ``unlock()`` finds out.
  public var isHeldByThisObject: Bool {
    guardLock.withLock { heldToken != nil }
  }

  /// Tries to take the lock; never blocks. Returns `true` when this object now holds it,
  /// `false` when it is busy (held by anyone, including this object). Throws
  /// ``SystemCallError`` when the file system fails (no space, permission changed); a
  /// `link` that reports a failure but was made (NFS) takes the lock and throws nothing.
  public func tryLock() throws(SystemCallError) -> Bool {
    try guardLock.withLock { () throws(SystemCallError) -> Bool in
      if heldToken != nil { return false }
      let pid = FileCalls.processID()
      let host = try FileCalls.hostName()
      let now = FileCalls.wallClockNow()
      let token = "\(pid).\(MonotonicInstant.now.nanoseconds).\(UInt64.random(in: 0...UInt64.max))"
      let (seconds, attoseconds) = now.components
      let record =
        "pid=\(pid)\nhost=\(host)\nseconds=\(seconds)\nnanoseconds=\(attoseconds / 1_000_000_000)\ntoken=\(token)\n"
      let scratch = "\(path).\(token).tmp"
      try FileCalls.createExclusive(scratch, contents: record)
      // What `link` reports is only a hint (a retransmitted NFS `link` reports EEXIST, or
      // another error, for a link the server made); the scratch file's link count says
      // whether the lock file is our file.
      let linkReport = Result { () throws(SystemCallError) -> Bool in try linkFile(scratch, path) }
      let acquired: Bool
      do throws(SystemCallError) {
        acquired = try FileCalls.linkCount(scratch) == 2
      } catch {
        // Cannot tell: remove the lock file if it is ours, so no lock is left unowned.
        if let current = try? FileCalls.readLockFile(path), ProcessLock.parse(current)?.token == token {
          _ = try? FileCalls.unlink(path)
        }
        _ = try? FileCalls.unlink(scratch)
        throw error
      }
      if !acquired, case .failure(let error) = linkReport {
        _ = try? FileCalls.unlink(scratch)
        throw error
      }
      do throws(SystemCallError) {
        try FileCalls.unlink(scratch)
      } catch {
        if acquired { _ = try? FileCalls.unlink(path) }
        throw error
      }
      if acquired { heldToken = token }
      return acquired
    }
  }

  /// Releases the lock this object holds by removing the lock file.
  ///
  /// - Throws: ``ProcessLockError/notOwner`` if another process broke the lock meanwhile
  ///   (the file is gone, or now records another owner): the file is left alone, this object
  ///   no longer holds the lock, and the caller learns that its critical section may not
  ///   have been exclusive. ``ProcessLockError/notARegularFile(path:)`` when something
  ///   other than a regular file has taken the lock file's place (left alone).
  ///   ``ProcessLockError/system(_:)`` when reading or removing the file fails. This object
  ///   no longer holds the lock in every case.
  ///
  /// Calling it on an object that does not hold the lock stops the process (misuse).
  ///
  /// The record check and the removal are two steps: a process that breaks this live lock
  /// and takes it again in the instant between them loses its new lock. Breaking a live
  /// owner's lock is outside the protocol anyway (see ``breakLock()``).
  public func unlock() throws(ProcessLockError) {
    try guardLock.withLock { () throws(ProcessLockError) in
      guard let token = heldToken else {
        reportMisuse("ProcessLock", "unlock() of \(path), which this object does not hold")
      }
      heldToken = nil
      let record = try FileCalls.readLockFile(path)
      guard let record, ProcessLock.parse(record)?.token == token else { throw .notOwner }
      do throws(SystemCallError) {
        try FileCalls.unlink(path)
      } catch {
        throw .system(error)
      }
    }
  }

  /// Removes the lock whoever holds it, or whatever is at ``path``. Returns whether there
  /// was something to remove. Never blocks.
  ///
  /// Unconditional: use it to clear a lock by hand when no process can be running. To
  /// recover from an owner that died, use ``tryLockBreakingStaleLock()`` or
  /// ``breakLock(ifOwnerIs:)``: checking ``owner()`` and then calling this lets a lock that
  /// another process broke and re-took meanwhile be removed under it, putting two processes
  /// in the critical section.
  ///
  /// - Throws: ``SystemCallError`` when `unlink` fails for another reason than nothing being
  ///   there (`EACCES`, `EROFS`, ...).
  @discardableResult
  public func breakLock() throws(SystemCallError) -> Bool {
    try guardLock.withLock { () throws(SystemCallError) -> Bool in
      heldToken = nil
      return try FileCalls.unlink(path)
    }
  }

  /// Removes the lock only if it still records the acquisition `owner` describes (as
  /// ``owner()`` returned it): for an owner judged dead, the lock it left behind, and never a
  /// lock another process took since. Returns whether it removed the lock; `false` when the
  /// lock is free, has another owner now, or another process is breaking it at this moment
  /// (retry; that lasts as long as the other breaker's call, or as a child forked meanwhile
  /// without `exec`: see the type's overview). Never blocks.
  ///
  /// Breakers exclude each other (an `flock` on `path + ".break"`), so between this call's
  /// check and its removal the file can change only through its owner's ``unlock()``: call it
  /// only for an owner that is dead (``Owner/isAlive`` is `false`).
  ///
  /// - Throws: ``ProcessLockError/notARegularFile(path:)`` when the name is not a lock file,
  ///   ``ProcessLockError/system(_:)`` for a failed call.
  @discardableResult
  public func breakLock(ifOwnerIs owner: Owner) throws(ProcessLockError) -> Bool {
    try withBreakersExcluded { () throws(ProcessLockError) -> Bool in
      guard let record = try FileCalls.readLockFile(path), ProcessLock.parse(record) == owner else { return false }
      return try removeLockFile()
    }
  }

  /// Takes the lock if it is free, or if its owner is dead: the safe form of the guide's
  /// stale-lock recovery, which any number of processes may run at once. Returns `true` when
  /// this object now holds the lock; `false` when a live owner (or one on another host,
  /// which cannot be checked) holds it, when this object already holds it, or when another
  /// process is breaking the stale lock at this moment (retry later, as with ``tryLock()``).
  /// Never blocks.
  ///
  /// A lock whose owner is dead is removed while breakers exclude each other (see
  /// ``breakLock(ifOwnerIs:)``) and only if its record still names that owner, then taken
  /// with ``tryLock()``, which another process may win.
  ///
  /// - Throws: ``ProcessLockError/notARegularFile(path:)`` when something other than a lock
  ///   file is at ``path`` (remove it by hand, or with ``breakLock()``),
  ///   ``ProcessLockError/system(_:)`` for a failed call.
  public func tryLockBreakingStaleLock() throws(ProcessLockError) -> Bool {
    if try systemErrors({ () throws(SystemCallError) -> Bool in try tryLock() }) { return true }
    if isHeldByThisObject { return false }
    var free = false
    let broke = try withBreakersExcluded { () throws(ProcessLockError) -> Bool in
      // Read and judged while breakers are excluded: a dead owner stays dead and cannot
      // unlock, so the file read here is the file removed below.
      guard let record = try FileCalls.readLockFile(path) else {
        free = true  // its owner unlocked meanwhile
        return false
      }
      guard let owner = ProcessLock.parse(record), owner.isAlive == false else { return false }
      return try removeLockFile()
    }
    guard broke || free else { return false }
    return try systemErrors({ () throws(SystemCallError) -> Bool in try tryLock() })
  }

  /// The current owner as the lock file records it, or `nil` when the lock is free.
  ///
  /// - Throws: ``ProcessLockError/notARegularFile(path:)`` when a FIFO, a symlink or anything
  ///   but a regular file is at ``path`` (it is never opened for reading nor followed, so
  ///   this never blocks); ``ProcessLockError/system(_:)`` for a failed call.
  public func owner() throws(ProcessLockError) -> Owner? {
    guard let record = try FileCalls.readLockFile(path) else { return nil }
    // A file without a readable record was not written by a ProcessLock; report it as
    // held by an unknown owner rather than as free.
    return ProcessLock.parse(record) ?? Owner(processID: 0, hostName: "", acquiredAt: .zero, token: "")
  }

  /// The wall-clock time the current owner took the lock (since 1970), or `nil` when the
  /// lock is free: the guide's `lockDate`. For display only. Throws as ``owner()``.
  public func lockDate() throws(ProcessLockError) -> Duration? {
    try owner()?.acquiredAt
  }

  /// Runs `body` holding the breakers' `flock`; returns false without running it when
  /// another breaker holds it.
  private func withBreakersExcluded(_ body: () throws(ProcessLockError) -> Bool) throws(ProcessLockError) -> Bool {
    guard let descriptor = try FileCalls.lockBreakerFile(path + ".break") else { return false }
    // Closing the descriptor releases the flock; a close error cannot keep it.
    defer { _ = close(descriptor) }
    return try body()
  }

  /// Removes the lock file (this object no longer holds it, if it did).
  private func removeLockFile() throws(ProcessLockError) -> Bool {
    try guardLock.withLock { () throws(ProcessLockError) -> Bool in
      heldToken = nil
      return try systemErrors({ () throws(SystemCallError) -> Bool in try FileCalls.unlink(path) })
    }
  }

  /// `body`'s `SystemCallError` as ``ProcessLockError/system(_:)``.
  private func systemErrors<T>(_ body: () throws(SystemCallError) -> T) throws(ProcessLockError) -> T {
    do throws(SystemCallError) {
      return try body()
    } catch {
      throw .system(error)
    }
  }

  static func parse(_ record: String) -> Owner? {
    var fields: [Substring: Substring] = [:]
    for line in record.split(separator: "\n") {
      guard let equals = line.firstIndex(of: "=") else { continue }
      fields[line[..<equals]] = line[line.index(after: equals)...]
    }
    guard let pid = fields["pid"].flatMap({ Int32($0) }), let host = fields["host"],
      let seconds = fields["seconds"].flatMap({ Int64($0) }),
      let nanoseconds = fields["nanoseconds"].flatMap({ Int64($0) }), let token = fields["token"]
    else { return nil }
    return Owner(
      processID: pid, hostName: String(host), acquiredAt: .seconds(seconds) + .nanoseconds(nanoseconds),
      token: String(token))
  }
}
