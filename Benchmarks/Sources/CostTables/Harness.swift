// The measurement harness every benchmark file registers its rows with.
//
// Contract for benchmark files (one file per measured area: LockBenchmarks.swift,
// ThreadBenchmarks.swift, ...):
//   func registerLockBenchmarks(_ harness: Harness)   // listed in main.swift
// and inside, for each row:
//   harness.measure(id: "mutex.uncontended", subject: .toolkit("Sync.Lock"), group: "Table 4-2",
//                   operations: 1_000) { iterations in for _ in 0..<iterations { ... } }
// `body` runs `iterations` operations; the harness chooses the count, warms up, takes
// samples and records ns per operation. For measurements the harness cannot drive (thread
// creation latency, wake-up round trips), time them yourself and call
//   harness.record(id:subject:group:nanoseconds:)  with one value per sample.
// Peers (raw pthread, Synchronization, Foundation) are rows with the same id and a
// `.peer(...)` subject, measured in the same run, interleaved with ours where possible.
// Whether a row is this toolkit's or a peer's is its subject's role (`Subject`), stated
// where the row is registered.
//
// Additions (optional for benchmark files):
//   harness.measureInterleaved(id:group:operations:[(subject, body)])  - ours and peers
//     alternate sample by sample, so drift on a shared machine hits all of them alike.
//   harness.record(id:subject:group:values:unit:)  - rows that are not times (bytes).
// Ids that end in "-<integer>" (for example "mutex.contended-4") form a scaling series:
// the report prints them as a curve over the integer and charts them with --svg.

#if canImport(Glibc)
  import Glibc
#endif

/// One measured row: a benchmark id, the subject measured, and per-sample values
/// (ns per operation unless `unit` says otherwise).
struct BenchmarkRow {
  var benchmark: String
  var subject: Subject
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
  var isOurs: Bool { subject.isToolkit }
}

/// Drives measurements and collects rows.
final class Harness {
  /// `--quick`: few samples, for CI to prove the benchmarks still run.
  let quick: Bool
  /// `--filter SUBSTRING`: only ids containing it run.
  let filter: String?
  private(set) var rows: [BenchmarkRow] = []

  /// Samples per row (after one warm-up run).
  var sampleCount: Int { quick ? 3 : (sampleCountOverride ?? 21) }

  /// Fewer samples per row while set: each of the repeated unpinned ping-pong runs takes
  /// fewer (`repeatedRuns`), so the report can afford many runs.
  var sampleCountOverride: Int?

  /// Samples for a row that picks its own count (`rowDefault` in a full run): 3 with
  /// `--quick`, and never more than `sampleCountOverride` while that is set.
  func sampleCount(rowDefault: Int) -> Int {
    if quick { return 3 }
    return sampleCountOverride.map { Swift.min($0, rowDefault) } ?? rowDefault
  }

  /// Appended to every id measured while set: "@two-cpus" and "@one-cpu" mark the pinned
  /// reference placements of the ping-pong rows (see `PingPongPlacement`).
  var idSuffix = ""

  init(quick: Bool, filter: String?) {
    self.quick = quick
    self.filter = filter
  }

  /// Whether a row with this id should run under the current filter.
  func wants(_ id: String) -> Bool {
    guard let filter else { return true }
    return (id + idSuffix).contains(filter)
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
    id: String, subject: Subject, group: String, operations: Int = 100_000,
    _ body: (Int) -> Void
  ) {
    guard wants(id) else { return }
    withoutActuallyEscaping(body) { body in
      measureInterleaved(id: id, group: group, operations: operations, [(subject: subject, body: body)])
    }
  }

  /// Records samples measured by the caller (ns per operation, one value per sample).
  func record(id: String, subject: Subject, group: String, nanoseconds: [Double]) {
    guard wants(id) else { return }
    rows.append(
      BenchmarkRow(
        benchmark: id + idSuffix, subject: subject, group: group, samples: nanoseconds,
        unit: Harness.defaultUnit(for: id),
        method: Harness.defaultUnit(for: id) == "ns"
          ? "median of \(nanoseconds.count) samples (timed by the row)"
          : "median of \(nanoseconds.count) samples (measured by the row)"))
  }

