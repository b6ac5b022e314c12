import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

// Audit round 6: environment failures under resource limits, for the Sync module. A lowered
// limit binds the whole process, so each scenario runs in a child forked from an exit test's
// child (`runScenarioInForkedChild`), where only the forking thread exists.

/// The names in `directory`, sorted.
private func round6Names(in directory: String) -> [String] {
  guard let handle = opendir(directory) else { preconditionFailure("opendir \(directory): errno \(errno)") }
  defer { closedir(handle) }
  var names: [String] = []
  while let entry = readdir(handle) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    if name != "." && name != ".." { names.append(name) }
  }
  return names.sorted()
}

/// "EMFILE" when `body` threw the descriptor limit's error (as a `SystemCallError` or inside a
/// `ProcessLockError`), "returned <value>" when it returned, else the error.
private func round6LockOutcome<T>(_ body: () throws -> T) -> String {
  do {
    return "returned \(try body())"
  } catch let error as SystemCallError {
    return error.code == .tooManyOpenFiles ? "EMFILE" : "\(error)"
  } catch let error as ProcessLockError {
    return error.systemError?.code == .tooManyOpenFiles ? "EMFILE" : "\(error)"
  } catch {
    return "\(error)"
  }
}

@Suite("Audit round 6: Sync under resource limits", .timeLimit(.minutes(3)))
struct AuditRound6SyncResourceLimitsTests {
  /// Every ProcessLock call that opens a file, with each number of free descriptors below
  /// what it needs (one for `tryLock`, `owner` and `unlock`; two for the recoveries, which
  /// hold the breakers' file open while reading the lock file): it throws `EMFILE` (as the
  /// documented `SystemCallError`, or `ProcessLockError.system`), leaves no descriptor and no
  /// scratch file, and leaves the lock as it was (a stale lock stays until a recovery
  /// succeeds); with enough descriptors the same call succeeds.
  @Test(.runsExitTests) func processLockCallsRefusedDescriptorsAtEveryStep() async {
    await #expect(processExitsWith: .success) {
      runScenarioInForkedChild("ProcessLock without descriptors") {
        var template = Array("/tmp/tk-round6-XXXXXX".utf8CString)
        precondition(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) } != nil)
        let directory = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        let path = directory + "/app.lock"
        let lock = try! ProcessLock(path: path)
        // tryLock: one descriptor (the scratch record).
        var before = ProcessFootprint()
        let refusedTake = withFreeDescriptorCount(0) { round6LockOutcome { try lock.tryLock() } }
        precondition(refusedTake == "EMFILE", "tryLock without descriptors: \(refusedTake)")
        before.expectBack("a refused tryLock")
        precondition(round6Names(in: directory) == [] && !lock.isHeldByThisObject, "a refused tryLock left a file")
        let taken = withFreeDescriptorCount(1) { round6LockOutcome { try lock.tryLock() } }
        precondition(taken == "returned true", "tryLock with one descriptor: \(taken)")
        // owner: one descriptor.
        let refusedOwner = withFreeDescriptorCount(0) { round6LockOutcome { try lock.owner()?.processID } }
        precondition(refusedOwner == "EMFILE", "owner without descriptors: \(refusedOwner)")
        precondition(try! lock.owner()?.processID == getpid())
        // unlock: one descriptor. Documented: the object no longer holds the lock, and the
        // lock file may still be there (owner() tells); breakLock() clears it.
        before = ProcessFootprint()
        let refusedUnlock = withFreeDescriptorCount(0) { round6LockOutcome { try lock.unlock() } }
        precondition(refusedUnlock == "EMFILE", "unlock without descriptors: \(refusedUnlock)")
        before.expectBack("a refused unlock")
        precondition(!lock.isHeldByThisObject)
        precondition(try! lock.owner()?.processID == getpid(), "the lock file of a refused unlock is gone")
        precondition(try! lock.breakLock())
        precondition(try! lock.tryLock())
        try! lock.unlock()
        precondition(round6Names(in: directory) == [])
        // No room to write the owner record (RLIMIT_FSIZE 0, SIGXFSZ ignored so that the
        // write fails with EFBIG instead of ending the process): tryLock throws the failed
        // write, removes its scratch file, and takes nothing; with the limit back it works.
        var ignore = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        precondition(sigaction(SIGXFSZ, &ignore, nil) == 0)
        var fileSize = rlimit()
        precondition(getrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &fileSize) == 0)
        var noFileSize = fileSize
        noFileSize.rlim_cur = 0
        precondition(setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &noFileSize) == 0)
        let refusedWrite: String
        do throws(SystemCallError) {
          refusedWrite = "returned \(try lock.tryLock())"
        } catch {
          refusedWrite = error.call == "write" && error.code.rawValue == EFBIG ? "EFBIG" : "\(error)"
        }
        precondition(setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &fileSize) == 0)
        precondition(refusedWrite == "EFBIG", "tryLock without room for the record: \(refusedWrite)")
        precondition(round6Names(in: directory) == [] && !lock.isHeldByThisObject, "a refused record left a file")
        precondition(try! lock.tryLock())
        try! lock.unlock()
        // A stale lock: a child takes it and exits holding it.
        let holder = fork()
        precondition(holder >= 0)
        if holder == 0 { _exit(try! ProcessLock(path: path).tryLock() ? 0 : 1) }
        precondition(waitForExitStatus(holder) == 0)
        let stale = try! lock.owner()
        precondition(stale?.isAlive == false)
        for free in 0..<2 {
          before = ProcessFootprint()
          let names = round6Names(in: directory)
          let refusedRecovery = withFreeDescriptorCount(free) {
            round6LockOutcome { try lock.tryLockBreakingStaleLock() }
          }
          precondition(refusedRecovery == "EMFILE", "tryLockBreakingStaleLock with \(free) free: \(refusedRecovery)")
          let refusedBreak = withFreeDescriptorCount(free) {
            round6LockOutcome { try lock.breakLock(ifOwnerIs: stale!) }
          }
          precondition(refusedBreak == "EMFILE", "breakLock(ifOwnerIs:) with \(free) free: \(refusedBreak)")
          before.expectBack("refused recoveries with \(free) free descriptors")
          // The breakers' companion file is made by the first recovery that opens it, and
          // stays (documented); nothing else appears, and the stale lock is still there.
          let after = round6Names(in: directory).filter { $0 != "app.lock.break" }
          precondition(after == names.filter { $0 != "app.lock.break" }, "files \(names) became \(after)")
          precondition(try! lock.owner() == stale, "a refused recovery changed the stale lock")
        }
        let recovered = withFreeDescriptorCount(2) { round6LockOutcome { try lock.tryLockBreakingStaleLock() } }
        precondition(recovered == "returned true", "tryLockBreakingStaleLock with two descriptors: \(recovered)")
        try! lock.unlock()
        for name in round6Names(in: directory) { precondition(unlink(directory + "/" + name) == 0) }
        precondition(rmdir(directory) == 0)
      }
    }
  }
}
