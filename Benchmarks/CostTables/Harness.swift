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
//
// Additions (optional for row files):
//   harness.measureInterleaved(id:group:operations:[(subject, body)])  - ours and peers
//     alternate sample by sample, so drift on a shared machine hits all of them alike.
//   harness.record(id:subject:group:values:unit:)  - rows that are not times (bytes).
// Ids that end in "-<integer>" (for example "mutex.contended-4") form a scaling series:
// the report prints them as a curve over the integer and charts them with --svg.
// Rows whose subject starts with "Sync.", "Threads." or "RunLoop." are this toolkit ("ours");
// every other subject is a peer.

#if canImport(Glibc)
  import Glibc
#endif

/// One measured row: a benchmark id, the subject measured, and per-sample values
/// (ns per operation unless `unit` says otherwise).
struct BenchmarkRow {
  var benchmark: String
  var subject: String
  var group: String
  var samples: [Double]
  /// "ns" for times, "bytes" for memory rows.
  var unit: String = "ns"
  /// How the row was measured, for the report ("21 samples x 100000 ops, 1 warm-up").
  var method: String = ""

  var sorted: [Double] { samples.sorted() }
  var median: Double {
    let s = sorted
    if s.isEmpty { return .nan }
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
  }
  var min: Double { samples.min() ?? .nan }
  var max: Double { samples.max() ?? .nan }

  /// This toolkit's own rows, as opposed to peers.
  var isOurs: Bool { Harness.isOurs(subject) }
}

/// Drives measurements and collects rows.
final class Harness {
  /// `--quick`: few samples, for CI to prove the benchmarks still run.
  let quick: Bool
  /// `--filter SUBSTRING`: only ids containing it run.
  let filter: String?
  private(set) var rows: [BenchmarkRow] = []

  /// Samples per row (after one warm-up run).
  var sampleCount: Int { quick ? 3 : 21 }

  init(quick: Bool, filter: String?) {
    self.quick = quick
    self.filter = filter
  }

  /// Whether a subject is this toolkit rather than a peer.
  static func isOurs(_ subject: String) -> Bool {
    subject.hasPrefix("Sync.") || subject.hasPrefix("Threads.") || subject.hasPrefix("RunLoop.")
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

  /// The iteration count for a row: `operations`, cut a hundredfold in `--quick` mode.
  func iterations(for operations: Int) -> Int {
    quick ? Swift.max(1, operations / 100) : operations
  }

  /// Measures `body(iterations)` and records ns per operation, one value per sample.
  func measure(
    id: String, subject: String, group: String, operations: Int = 100_000,
    _ body: (Int) -> Void
  ) {
    guard wants(id) else { return }
    let iterations = iterations(for: operations)
    let sampleCount = sampleCount
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
    rows[rows.count - 1].method = "median of \(sampleCount) samples x \(iterations) ops, 1 warm-up"
  }

  /// Records samples measured by the caller (ns per operation, one value per sample).
  func record(id: String, subject: String, group: String, nanoseconds: [Double]) {
    guard wants(id) else { return }
    rows.append(
      BenchmarkRow(
        benchmark: id, subject: subject, group: group, samples: nanoseconds,
        unit: Harness.defaultUnit(for: id),
        method: "median of \(nanoseconds.count) samples (timed by the row)"))
  }

  /// Records values that are not times, such as bytes of memory per thread.
  func record(id: String, subject: String, group: String, values: [Double], unit: String) {
    guard wants(id) else { return }
    rows.append(
      BenchmarkRow(
        benchmark: id, subject: subject, group: group, samples: values, unit: unit,
        method: "median of \(values.count) samples"))
  }

  /// Memory rows recorded through `record(nanoseconds:)` still print as bytes.
  static func defaultUnit(for id: String) -> String {
    let lower = id.lowercased()
    return lower.contains("memory") || lower.contains("stack") || lower.contains("bytes") ? "bytes" : "ns"
  }

  /// Measures several subjects of one id, alternating them sample by sample (the starting
  /// subject rotates each round) so machine drift hits ours and the peers alike. Each body
  /// runs `iterations` operations; ns per operation is recorded.
  func measureInterleaved(
    id: String, group: String, operations: Int = 100_000,
    _ subjects: [(subject: String, body: (Int) -> Void)]
  ) {
    sampleInterleaved(
      id: id, group: group, operations: operations,
      subjects.map { entry in
        (
          subject: entry.subject,
          body: { (iterations: Int) -> UInt64 in
            let start = Harness.now()
            entry.body(iterations)
            return Harness.now() - start
          }
        )
      })
  }

  /// Like `measureInterleaved`, but each body times itself and returns elapsed nanoseconds
  /// for its `iterations` operations (to leave set-up such as thread creation out).
  func sampleInterleaved(
    id: String, group: String, operations: Int = 100_000,
    _ subjects: [(subject: String, body: (Int) -> UInt64)]
  ) {
    guard wants(id), !subjects.isEmpty else { return }
    let iterations = iterations(for: operations)
    let sampleCount = sampleCount
    for entry in subjects { _ = entry.body(iterations) }  // warm-up
    var samples = [[Double]](repeating: [], count: subjects.count)
    for round in 0..<sampleCount {
      for offset in 0..<subjects.count {
        let index = (round + offset) % subjects.count
        let elapsed = subjects[index].body(iterations)
        samples[index].append(Double(elapsed) / Double(iterations))
      }
    }
    for (index, entry) in subjects.enumerated() {
      record(id: id, subject: entry.subject, group: group, nanoseconds: samples[index])
      rows[rows.count - 1].method =
        "median of \(sampleCount) samples x \(iterations) ops, 1 warm-up, interleaved with \(subjects.count - 1) other subjects"
    }
  }

  /// Appends rows read back from an earlier run (`--from-json`).
  func load(_ loaded: [BenchmarkRow]) {
    rows.append(contentsOf: loaded)
  }
}
