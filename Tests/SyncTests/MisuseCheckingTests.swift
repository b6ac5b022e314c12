import Glibc
import ProcessTestSupport
import Sync
import Testing

/// Exit tests: each runs in a fresh child process, where the mode is not decided yet.
@Suite("Misuse checking mode", .timeLimit(.minutes(3)))
struct MisuseCheckingTests {
  @Test("the mode is decided once: every read and every default lock agree with it")
  func decidedOnce() {
    let mode = MisuseChecking.mode
    #expect(MisuseChecking.mode == mode)
    #expect(MisuseChecking.isChecked == (mode == .checked))
    #expect(Lock().isChecked == (mode == .checked))
    #expect(SpinLock().isChecked == (mode == .checked))
    #expect(Lock(checked: mode != .checked).isChecked == (mode != .checked), "an explicit argument wins")
    MisuseChecking.mode = mode  // setting the mode already running is allowed
    #expect("\(MisuseChecking.Mode.checked)" == "checked" && "\(MisuseChecking.Mode.unchecked)" == "unchecked")
  }

  @Test("THREADING_TOOLKIT_CHECKS=checked makes a foreign unlock stop the process", .runsExitTests)
  func environmentChecked() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      setenv("THREADING_TOOLKIT_CHECKS", "checked", 1)
      precondition(MisuseChecking.mode == .checked)
      blocking {
        let mutex = Lock()
        mutex.lock()
        runConcurrently(1) { _ in mutex.unlock() }
      }
    }.map { result in
      #expect(
        String(decoding: result.standardErrorContent, as: UTF8.self)
          .contains("unlock() from a thread that does not hold the lock"))
    }
  }

  @Test("THREADING_TOOLKIT_CHECKS=unchecked lets another thread unlock on the holder's behalf", .runsExitTests)
  func environmentUnchecked() async {
    await #expect(processExitsWith: .success) {
      setenv("THREADING_TOOLKIT_CHECKS", "unchecked", 1)
      precondition(MisuseChecking.mode == .unchecked)
      blocking {
        let mutex = Lock()
        precondition(!mutex.isChecked)
        mutex.lock()
        runConcurrently(1) { _ in mutex.unlock() }
        precondition(mutex.tryLock(), "released by the other thread")
        mutex.unlock()
      }
    }
  }

  @Test("a mode set in code before first use overrides the environment", .runsExitTests)
  func setInCodeWins() async {
    await #expect(processExitsWith: .failure) {
      setenv("THREADING_TOOLKIT_CHECKS", "unchecked", 1)
      MisuseChecking.mode = .checked
      blocking {
        let lock = SpinLock()
        lock.lock()
        runConcurrently(1) { _ in lock.unlock() }
      }
    }
    await #expect(processExitsWith: .success) {
      setenv("THREADING_TOOLKIT_CHECKS", "checked", 1)
      MisuseChecking.mode = .unchecked
      precondition(MisuseChecking.mode == .unchecked && !Lock().isChecked)
    }
  }

  @Test("changing the mode after it was decided is reported", .runsExitTests)
  func lateChangeIsMisuse() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      setenv("THREADING_TOOLKIT_CHECKS", "unchecked", 1)
      _ = Lock()
      MisuseChecking.mode = .checked
    }.map { result in
      #expect(String(decoding: result.standardErrorContent, as: UTF8.self).contains("MisuseChecking misuse"))
    }
  }

  @Test("an unknown THREADING_TOOLKIT_CHECKS value is reported, naming the variable", .runsExitTests)
  func unknownEnvironmentValue() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      setenv("THREADING_TOOLKIT_CHECKS", "sometimes", 1)
      _ = MisuseChecking.mode
    }.map { result in
      #expect(
        String(decoding: result.standardErrorContent, as: UTF8.self).contains("THREADING_TOOLKIT_CHECKS=sometimes"))
    }
  }
}