  /// Records values that are not times, such as bytes of memory per thread.
  func record(id: String, subject: Subject, group: String, values: [Double], unit: String) {
    guard wants(id) else { return }
    rows.append(
      BenchmarkRow(
        benchmark: id + idSuffix, subject: subject, group: group, samples: values, unit: unit,
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
    _ subjects: [(subject: Subject, body: (Int) -> Void)]
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

  /// Longest a single sample may take (seconds). A subject whose estimate exceeds it runs
  /// fewer operations per sample (the row's method says so): a collapsing peer must not
  /// turn a one-minute report into an hour.
  var sampleBudget: Double { quick ? 0.02 : 0.25 }

  /// Like `measureInterleaved`, but each body times itself and returns elapsed nanoseconds
  /// for its `iterations` operations (to leave set-up such as thread creation out).
  ///
  /// Per subject: a probe run of 1% of the operations estimates the sample time; if it is
  /// over `sampleBudget` the subject's operations are cut to fit. Then one warm-up run, then
  /// `sampleCount` rounds in which every subject takes one sample, starting subject rotating.
  func sampleInterleaved(
    id: String, group: String, operations: Int = 100_000, samples requestedSamples: Int? = nil,
    _ subjects: [(subject: Subject, body: (Int) -> UInt64)]
  ) {
    guard wants(id), !subjects.isEmpty else { return }
    let began = Harness.now()
    defer { progress(id, since: began) }
    let iterations = iterations(for: operations)
    // A row may ask for fewer samples when each is long; --quick caps it at the quick count.
    let sampleCount = Swift.min(self.sampleCount, requestedSamples ?? self.sampleCount)
    var chosen = [Int](repeating: iterations, count: subjects.count)
    for (index, entry) in subjects.enumerated() {
      let probeIterations = Swift.max(1, iterations / 100)
      let probe = Double(entry.body(probeIterations)) / 1e9
      let estimate = probe * Double(iterations) / Double(probeIterations)
      if estimate > sampleBudget {
        chosen[index] = Swift.max(probeIterations, Int(Double(iterations) * sampleBudget / estimate))
      }
      _ = entry.body(chosen[index])  // warm-up
    }
    var samples = [[Double]](repeating: [], count: subjects.count)
    var cutWhileSampling = [Bool](repeating: false, count: subjects.count)
    for round in 0..<sampleCount {
      for offset in 0..<subjects.count {
        let index = (round + offset) % subjects.count
        let elapsed = subjects[index].body(chosen[index])
        samples[index].append(Double(elapsed) / Double(chosen[index]))
        // A subject that collapses now and then (a priority-inheritance futex under
        // contention takes seconds per sample) gets fewer operations from here on.
        let seconds = Double(elapsed) / 1e9
        if seconds > 4 * sampleBudget, chosen[index] > 1 {
          chosen[index] = Swift.max(1, Int(Double(chosen[index]) * sampleBudget / seconds))
          cutWhileSampling[index] = true
        }
      }
    }
    for (index, entry) in subjects.enumerated() {
      record(id: id, subject: entry.subject, group: group, nanoseconds: samples[index])
      var method = "median of \(sampleCount) samples x \(chosen[index]) ops, 1 warm-up"
      if cutWhileSampling[index] {
        method =
          "median of \(sampleCount) samples, 1 warm-up; ops per sample cut to \(chosen[index]) after a sample over \(Format.fixed(4 * sampleBudget, 1)) s"
      }
      if subjects.count > 1 { method += ", interleaved with \(subjects.count - 1) other subjects" }
      if chosen[index] < iterations {
        method += " (cut from \(iterations) ops: too slow for the \(Format.fixed(sampleBudget, 2)) s sample budget)"
      }
      rows[rows.count - 1].method = method
    }
  }

  /// Whether to print one line per measured id on stderr (`--progress`; on by default when
  /// stderr is a terminal).
  var showsProgress = isatty(2) != 0

  /// One line on stderr per measured id, so a long run shows where it is.
  func progress(_ id: String, since began: UInt64) {
    guard showsProgress else { return }
    let seconds = Double(Harness.now() - began) / 1e9
    var line = "  measured \(id) in \(Format.fixed(seconds, 2)) s\n"
    line.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
  }

  /// Runs `register` `runs` times and keeps, per row, one value per run: that run's median.
  /// The merged row's median is the median of the runs' medians and its max the worst run,
  /// so one unlucky run (the scheduler settling two ping-pong threads on two CPUs, say)
  /// shows as a worst run instead of deciding the row. Each toolkit row's method also lists
  /// its ratio, run by run, to `reference` (a peer row measured in every run), named by
  /// subject, since a table's method lines are listed apart from its rows.
  func repeatedRuns(_ runs: Int, samplesPerRun: Int, reference: (id: String, subject: Subject), _ register: () -> Void)
  {
    let start = rows.count
    let previousOverride = sampleCountOverride
    sampleCountOverride = samplesPerRun
    defer { sampleCountOverride = previousOverride }
    var perRun: [[BenchmarkRow]] = []
    for _ in 0..<Swift.max(1, runs) {
      register()
      perRun.append(Array(rows[start...]))
      rows.removeSubrange(start...)
    }
    func find(_ run: [BenchmarkRow], _ id: String, _ subject: Subject) -> BenchmarkRow? {
      run.first { $0.benchmark == id && $0.subject == subject }
    }
    let referenceMedians = perRun.map { find($0, reference.id, reference.subject)?.median }
    for row in perRun[0] {
      let medians = perRun.map { find($0, row.benchmark, row.subject)?.median }
      var merged = row
      merged.samples = medians.compactMap { $0 }
      merged.method = "median of \(merged.samples.count) runs' medians (max = the worst run); each run: " + row.method
      let pairs = zip(medians, referenceMedians).compactMap { ours, raw in ours.flatMap { o in raw.map { o / $0 } } }
      if row.isOurs, !pairs.isEmpty, row.benchmark != reference.id || row.subject != reference.subject {
        let within = pairs.filter { $0 <= 1.2 }.count
        merged.method +=
          "; per run, \(row.subject.name) vs \(reference.subject.name): "
          + pairs.map { Format.fixed($0, 2) + "x" }.joined(separator: " ")
          + " (\(within) of \(pairs.count) runs within 1.2x, worst \(Format.fixed(pairs.max() ?? .nan, 2))x)"
      }
      rows.append(merged)
    }
  }

  /// Appends rows read back from an earlier run (`--from-json`).
  func load(_ loaded: [BenchmarkRow]) {
    rows.append(contentsOf: loaded)
  }
}
