// Helpers for tests that fork: waiting for a child and bounding a child's life with an
// alarm. Plain Glibc and nothing of the toolkit, so every test target may use them,
// SyncTests and ThreadsTests included (which must not trust the primitives they test).

#if canImport(Glibc)
  import Glibc
#endif

/// Ends the calling process with SIGALRM after `seconds`, so a hang in a child process fails
/// fast instead of hanging the test. The test runner's threads block most signals (the mask
/// survives fork and is inherited by new threads): SIGALRM is let through on the calling
/// thread with its default action. Exits with status 3 when that cannot be arranged.
public func armAlarm(seconds: UInt32) {
  var alarmOnly = sigset_t()
  sigemptyset(&alarmOnly)
  sigaddset(&alarmOnly, SIGALRM)
  var defaultAction = sigaction()
  defaultAction.__sigaction_handler.sa_handler = SIG_DFL
  guard sigaction(SIGALRM, &defaultAction, nil) == 0, pthread_sigmask(SIG_UNBLOCK, &alarmOnly, nil) == 0 else {
    _exit(3)
  }
  alarm(seconds)
}

/// Waits for the child `pid` to end (retrying after `EINTR`) and returns its wait status
/// (0: exited with 0). Stops the process when `waitpid` fails otherwise (not a child).
public func waitForChild(_ pid: pid_t) -> Int32 {
  var status: Int32 = 0
  while waitpid(pid, &status, 0) < 0 {
    precondition(errno == EINTR, "waitpid failed: errno \(errno)")
  }
  return status
}

/// Waits for the child `pid` as ``waitForChild(_:)`` does and returns its exit status, or -1
/// when it did not exit normally (killed by a signal, as a misuse stop or an alarm is).
public func waitForExitStatus(_ pid: pid_t) -> Int32 {
  let status = waitForChild(pid)
  // WIFEXITED / WEXITSTATUS, spelled out (the macros are not imported).
  return status & 0x7f == 0 ? (status >> 8) & 0xff : -1
}
