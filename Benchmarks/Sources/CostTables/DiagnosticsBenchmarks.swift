// Diagnostics rows: what a run-loop pass costs with run-loop metrics on, and with stall
// reports on, beside the same pass with both off (the baseline row, measured interleaved in
// the same run on the same loop).
//
//   diagnostics.runloop-pass                 one zero-timeout pass of a mode holding one
//                                            unsignalled source (nothing fires)
//   diagnostics.runloop-pass-with-callbacks  signal the source, queue one block, one
//                                            zero-timeout pass (two callbacks)
//
// The goal: metrics on within 1.05x of off.

import RunLoop
import Sync
import Threads

/// Registers the diagnostics rows.
func registerDiagnosticsBenchmarks(_ harness: Harness) {
  let group = "Diagnostics"
  let runLoop = RunLoop::RunLoop.current
  let mode = RunLoopMode("diagnostics-benchmark")
  let fired = Tally()
  let source = RunLoopSource(name: "benchmark source", perform: { fired.count &+= 1 })
  runLoop.add(source, forMode: mode)
  let stallsBefore = Diagnostics.mode(of: .stalls)

  /// The three settings, each switched on at the start of its samples.
  func subjects(_ pass: @escaping (Int) -> Void) -> [(subject: Subject, body: (Int) -> Void)] {
    [
      (
        subject: .peer("RunLoop pass, diagnostics off (baseline)"),
        body: { iterations in
          runLoop.metricsEnabled = false
          Diagnostics.setMode(.off, for: .stalls)
          pass(iterations)
        }
      ),
      (
        subject: .toolkit("RunLoop pass, metrics on"),
        body: { iterations in
          runLoop.metricsEnabled = true
          Diagnostics.setMode(.off, for: .stalls)
          pass(iterations)
        }
      ),
      (
        subject: .toolkit("RunLoop pass, stall reports on"),
        body: { iterations in
          runLoop.metricsEnabled = false
          Diagnostics.setMode(.report, for: .stalls)
          pass(iterations)
        }
      ),
    ]
  }

  if harness.wants("diagnostics.runloop-pass") {
    harness.measureInterleaved(
      id: "diagnostics.runloop-pass", group: group, operations: 200_000,
      subjects { iterations in
        for _ in 0..<iterations { _ = runLoop.run(mode: mode, timeout: .zero) }
      })
  }
  if harness.wants("diagnostics.runloop-pass-with-callbacks") {
    harness.measureInterleaved(
      id: "diagnostics.runloop-pass-with-callbacks", group: group, operations: 100_000,
      subjects { iterations in
        for _ in 0..<iterations {
          source.signal()
          runLoop.perform(inModes: [mode]) { fired.count &+= 1 }
          _ = runLoop.run(mode: mode, timeout: .zero)
        }
      })
  }
  runLoop.metricsEnabled = false
  Diagnostics.setMode(stallsBefore, for: .stalls)
  source.invalidate()
}

/// What the benchmark callbacks bump (all on this thread; blocks must be Sendable).
private final class Tally: @unchecked Sendable {
  var count = 0
}
