import Sync
import Testing

@testable import Threads

@Suite("Thread errors", .timeLimit(.minutes(3)))
struct ThreadErrorTests {
  @Test func configurationErrorDescriptionNamesTheFieldTheValueAndTheFix() {
    let tooSmall = ThreadConfigurationError.stackSizeTooSmall(8192, minimum: 16384)
    #expect(tooSmall.description == "stackSize 8192 is below the minimum 16384: use at least 16384 bytes")
    let cpu = ThreadConfigurationError.cpuAffinityOutOfRange(cpu: 2048, allowed: 0..<1024)
    #expect(cpu.description.hasPrefix("cpuAffinity names CPU 2048, outside 0..<1024"))
    let cases: [(ThreadConfigurationError, String)] = [
      (.stackSizeTooLarge(.max, maximum: 4096), "stackSize"),
      (.guardSizeNegative(-1), "guardSize -1"),
      (.guardSizeTooLarge(.max, maximum: 4096), "guardSize"),
      (.relativePriorityOutOfRange(1.5, allowed: 0...1), "relativePriority 1.5 is outside 0.0...1.0"),
      (.relativePriorityWithRealTimePolicy(.fifo(priority: 3)), "fifo(3)"),
      (.realTimePriorityOutOfRange(0, allowed: 1...99), "real-time priority 0 is outside 1...99"),
      (.cpuAffinityEmpty, "cpuAffinity is empty"),
    ]
    for (error, expected) in cases {
      #expect(error.description.contains(expected), "\(error.description)")
      #expect(error.description.contains(": "), "says what to change: \(error.description)")
    }
  }

  @Test func startErrorSystemErrorIsTheFailedCallOnlyForSystemFailures() {
    let failed = SystemCallError(call: "pthread_create", code: .tryAgain)
    #expect(ThreadStartError.system(failed).systemError == failed)
    #expect(ThreadStartError.system(failed).description == failed.description)
    let invalid = ThreadStartError.invalidConfiguration(.cpuAffinityEmpty)
    #expect(invalid.systemError == nil)
    #expect(invalid.description == "invalid thread configuration: \(ThreadConfigurationError.cpuAffinityEmpty)")
  }

  @Test func settingErrorSystemErrorIsTheFailedCallOnlyForSystemFailures() {
    let failed = SystemCallError(call: "setpriority", code: .permissionDenied)
    #expect(ThreadSettingError.system(failed).systemError == failed)
    #expect(ThreadSettingError.invalidValue(.cpuAffinityEmpty).systemError == nil)
    #expect(ThreadSettingError.invalidValue(.cpuAffinityEmpty).description.hasPrefix("invalid thread setting: "))
  }

  @Test func anInvalidConfigurationIsRefusedBeforeAnyThreadStarts() throws {
    var configuration = ThreadConfiguration()
    configuration.cpuAffinity = []
    let ran = TestBox(false)
    #expect(throws: ThreadStartError.invalidConfiguration(.cpuAffinityEmpty)) {
      try Thread.spawn(configuration: configuration) { ran.value = true }.join()
    }
    #expect(!ran.value)
  }
}

/// The documentation's catch patterns, compiled and run.
@Suite("Thread errors: documented patterns", .timeLimit(.minutes(3)))
struct ThreadErrorPatternTests {
  @Test func validateErrorCarriesTheMinimumToRetryWith() throws {
    var configuration = ThreadConfiguration()
    configuration.stackSize = 8 * 1024
    var fixed = false
    do throws(ThreadConfigurationError) {
      try configuration.validate()
    } catch .stackSizeTooSmall(_, let minimum) {
      configuration.stackSize = minimum
      fixed = true
    } catch {
      Issue.record("unexpected \(error)")
    }
    #expect(fixed)
    try configuration.validate()
  }

  @Test func startErrorCasesAreMatchedByPattern() {
    var configuration = ThreadConfiguration()
    configuration.cpuAffinity = [4096]
    var problem: ThreadConfigurationError?
    do throws(ThreadStartError) {
      let worker = try Thread.spawn(configuration: configuration) {}
      worker.join()
    } catch .invalidConfiguration(let found) {
      problem = found
    } catch let error where error.systemError?.code == .tryAgain {
      Issue.record("unexpected \(error)")
    } catch {
      Issue.record("unexpected \(error)")
    }
    #expect(problem == .cpuAffinityOutOfRange(cpu: 4096, allowed: 0..<1024))
  }
}
