import Glibc
import ProcessTestSupport
import Sync
import Testing

/// The diagnostics core. Everything that changes the process's diagnostics (switches,
/// handler, environment) runs as an exit test, in a fresh child process: the test process
/// is shared with the run-loop suites, whose stall tests set them in-process.
@Suite("Diagnostics core", .timeLimit(.minutes(3)))
struct DiagnosticsTests {
  @Test("the environment grammar: kinds with and without a mode, all, metrics, stall-ms, later items win")
  func grammar() throws {
    let plain = try Diagnostics.parse("stalls").get()
    #expect(plain.mode(of: .stalls) == .report)
    #expect(!plain.collectsRunLoopMetrics)
    #expect(plain.stallThreshold == nil)

    let full = try Diagnostics.parse("stalls=stop,metrics,stall-ms=50").get()
    #expect(full.mode(of: .stalls) == .stop)
    #expect(full.collectsRunLoopMetrics)
    #expect(full.stallThreshold == .milliseconds(50))

    #expect(try Diagnostics.parse("all").get().mode(of: .stalls) == .report)
    #expect(try Diagnostics.parse("all=stop,stalls=off").get().mode(of: .stalls) == .off)
    #expect(try Diagnostics.parse("stalls=report").get().mode(of: .stalls) == .report)
    #expect(try Diagnostics.parse("").get() == Diagnostics.Settings())
  }

  @Test("a value the grammar does not allow is refused with a message naming the item")
  func grammarRefusals() {
    func refusal(_ text: String) -> String? {
      if case .failure(let error) = Diagnostics.parse(text) { return error.message }
      return nil
    }
    #expect(refusal("stall")?.contains("unknown item stall") == true)
    #expect(refusal("stalls=loud")?.contains("stalls=loud") == true)
    #expect(refusal("stall-ms=0")?.contains("stall-ms") == true)
    #expect(refusal("stall-ms=fast")?.contains("stall-ms") == true)
    #expect(refusal("stall-ms")?.contains("stall-ms") == true)
    #expect(refusal("metrics=on")?.contains("metrics takes no value") == true)
    #expect(refusal("stalls,,metrics")?.contains("empty item") == true)
    #expect(refusal("stalls, metrics")?.contains("unknown item  metrics") == true)
  }

  @Test("a finding prints as one summary line and indented detail lines")
  func findingText() {
    let finding = Diagnostics.Finding(kind: .stalls, summary: "something stalled", details: ["a: 1", "b: 2"])
    #expect(finding.description == "threading-toolkit [stalls] something stalled\n    a: 1\n    b: 2")
    #expect(Diagnostics.Finding(kind: .stalls, summary: "s").description == "threading-toolkit [stalls] s")
  }

  @Test(
    "THREADING_TOOLKIT_DIAGNOSTICS is read at the first check and sets modes, metrics and the threshold", .runsExitTests
  )
  func environmentDecides() async {
    await #expect(processExitsWith: .success) {
      setenv(Diagnostics.environmentVariable, "stalls=stop,metrics,stall-ms=40", 1)
      guard Diagnostics.isOn(.stalls), Diagnostics.mode(of: .stalls) == .stop,
        Diagnostics.collectsRunLoopMetrics, Diagnostics.stallThreshold == .milliseconds(40)
      else { exit(1) }
      // Read once: a later change of the variable changes nothing; the API does.
      setenv(Diagnostics.environmentVariable, "stalls=off", 1)
      guard Diagnostics.mode(of: .stalls) == .stop else { exit(2) }
      Diagnostics.setMode(.report, for: .stalls)
      Diagnostics.collectsRunLoopMetrics = false
      Diagnostics.stallThreshold = .microseconds(10)
      guard Diagnostics.mode(of: .stalls) == .report, !Diagnostics.collectsRunLoopMetrics,
        Diagnostics.stallThreshold == .milliseconds(1)
      else { exit(3) }
    }
  }

  @Test("without the variable everything is off and the threshold is the default", .runsExitTests)
  func defaultsAreOff() async {
    await #expect(processExitsWith: .success) {
      unsetenv(Diagnostics.environmentVariable)
      guard !Diagnostics.isOn(.stalls), Diagnostics.mode(of: .stalls) == .off, !Diagnostics.collectsRunLoopMetrics,
        Diagnostics.stallThreshold == Diagnostics.defaultStallThreshold
      else { exit(1) }
    }
  }

  @Test(
    "a malformed THREADING_TOOLKIT_DIAGNOSTICS stops the process with a message naming the variable", .runsExitTests)
  func environmentRefused() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      setenv(Diagnostics.environmentVariable, "stalls,lock-ordr", 1)
      _ = Diagnostics.isOn(.stalls)
    }.map { result in
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(text.contains("THREADING_TOOLKIT_DIAGNOSTICS=stalls,lock-ordr"))
      #expect(text.contains("unknown item lock-ordr"))
    }
  }

  @Test("findings go to the replaced handler when their kind reports, and nowhere when it is off", .runsExitTests)
  func handlerReceivesFindings() async {
    await #expect(processExitsWith: .success) {
      final class Received: @unchecked Sendable {
        var summaries: [String] = []  // only the reporting (this) thread touches it
      }
      let received = Received()
      Diagnostics.reportHandler = { received.summaries.append($0.summary) }
      Diagnostics.setMode(.off, for: .stalls)
      Diagnostics.report(Diagnostics.Finding(kind: .stalls, summary: "while off"))
      Diagnostics.setMode(.report, for: .stalls)
      Diagnostics.report(Diagnostics.Finding(kind: .stalls, summary: "while on"))
      guard received.summaries == ["while on"] else { exit(1) }
    }
  }

  @Test("the default handler writes the finding to standard error", .runsExitTests)
  func defaultHandlerWritesToStandardError() async {
    await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      Diagnostics.setMode(.report, for: .stalls)
      Diagnostics.report(Diagnostics.Finding(kind: .stalls, summary: "to stderr", details: ["detail"]))
    }.map { result in
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(text.contains("threading-toolkit [stalls] to stderr\n    detail\n"))
    }
  }

  @Test("in stop mode a finding is reported, then the process stops with its summary", .runsExitTests)
  func stopModeStops() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Diagnostics.setMode(.stop, for: .stalls)
      Diagnostics.report(Diagnostics.Finding(kind: .stalls, summary: "fatal stall"))
    }.map { result in
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(text.contains("threading-toolkit [stalls] fatal stall"))
      #expect(text.contains("diagnostics (stalls=stop): fatal stall"))
    }
  }
}
