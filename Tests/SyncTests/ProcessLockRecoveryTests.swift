import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

/// Stale-lock recovery with racing processes, and names at the lock path that are not lock
/// files.
@Suite("ProcessLock recovery and foreign files", .timeLimit(.minutes(3)))
struct ProcessLockRecoveryTests {
  // MARK: Racing recovery

  // Not under ThreadSanitizer: its runtime does not support allocating in the child of a
  // multithreaded fork, and the racers are forked children.
  @Test(
    "racing processes recovering from owners that die never hold the lock at once",
    .disabled(if: isRunningUnderThreadSanitizer, "ThreadSanitizer does not support allocating in a forked child"),
    .runsExitTests)
  func racingRecoveryIsExclusive() async throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    // The racers are forked from an exit test's process, which runs nothing else.
    await #expect(processExitsWith: .success) { [directory = scratch.path as String] in
      exit(raceRecoveringProcesses(directory: directory, racers: 4, acquisitionsEach: 500))
    }
  }

  @Test("breakLock(ifOwnerIs:) leaves a lock taken by someone else since the owner was read")
  func breakLockIfOwnerIsComparesTheAcquisition() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/cas.lock"
    let first = try ProcessLock(path: path)
    let second = try ProcessLock(path: path)
    #expect(try first.tryLock())
    let judged = try #require(try second.owner())
    // The judged owner's lock goes, and another acquisition takes its place.
    #expect(try second.breakLock())
    let third = try ProcessLock(path: path)
    #expect(try third.tryLock())
    #expect(try !second.breakLock(ifOwnerIs: judged), "the lock now records another acquisition")
    #expect(try third.owner() != nil)
    try third.unlock()
    #expect(try !second.breakLock(ifOwnerIs: judged), "nothing to break")
    // The judged acquisition itself is removed.
    #expect(try second.tryLock())
    let current = try #require(try first.owner())
    // `false` also means "another breaker holds the breakers' flock": a child that another
    // test forks while one of these calls has the flock's descriptor open shares it until
    // that child exits (a flock belongs to the open file, which fork shares). Retried, as the
    // method's documentation says, for at most 20 s; a wrong `false` stays false and fails.
    let giveUp = MonotonicInstant.after(.seconds(20))
    var broke = try first.breakLock(ifOwnerIs: current)
    while !broke && !giveUp.hasPassed {
      sched_yield()
      broke = try first.breakLock(ifOwnerIs: current)
    }
    #expect(broke)
    #expect(try first.owner() == nil)
    #expect(throws: ProcessLockError.notOwner) { try second.unlock() }
  }

  @Test("tryLockBreakingStaleLock takes a free lock, leaves a live owner's, and takes a dead owner's", .runsExitTests)
  func tryLockBreakingStaleLock() async throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/stale.lock"
    let live = try ProcessLock(path: path)
    #expect(try live.tryLockBreakingStaleLock())
    let other = try ProcessLock(path: path)
    #expect(try !other.tryLockBreakingStaleLock(), "this process is alive")
    try live.unlock()

    // A child process takes the lock and dies holding it.
    await #expect(processExitsWith: .exitCode(0)) { [path = path as String] in
      let lock = try ProcessLock(path: path)
      exit(try lock.tryLock() ? 0 : 1)
    }
    #expect(try other.owner()?.isAlive == false)
    #expect(try other.tryLockBreakingStaleLock())
    #expect(try other.owner()?.processID == getpid())
    try other.unlock()
  }

  // MARK: Names that are not lock files

  @Test("a FIFO at the lock path makes owner() throw notARegularFile instead of blocking")
  func fifoAtTheLockPath() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/fifo.lock"
    try #require(mkfifo(path, 0o600) == 0)
    let lock = try ProcessLock(path: path)
    #expect(throws: ProcessLockError.notARegularFile(path: path)) { try lock.owner() }
    #expect(throws: ProcessLockError.notARegularFile(path: path)) { try lock.lockDate() }
    #expect(throws: ProcessLockError.notARegularFile(path: path)) { try lock.tryLockBreakingStaleLock() }
    #expect(try !lock.tryLock(), "the name is taken")
    #expect(try lock.breakLock(), "breakLock clears the name")
    #expect(try lock.tryLock())
    try lock.unlock()
  }

  @Test("a dangling symlink at the lock path is reported, not followed")
  func danglingSymlinkAtTheLockPath() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/dangling.lock"
    try #require(symlink(scratch.path + "/nowhere", path) == 0)
    let lock = try ProcessLock(path: path)
    #expect(throws: ProcessLockError.notARegularFile(path: path)) { try lock.owner() }
    #expect(throws: ProcessLockError.notARegularFile(path: path)) { try lock.tryLockBreakingStaleLock() }
    #expect(try !lock.tryLock())
    #expect(access(scratch.path + "/nowhere", F_OK) != 0, "nothing was created through the link")
  }

  @Test("a symlink to a real lock file at the lock path is reported, not followed")
  func symlinkToALockFileAtTheLockPath() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let real = try ProcessLock(path: scratch.path + "/real.lock")
    #expect(try real.tryLock())
    let path = scratch.path + "/link.lock"
    try #require(symlink(scratch.path + "/real.lock", path) == 0)
    let lock = try ProcessLock(path: path)
    #expect(throws: ProcessLockError.notARegularFile(path: path)) { try lock.owner() }
    #expect(throws: ProcessLockError.notARegularFile(path: path)) { try lock.breakLock(ifOwnerIs: real.owner()!) }
    #expect(try real.owner() != nil, "the real lock is untouched")
    try real.unlock()
  }
}

