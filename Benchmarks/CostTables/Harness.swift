// The measurement harness every benchmark file registers its rows with.
//
// Contract for benchmark files (one file per area: RowsSync.swift, RowsThreads.swift, ...):
//   func registerSyncBenchmarks(_ harness: Harness)   // called from main.swift
// and inside, for each row:
//   harness.measure(id: "mutex.uncontended", subject: "Sync.Mutex", group: "Table 4-2",
//                   operations: 1_000) { iterations in for _ in 0..<iterations { ... } }
// `body` runs `iterations` operations; the harness chooses the count, warms up, takes
// samples and records ns per operation. For measurements the harness cannot drive (thread
// creation latency, wake-up round trips), time them yourself and call
//   harness.record(id:subject:group:nanoseconds:)  with one value per sample.
// Peers (raw pthread, Synchronization, Foundation) are rows with the same id and another
// subject, measured in the same run, interleaved with ours where possible.

#if canImport(Glibc)
  import Glibc
#endif

/// One measured row: a benchmark id, the subject measured, and per-sample ns/op.
struct BenchmarkRow {
  var benchmark: String
  var subject: String
  var group: String
  var samples: [Double]

  var sorted: [Double] { samples.sorted() }
  var median: Double {
    let s = sorted
    if s.isEmpty { return .nan }
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
  }
  var min: Double { samples.min() ?? .nan }
  var max: Double { samples.max() ?? .nan }
}

/// Drives measurements and collects rows.
final class Harness {
  /// `--quick`: few samples, for CI to prove the benchmarks still run.
  let quick: Bool
  /// `--filter SUBSTRING`: only ids containing it run.
  let filter: String?
  private(set) var rows: [BenchmarkRow] = []

  init(quick: Bool, filter: String?) {
    self.quick = quick
    self.filter = filter
  }

  /// Whether a row with this id should run under the current filter.
  func wants(_ id: String) -> Bool {
    guard let filter else { return true }
    return id.contains(filter)
  }

  /// Nanoseconds on the monotonic clock.
  static func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
  }

  /// Measures `body(iterations)` and records ns per operation, one value per sample.
  func measure(
    id: String, subject: String, group: String, operations: Int = 100_000,
    _ body: (Int) -> Void
  ) {
    guard wants(id) else { return }
    let iterations = quick ? Swift.max(1, operations / 100) : operations
    let sampleCount = quick ? 3 : 21
    body(iterations)  // warm-up
    var samples: [Double] = []
    samples.reserveCapacity(sampleCount)
    for _ in 0..<sampleCount {
      let start = Harness.now()
      body(iterations)
      let elapsed = Harness.now() - start
      samples.append(Double(elapsed) / Double(iterations))
    }
    record(id: id, subject: subject, group: group, nanoseconds: samples)
  }

  /// Records samples measured by the caller (ns per operation, one value per sample).
  func record(id: String, subject: String, group: String, nanoseconds: [Double]) {
    guard wants(id) else { return }
    rows.append(BenchmarkRow(benchmark: id, subject: subject, group: group, samples: nanoseconds))
  }
}
