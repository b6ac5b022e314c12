import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// A finding and when the handler received it.
struct ReceivedFinding: Sendable {
  let finding: Diagnostics.Finding
  let at: MonotonicInstant
}

/// The findings about one named item, received while a test switched stall reports on.
final class StallReports: @unchecked Sendable {
  let recorder = Recorder<ReceivedFinding>()
  /// Signalled once for each "stalled" report whose summary names `watched` (set before the
  /// loop runs; read by the handler on the monitor's thread).
  let stalled = Semaphore()
  private let watched: Box<[String]> = Box([])

  /// Signals `stalled` for every stall report naming `name`.
  func watch(_ name: String) { watched.update { $0.append(name) } }

  func receive(_ finding: Diagnostics.Finding) {
    recorder.append(ReceivedFinding(finding: finding, at: .now))
    if finding.summary.contains(" stalled: ") && watched.value.contains(where: { finding.summary.contains($0) }) {
      stalled.signal()
    }
  }

  /// The "stalled" reports (the callback still running) whose summary names `name`.
  func stalls(naming name: String) -> [ReceivedFinding] {
    recorder.snapshot.filter { $0.finding.summary.contains(" stalled: ") && $0.finding.summary.contains(name) }
  }

  /// The "stall ended" reports (the callback returned) whose summary names `name`.
  func endings(naming name: String) -> [ReceivedFinding] {
    recorder.snapshot.filter { $0.finding.summary.hasPrefix("stall ended") && $0.finding.summary.contains(name) }
  }
}

/// Runs `body` with stall reports on at `threshold`, going to a fresh `StallReports`; puts
/// the process's mode, threshold and handler back afterwards. Findings about other suites'
/// callbacks (running in parallel) land in the same list: tests look only at their own
/// item names.
func withStallReports(threshold: Duration, _ body: (StallReports) -> Void) {
  let reports = StallReports()
  let previous = (Diagnostics.mode(of: .stalls), Diagnostics.stallThreshold, Diagnostics.reportHandler)
  Diagnostics.reportHandler = { reports.receive($0) }
  Diagnostics.stallThreshold = threshold
  Diagnostics.setMode(.report, for: .stalls)
  defer {
    Diagnostics.setMode(previous.0, for: .stalls)
    Diagnostics.stallThreshold = previous.1
    Diagnostics.reportHandler = previous.2
  }
  body(reports)
}

/// Runs `body` on a new thread named `name` and joins it.
func runOnThread(named name: String, _ body: @escaping @Sendable () -> Void) {
  TestThread.spawn(name: name, body).join()
}

