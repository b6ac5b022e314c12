import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

/// A fresh private directory under /tmp, removed with its contents by `remove()`.
struct ScratchDirectory {
  let path: String

  init() {
    var template = Array("/tmp/tk-processlock-XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    precondition(made != nil, "mkdtemp failed: errno \(errno)")
    path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
  }

  func remove() {
    // Only lock files and their scratch files live here.
    if let directory = opendir(path) {
      while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
          String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
        }
        if name != "." && name != ".." { _ = unlink(path + "/" + name) }
      }
      closedir(directory)
    }
    _ = rmdir(path)
  }
}

@Suite("ProcessLock", .timeLimit(.minutes(3)))
struct ProcessLockTests {
  @Test("tryLock takes a free lock, reports busy for a second object, unlock frees it")
  func tryLockAndUnlock() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/app.lock"
    let first = try ProcessLock(path: path)
    let second = try ProcessLock(path: path)
    #expect(try first.owner() == nil)
    #expect(try first.tryLock())
    #expect(first.isHeldByThisObject)
    #expect(try !first.tryLock(), "held by this object: busy, never blocks")
    #expect(try !second.tryLock())
    #expect(!second.isHeldByThisObject)
    try first.unlock()
    #expect(!first.isHeldByThisObject)
    #expect(try second.tryLock())
    try second.unlock()
    #expect(try first.owner() == nil)
  }

  @Test("the owner record names this process and host and the time it was taken")
  func ownerRecord() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let lock = try ProcessLock(path: scratch.path + "/owner.lock")
    var before = timespec()
    clock_gettime(CLOCK_REALTIME, &before)
    #expect(try lock.tryLock())
    let owner = try #require(try lock.owner())
    #expect(owner.processID == getpid())
    var host = [CChar](repeating: 0, count: 256)
    #expect(gethostname(&host, 255) == 0)
    let hostName = host.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    #expect(owner.hostName == hostName)
    #expect(owner.isAlive == true)
    let seconds = owner.acquiredAt.components.seconds
    #expect(seconds >= Int64(before.tv_sec) && seconds <= Int64(before.tv_sec) + 60)
    #expect(try lock.lockDate() == owner.acquiredAt)
    #expect(owner.description.contains("pid \(getpid())"))
    try lock.unlock()
    #expect(try lock.lockDate() == nil)
  }

  @Test("breakLock removes anyone's lock; the old holder's unlock then throws notOwner")
  func breakLock() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/break.lock"
    let holder = try ProcessLock(path: path)
    let breaker = try ProcessLock(path: path)
    #expect(try !breaker.breakLock(), "nothing to break")
    #expect(try holder.tryLock())
    #expect(try breaker.breakLock())
    #expect(try breaker.tryLock(), "free after the break")
    #expect(throws: ProcessLockError.notOwner) {
      try holder.unlock()
    }
    #expect(!holder.isHeldByThisObject)
    #expect(try breaker.owner()?.processID == getpid(), "the breaker's lock was left alone")
    try breaker.unlock()
  }

  @Test("unlock after the lock was broken and not taken again throws notOwner")
  func unlockOfABrokenFreeLock() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/gone.lock"
    let holder = try ProcessLock(path: path)
    #expect(try holder.tryLock())
    #expect(try ProcessLock(path: path).breakLock())
    #expect(throws: ProcessLockError.notOwner) { try holder.unlock() }
    #expect(!holder.isHeldByThisObject)
    #expect(try holder.owner() == nil)
  }

  @Test("unlock that finds a directory in the lock file's place throws notARegularFile and leaves it")
  func unlockFindsADirectory() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/replaced.lock"
    let holder = try ProcessLock(path: path)
    #expect(try holder.tryLock())
    // A directory in the lock file's place: recognized by fstat before any read.
    #expect(unlink(path) == 0)
    #expect(mkdir(path, 0o755) == 0)
    defer { rmdir(path) }
    let error = try #require(throws: ProcessLockError.self) { try holder.unlock() }
    #expect(error == .notARegularFile(path: path))
    #expect(error.systemError == nil)
    #expect(!holder.isHeldByThisObject)
    var info = stat()
    #expect(stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR, "left alone")
  }

  @Test("a lock file without an owner record is held by an unknown owner, not free")
  func foreignLockFile() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/foreign.lock"
    let fd = open(path, O_CREAT | O_WRONLY, 0o644)
    #expect(fd >= 0)
    #expect(write(fd, "junk", 4) == 4)
    close(fd)
    let lock = try ProcessLock(path: path)
    let owner = try #require(try lock.owner())
    #expect(owner.processID == 0)
    #expect(try !lock.tryLock())
    #expect(try lock.breakLock())
    #expect(try lock.tryLock())
    try lock.unlock()
  }

  @Test(
    "an owner record with an out-of-range time from another writer is described, not a crash",
    arguments: [
      ("seconds=-2\nnanoseconds=500000000", "taken at -1.500000000s since 1970"),
      (
        "seconds=9223372036854775807\nnanoseconds=9223372036854775807",
        "taken at 9223372046078147843.854775807s since 1970"
      ),
    ])
  func outOfRangeOwnerTime(fields: String, described: String) throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/foreign.lock"
    let record = "pid=42\nhost=elsewhere\n\(fields)\ntoken=abc\n"
    let fd = open(path, O_CREAT | O_WRONLY, 0o644)
    #expect(fd >= 0)
    #expect(record.withCString { write(fd, $0, strlen($0)) } == record.utf8.count)
    close(fd)
    let lock = try ProcessLock(path: path)
    let owner = try #require(try lock.owner())
    #expect(owner.processID == 42)
    #expect(owner.description == "pid 42 on elsewhere, \(described)")
  }

  @Test("a directory that does not exist, or is not a directory, is a SystemCallError")
  func missingDirectory() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    #expect(throws: SystemCallError(call: "access", code: .noSuchFileOrDirectory)) {
      _ = try ProcessLock(path: scratch.path + "/no/such/dir/x.lock")
    }
    let file = scratch.path + "/plain"
    let fd = open(file, O_CREAT | O_WRONLY, 0o644)
    #expect(fd >= 0)
    close(fd)
    #expect(throws: SystemCallError(call: "access", code: .notDirectory)) {
      _ = try ProcessLock(path: file + "/x.lock")
    }
    _ = try ProcessLock(path: "relative.lock")  // the current directory is writable here
  }

  @Test("a directory this process may not write to is a SystemCallError")
  func unwritableDirectory() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let readOnly = scratch.path + "/readonly"
    #expect(mkdir(readOnly, 0o555) == 0)
    defer { rmdir(readOnly) }
    if geteuid() == 0 {
      // root may write anywhere; /proc is not writable even for root.
      #expect(throws: SystemCallError.self) {
        let lock = try ProcessLock(path: "/proc/tk-test.lock")
        _ = try lock.tryLock()
      }
    } else {
      #expect(throws: SystemCallError(call: "access", code: .permissionDenied)) {
        _ = try ProcessLock(path: readOnly + "/x.lock")
      }
    }
  }

  @Test("unlocking a lock this object does not hold is reported", .runsExitTests)
  func unlockMisuse() async {
    await #expect(processExitsWith: .failure) {
      let lock = try ProcessLock(path: "/tmp/tk-processlock-misuse-\(getpid()).lock")
      try lock.unlock()
    }
  }

  /// The names in `directory` other than `.` and `..`.
  static func entries(of directory: String) -> [String] {
    var names: [String] = []
    guard let stream = opendir(directory) else { return names }
    while let entry = readdir(stream) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
      }
      if name != "." && name != ".." { names.append(name) }
    }
    closedir(stream)
    return names
  }

  @Test(
    "a link the file system made but reported as failed (NFS retransmission) takes the lock",
    arguments: [EEXIST, EIO])
  func linkMadeButReportedFailed(reportedErrno: Int32) throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/nfs.lock"
    let lock = try ProcessLock(path: path) { (existing, new) throws(SystemCallError) -> Bool in
      _ = try FileCalls.link(existing, new)
      if reportedErrno == EEXIST { return false }
      throw SystemCallError(call: "link", code: SystemErrorCode(rawValue: reportedErrno))
    }
    let other = try ProcessLock(path: path)
    #expect(try lock.tryLock(), "the lock file is this object's record: it holds the lock")
    #expect(lock.isHeldByThisObject)
    #expect(try lock.owner()?.processID == getpid())
    #expect(try !other.tryLock())
    #expect(Self.entries(of: scratch.path) == ["nfs.lock"], "the scratch file is removed")
    try lock.unlock()
    #expect(try other.owner() == nil, "unlock frees the lock for everyone")
    #expect(try other.tryLock())
    try other.unlock()
  }

  @Test("a link that failed and was not made throws its error and leaves no file behind")
  func linkReallyFailed() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/failed.lock"
    let lock = try ProcessLock(path: path) { (_, _) throws(SystemCallError) -> Bool in
      throw SystemCallError(call: "link", code: .ioError)
    }
    #expect(throws: SystemCallError(call: "link", code: .ioError)) { _ = try lock.tryLock() }
    #expect(!lock.isHeldByThisObject)
    #expect(Self.entries(of: scratch.path).isEmpty)
  }

  @Test("a link refused because another object holds the lock reports busy")
  func linkRefusedWhileHeld() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/busy.lock"
    let holder = try ProcessLock(path: path)
    #expect(try holder.tryLock())
    let lock = try ProcessLock(path: path)
    #expect(try !lock.tryLock())
    #expect(try lock.owner() == holder.owner())
    #expect(Self.entries(of: scratch.path) == ["busy.lock"])
    try holder.unlock()
  }
}