/// Forks `racers` processes that each take the lock `acquisitionsEach` times through
/// ``ProcessLock/tryLockBreakingStaleLock()``. Inside the lock each creates a marker file with
/// `O_EXCL` (which fails if another process is inside too) and removes it on the way out.
/// Every eighth acquisition is made by a short-lived grandchild that dies holding the lock,
/// so the others keep finding dead owners to break. Returns 0 when every racer saw only
/// exclusive sections, 1 otherwise.
func raceRecoveringProcesses(directory: String, racers: Int, acquisitionsEach: Int) -> Int32 {
  let path = directory + "/raced.lock"
  let marker = directory + "/inside"
  var children: [pid_t] = []
  for _ in 0..<racers {
    let child = fork()
    if child == 0 {
      armAlarm(seconds: 150)
      for acquisition in 0..<acquisitionsEach {
        if acquisition % 8 == 7 {
          // A holder that crashes: a grandchild takes the lock, leaves its section, and
          // exits without unlocking.
          let grandchild = fork()
          if grandchild == 0 { _exit(acquireAndLeave(path: path, marker: marker, unlocking: false)) }
          guard grandchild > 0, waitForExitStatus(grandchild) == 0 else { _exit(1) }
        } else if acquireAndLeave(path: path, marker: marker, unlocking: true) != 0 {
          _exit(1)
        }
      }
      _exit(0)
    }
    precondition(child > 0, "fork failed: errno \(errno)")
    children.append(child)
  }
  var failed = false
  for child in children where waitForExitStatus(child) != 0 { failed = true }
  return failed ? 1 : 0
}

/// Takes the lock (retrying, yielding in between), passes through the critical section
/// (marker created exclusively, then removed), and unlocks when `unlocking`. Returns 0, or 1
/// when the section was not exclusive or a call failed.
private func acquireAndLeave(path: String, marker: String, unlocking: Bool) -> Int32 {
  guard let lock = try? ProcessLock(path: path) else { return 1 }
  while true {
    do {
      if try lock.tryLockBreakingStaleLock() { break }
    } catch {
      return 1
    }
    sched_yield()
  }
  let inside = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
  if inside < 0 { return 1 }  // EEXIST: another process is in the section too
  close(inside)
  sched_yield()  // stay inside a little, so an overlap has room to show
  guard unlink(marker) == 0 else { return 1 }
  if unlocking {
    do {
      try lock.unlock()
    } catch {
      return 1  // notOwner: someone broke this live lock
    }
  }
  return 0
}