/// In-process tests of the stall monitor. Serialized: they share the process's diagnostics
/// switches and handler (no other suite sets them in-process).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct StallReportTests {
  static let threshold = Duration.milliseconds(20)

  @Test func aTimerCallbackRunningPastTheThresholdIsReportedOnceWhileItRunsAndOnceWhenItReturns() {
    withStallReports(threshold: Self.threshold) { reports in
      let name = "slow timer (stall test)"
      reports.watch(name)
      let seen = Box<(start: MonotonicInstant, reportedWhileRunning: Bool)?>(nil)
      runOnThread(named: "stall-test-loop") {
        let runLoop = RunLoop.current
        runLoop.add(
          RunLoopTimer(after: .zero, name: name) { _ in
            let start = MonotonicInstant.now
            // The report must come while this callback still runs.
            let reported = reports.stalled.wait(timeout: .seconds(10))
            // The scenario: a callback of at least 50 ms.
            Thread.sleep(until: start + .milliseconds(50))
            seen.value = (start, reported)
          }, forMode: .default)
        _ = runLoop.run(mode: .default, timeout: .seconds(20))
      }
      let start = seen.value?.start ?? .distantFuture
      #expect(seen.value?.reportedWhileRunning == true)
      let stalls = reports.stalls(naming: name)
      #expect(stalls.count == 1)
      if let stall = stalls.first {
        let delay = stall.at - start
        #expect(delay >= Self.threshold - .milliseconds(2) && delay <= Self.threshold + .milliseconds(100), "\(delay)")
        #expect(stall.finding.summary.contains("thread \"stall-test-loop\""))
        #expect(stall.finding.summary.contains("timer \"\(name)\""))
        #expect(stall.finding.summary.contains("mode kCFRunLoopDefaultMode"))
      }
      let endings = reports.endings(naming: name)
      #expect(endings.count == 1)
      if let ending = endings.first {
        #expect(ending.finding.details.contains { $0.hasPrefix("total: ") })
        #expect(ending.at - start >= .milliseconds(50))
      }
    }
  }

  @Test func aQuickCallbackIsNotReported() {
    withStallReports(threshold: Self.threshold) { reports in
      let quick = "quick timer (stall test)"
      let marker = "marker timer (stall test)"
      reports.watch(marker)
      let markerReported = Box(false)
      runOnThread(named: "stall-quick-loop") {
        let runLoop = RunLoop.current
        runLoop.add(RunLoopTimer(after: .zero, name: quick) { _ in }, forMode: .default)
        // Fires after the quick one; returns once the monitor reported it, so the monitor has
        // scanned the loop after the quick callback ended.
        runLoop.add(
          RunLoopTimer(after: .milliseconds(1), name: marker) { _ in
            markerReported.value = reports.stalled.wait(timeout: .seconds(10))
          }, forMode: .default)
        _ = runLoop.run(mode: .default, timeout: .seconds(20))
      }
      #expect(markerReported.value)
      #expect(reports.stalls(naming: quick).isEmpty)
      #expect(reports.endings(naming: quick).isEmpty)
    }
  }

  @Test func aCallbackRunningTheLoopNestedIsNotReportedWhileTheNestedRunServesTheLoop() {
    withStallReports(threshold: Self.threshold) { reports in
      let outer = "outer timer (stall test)"
      let marker = "nested marker timer (stall test)"
      reports.watch(marker)
      let markerReported = Box(false)
      runOnThread(named: "stall-nested-loop") {
        let runLoop = RunLoop.current
        let nested = RunLoopMode("stall-test-nested")
        // Keeps the nested mode non-empty, so the nested run sleeps until its deadline.
        let keepAlive = RunLoopTimer(after: .seconds(3600)) { _ in }
        runLoop.add(keepAlive, forMode: nested)
        runLoop.add(
          RunLoopTimer(after: .zero, name: outer) { _ in
            // Three thresholds in a nested run, nearly all asleep.
            _ = runLoop.run(mode: nested, timeout: Self.threshold * 3)
            runLoop.add(
              RunLoopTimer(after: .zero, name: marker) { _ in
                markerReported.value = reports.stalled.wait(timeout: .seconds(10))
              }, forMode: .default)
          }, forMode: .default)
        _ = runLoop.run(mode: .default, timeout: .seconds(20))
        keepAlive.invalidate()
      }
      #expect(markerReported.value)
      #expect(reports.stalls(naming: outer).isEmpty)
    }
  }

  @Test func sourcesObserversAndBlocksAreReportedByNameAndAnUnnamedItemByItsCreationSite() {
    withStallReports(threshold: Self.threshold) { reports in
      // Each callback below returns once its own stall was reported (they run one by one).
      reports.watch("thread \"stall-kinds-loop\"")
      runOnThread(named: "stall-kinds-loop") {
        let runLoop = RunLoop.current
        let wait: @Sendable () -> Void = { _ = reports.stalled.wait(timeout: .seconds(10)) }
        let source = RunLoopSource(name: "commands (stall test)", perform: wait)
        runLoop.add(source, forMode: .default)
        source.signal()
        let observer = RunLoopObserver(activities: .beforeSources, repeats: false, name: "frames (stall test)") {
          _, _ in
          wait()
        }
        runLoop.add(observer, forMode: .default)
        runLoop.perform(inModes: [.default], wait)
        // Unnamed: named after this line.
        runLoop.add(RunLoopTimer(after: .zero) { _ in wait() }, forMode: .default)
        _ = runLoop.run(mode: .default, timeout: .zero)
        _ = runLoop.run(mode: .default, timeout: .zero)
        source.invalidate()
      }
      #expect(reports.stalls(naming: "source \"commands (stall test)\"").count == 1)
      #expect(reports.stalls(naming: "observer \"frames (stall test)\" (beforeSources)").count == 1)
      #expect(
        reports.stalls(naming: "thread \"stall-kinds-loop\"").contains { $0.finding.summary.contains("queued block") })
      #expect(reports.stalls(naming: "timer \"RunLoopTests/StallReportTests.swift:").count == 1)
    }
  }

  @Test(.runsExitTests) func inStopModeAStalledCallbackStopsTheProcessNamingIt() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Diagnostics.stallThreshold = .milliseconds(10)
      Diagnostics.setMode(.stop, for: .stalls)
      blocking {
        let runLoop = RunLoop.current
        runLoop.add(
          RunLoopTimer(after: .zero, name: "stuck timer") { _ in
            // The scenario: a callback that never returns in time.
            Thread.sleep(for: .seconds(30))
          }, forMode: .default)
        _ = runLoop.run(mode: .default, timeout: .seconds(60))
      }
    }.map { result in
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(text.contains("timer \"stuck timer\" has run for"))
      #expect(text.contains("(stalls=stop)"))
    }
  }
}
