// The report: the guide's two tables, the extended tables per group, the scaling series and
// the closing list of rows where this toolkit is not ahead. Built once as `ReportTable`s and
// rendered as aligned text (stdout) or Markdown (`--markdown FILE`).

#if canImport(Glibc)
  import Glibc
#endif

/// One table of the report, independent of how it is rendered.
struct ReportTable {
  var title: String
  var columns: [String]
  var rows: [[String]]
  /// Lines printed under the table (how measured, findings).
  var notes: [String] = []
  /// A paragraph printed above the table.
  var intro: String = ""

  /// Aligned plain text: first column left, the rest right.
  func text() -> String {
    var widths = columns.map(\.count)
    for row in rows {
      for (index, cell) in row.enumerated() where index < widths.count {
        widths[index] = Swift.max(widths[index], cell.count)
      }
    }
    func line(_ cells: [String]) -> String {
      var parts: [String] = []
      for (index, width) in widths.enumerated() {
        let cell = index < cells.count ? cells[index] : ""
        let pad = String(repeating: " ", count: width - cell.count)
        parts.append(index == 0 ? cell + pad : pad + cell)
      }
      return "  " + parts.joined(separator: "  ")
    }
    var out = "\n" + title + "\n" + String(repeating: "=", count: title.count) + "\n"
    if !intro.isEmpty { out += intro + "\n" }
    out += line(columns) + "\n"
    out += "  " + widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n"
    for row in rows { out += line(row) + "\n" }
    for note in notes { out += "  " + note + "\n" }
    return out
  }

  /// GitHub-flavoured Markdown.
  func markdown() -> String {
    func escape(_ cell: String) -> String { cell.markdownEscaped.replacingAll("|", with: "\\|") }
    var out = "\n### " + title.markdownEscaped + "\n\n"
    if !intro.isEmpty { out += intro.markdownEscaped + "\n\n" }
    out += "| " + columns.map(escape).joined(separator: " | ") + " |\n"
    out += "|" + columns.enumerated().map { $0.offset == 0 ? "---" : "---:" }.joined(separator: "|") + "|\n"
    for row in rows { out += "| " + row.map(escape).joined(separator: " | ") + " |\n" }
    if !notes.isEmpty {
      out += "\n"
      for note in notes { out += "- " + note.markdownEscaped + "\n" }
    }
    return out
  }
}

extension String {
  /// The text with `<` escaped, so a subject such as "Sync.LockedValue<Int>" renders as
  /// written instead of as an HTML tag that Markdown viewers drop.
  var markdownEscaped: String { replacingAll("<", with: "\\<") }

  /// Foundation-free replacement of every occurrence of `target`.
  func replacingAll(_ target: Character, with replacement: String) -> String {
    var out = ""
    for character in self {
      if character == target { out += replacement } else { out.append(character) }
    }
    return out
  }
}

// MARK: - Formatting

enum Format {
  /// A value in its unit, with a readable scale: "15.2 ns", "35.1 us", "512 KiB".
  static func value(_ value: Double, unit: String) -> String {
    if value.isNaN { return "n/a" }
    if unit == "bytes" {
      if value >= 1024 * 1024 { return fixed(value / (1024 * 1024), 1) + " MiB" }
      if value >= 1024 { return fixed(value / 1024, 1) + " KiB" }
      return fixed(value, 0) + " B"
    }
    if unit != "ns" { return fixed(value, 1) + " " + unit }
    if value >= 1_000_000 { return fixed(value / 1_000_000, 2) + " ms" }
    if value >= 10_000 { return fixed(value / 1_000, 1) + " us" }
    if value >= 1_000 { return fixed(value / 1_000, 2) + " us" }
    return fixed(value, 1) + " ns"
  }

  /// `value` with `digits` decimals, without Foundation.
  static func fixed(_ value: Double, _ digits: Int) -> String {
    if value.isNaN { return "n/a" }
    if value.isInfinite { return value > 0 ? "inf" : "-inf" }
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let rounded = (abs(value) * scale).rounded()
    // Past Int's range (a file read back may hold any number) `Int(_:)` would trap.
    if rounded >= 9.0e18 { return String(value) }
    let sign = value < 0 && rounded != 0 ? "-" : ""
    let whole = Int(rounded / scale)
    let fraction = Int(rounded - Double(whole) * scale)
    if digits == 0 { return sign + String(whole) }
    var fractionText = String(fraction)
    while fractionText.count < digits { fractionText = "0" + fractionText }
    return sign + String(whole) + "." + fractionText
  }

  /// A ratio such as "0.84x".
  static func ratio(_ value: Double) -> String {
    value.isNaN ? "n/a" : fixed(value, 2) + "x"
  }

  /// A signed percentage change such as "+12.0%".
  static func change(_ value: Double) -> String {
    if value.isNaN { return "n/a" }
    return (value >= 0 ? "+" : "") + fixed(value * 100, 1) + "%"
  }
}

// MARK: - Row queries

/// The rows of one run, grouped for the report.
struct RunResults {
  let rows: [BenchmarkRow]

  /// Ids in the order they were first recorded.
  var ids: [String] {
    var seen = Set<String>()
    return rows.compactMap { seen.insert($0.benchmark).inserted ? $0.benchmark : nil }
  }

  /// Groups in the order they were first recorded.
  var groups: [String] {
    var seen = Set<String>()
    return rows.compactMap { seen.insert($0.group).inserted ? $0.group : nil }
  }

  func rows(id: String) -> [BenchmarkRow] {
    let matching = rows.filter { $0.benchmark == id }
    return matching.filter(\.isOurs) + matching.filter { !$0.isOurs }
  }

  /// Units of rows that describe a run rather than rank it (fewer is not better): they get
  /// no best peer, no ratio and no place in the not-ahead table.
  static let descriptiveUnits: Set<String> = ["switches/1M"]

  /// The peer with the lowest median for `id`, among the peers named `among` when given.
  func bestPeer(id: String, among names: [String]? = nil) -> BenchmarkRow? {
    let peers = rows(id: id).filter { !$0.isOurs && !$0.median.isNaN && names?.contains($0.subject.name) != false }
    if let unit = peers.first?.unit, Self.descriptiveUnits.contains(unit) { return nil }
    return peers.min { $0.median < $1.median }
  }

  /// The peers an ours row of `id` is compared with: `subject`'s like-for-like peers in the
  /// rows that compare like for like (`comparesLikeForLike`), nil (every peer) elsewhere.
  static func likeForLikePeers(id: String, of subject: Subject) -> [String]? {
    likeForLikePeerNames(id: id, subject: subject.name)
  }

  /// The peer an ours row of `id` is compared with: the best of `likeForLikePeers`.
  func comparedPeer(id: String, for subject: Subject) -> BenchmarkRow? {
    bestPeer(id: id, among: Self.likeForLikePeers(id: id, of: subject))
  }

  /// "0.84x (pthread)" for an ours row; "best" or a ratio for peers.
  func ratioText(_ row: BenchmarkRow) -> String {
    guard let best = row.isOurs ? comparedPeer(id: row.benchmark, for: row.subject) : bestPeer(id: row.benchmark)
    else { return "no peer" }
    if !row.isOurs && best.subject == row.subject { return "best peer" }
    return Format.ratio(row.median / best.median) + (row.isOurs ? " (" + best.subject.name + ")" : "")
  }
}

/// A scaling series: ids "<base>-<n>" for several n.
struct Series {
  let base: String
  /// (n, id), ascending n.
  let points: [(n: Int, id: String)]

  /// Splits "mutex.contended-4" into ("mutex.contended", 4).
  static func split(_ id: String) -> (base: String, n: Int)? {
    guard let dash = id.lastIndex(of: "-") else { return nil }
    let tail = id[id.index(after: dash)...]
    guard !tail.isEmpty, let n = Int(tail) else { return nil }
    return (String(id[..<dash]), n)
  }

  /// Every series with at least two points, in the order first recorded.
  static func all(in results: RunResults) -> [Series] {
    var order: [String] = []
    var points: [String: [(n: Int, id: String)]] = [:]
    for id in results.ids {
      guard let (base, n) = split(id) else { continue }
      if points[base] == nil { order.append(base) }
      points[base, default: []].append((n, id))
    }
    return order.compactMap { base in
      let sorted = points[base]!.sorted { $0.n < $1.n }
      return sorted.count >= 2 ? Series(base: base, points: sorted) : nil
    }
  }

  var ids: Set<String> { Set(points.map(\.id)) }

  /// Subjects seen in any point, ours first.
  func subjects(in results: RunResults) -> [Subject] {
    var seen = Set<Subject>()
    var ordered: [Subject] = []
    for point in points {
      for row in results.rows(id: point.id) where seen.insert(row.subject).inserted {
        ordered.append(row.subject)
      }
    }
    return ordered.filter(\.isToolkit) + ordered.filter { !$0.isToolkit }
  }

  /// Median per n for one subject (nil where not measured).
  func medians(subject: Subject, in results: RunResults) -> [(n: Int, value: Double?)] {
    points.map { point in
      (point.n, results.rows(id: point.id).first { $0.subject == subject }?.median)
    }
  }

  /// Least-squares slope of log(value) against log(n): 0 constant, 1 linear.
  static func slope(_ values: [(n: Int, value: Double?)]) -> Double? {
    let pairs = values.compactMap { point -> (Double, Double)? in
      guard let value = point.value, value > 0, point.n > 0 else { return nil }
      return (log(Double(point.n)), log(value))
    }
    guard pairs.count >= 2 else { return nil }
    let meanX = pairs.map(\.0).reduce(0, +) / Double(pairs.count)
    let meanY = pairs.map(\.1).reduce(0, +) / Double(pairs.count)
    var numerator = 0.0
    var denominator = 0.0
    for (x, y) in pairs {
      numerator += (x - meanX) * (y - meanY)
      denominator += (x - meanX) * (x - meanX)
    }
    return denominator == 0 ? nil : numerator / denominator
  }

  /// The growth a slope describes, in words.
  static func growth(_ slope: Double?) -> String {
    guard let slope else { return "n/a" }
    let text = " (slope " + Format.fixed(slope, 2) + ")"
    if slope < -0.15 { return "falling" + text }
    if slope < 0.15 { return "constant" + text }
    if slope < 0.6 { return "sub-linear, ~log" + text }
    if slope < 1.2 { return "linear" + text }
    return "SUPER-LINEAR" + text
  }
}

// MARK: - The report

struct Report {
  let results: RunResults
  let quick: Bool
  let sampleCount: Int
  /// /proc/loadavg before and after the run: other tenants of a shared machine move
  /// contended figures most of all (with a busy second core, threads run one at a time).
  var loadBefore: String? = nil
  var loadAfter: String? = nil
  /// The results file the figures were read from (`--from-json`), or nil when measured now.
  var readFrom: String? = nil
  /// The machine and load that file records, when it does.
  var readRun: RunInfo? = nil

  /// The 1, 5 and 15 minute load averages, if readable.
  static func loadAverage() -> String? {
    guard let file = fopen("/proc/loadavg", "r") else { return nil }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 128)
    guard fgets(&buffer, Int32(buffer.count), file) != nil else { return nil }
    let line = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return line.split(separator: " ").prefix(3).joined(separator: " ")
  }

  /// A guide table row: item, guide figure, and the candidate ids (first measured wins;
  /// ids matched by substring when `match` is set).
  struct GuideItem {
    var item: String
    var guide: String
    var ids: [String]
    var match: String? = nil
  }

  static let table42: [GuideItem] = [
    GuideItem(item: "Mutex acquisition", guide: "~0.2 us (200 ns)", ids: ["mutex.uncontended"]),
    GuideItem(item: "Atomic compare-and-swap", guide: "~0.05 us (50 ns)", ids: ["cas.uncontended"]),
  ]

  static let table21: [GuideItem] = [
    GuideItem(
      item: "Kernel data structures", guide: "~1 KB",
      ids: ["thread.kernel-objects-bytes", "thread.kernel-stack-bytes", "thread.kernel-slab-bytes"], match: "kernel"),
    GuideItem(
      item: "Stack space", guide: "512 KB secondary (8 MB main)",
      ids: ["thread.stack-reserved-bytes", "thread.stack-resident-bytes"], match: "stack"),
    GuideItem(
      item: "Creation time", guide: "~90 us (mean and median)",
      ids: ["thread.create-to-start", "thread.create-to-start.mean"]),
    GuideItem(item: "Create + join", guide: "-", ids: ["thread.create-join"]),
  ]

  /// All tables, in print order.
  func tables() -> [ReportTable] {
    var tables = [
      guideTable(
        title: "Table 4-2: mutex and atomic costs (uncontended, multithreaded process)",
        items: Report.table42),
      guideTable(title: "Table 2-1: thread creation costs", items: Report.table21),
    ]
    let series = Series.all(in: results)
    let seriesIds = series.reduce(into: Set<String>()) { $0.formUnion($1.ids) }
    // A series whose points sit in several groups (one per thread count) is printed once,
    // after the first group that holds one of its points.
    var printed = Set<String>()
    for group in results.groups {
      let ids = results.ids.filter { id in
        !seriesIds.contains(id) && results.rows.contains { $0.benchmark == id && $0.group == group }
      }
      if !ids.isEmpty { tables.append(detailTable(group: group, ids: ids)) }
      for entry in series where results.rows.contains(where: { $0.group == group && entry.ids.contains($0.benchmark) })
      {
        if printed.insert(entry.base).inserted { tables.append(scalingTable(entry)) }
      }
    }
    tables.append(notAheadTable())
    return tables
  }

  /// Resolves a guide item to the ids measured in this run (or its first id, unmeasured);
  /// an id already shown for an earlier item (`taken`) is not repeated.
  func resolve(_ item: GuideItem, taken: inout Set<String>) -> [String] {
    var found = item.ids.filter { id in !taken.contains(id) && results.rows.contains { $0.benchmark == id } }
    if let match = item.match {
      for id in results.ids
      where id.contains(match) && !found.contains(id) && !taken.contains(id) && Series.split(id) == nil {
        found.append(id)
      }
    }
    taken.formUnion(found)
    return found.isEmpty ? [item.ids[0]] : found
  }

  func guideTable(title: String, items: [GuideItem]) -> ReportTable {
    var taken = Set<String>()
    let resolved = items.map { ($0, resolve($0, taken: &taken)) }
    // Peer columns: every peer subject of an id that also has a row of ours, in order seen.
    // An id with no row of ours is a fact about the machine (kernel memory per thread): its
    // rows go in the toolkit column, one line each, rather than into peer columns.
    var peers: [String] = []
    for (_, ids) in resolved {
      for id in ids where results.rows(id: id).contains(where: \.isOurs) {
        for row in results.rows(id: id) where !row.isOurs && !peers.contains(row.subject.name) {
          peers.append(row.subject.name)
        }
      }
    }
    var table = ReportTable(
      title: title,
      columns: ["item", "guide (2008)", "this toolkit"] + peers + ["vs best peer"],
      rows: [])
    for (item, ids) in resolved {
      for id in ids {
        let rows = results.rows(id: id)
        let ours = rows.filter(\.isOurs)
        let label = item.item + " [" + id + "]"
        let peerCells = peers.map { peer in
          rows.first { $0.subject.name == peer }.map { Format.value($0.median, unit: $0.unit) } ?? "-"
        }
        if rows.isEmpty {
          table.rows.append([label, item.guide, "not measured"] + peers.map { _ in "-" } + ["-"])
          table.notes.append(id + ": not measured in this run (its rows file is not wired in, or --filter)")
          continue
        }
        if ours.isEmpty {
          for row in rows {
            table.rows.append(
              [label, item.guide, Format.value(row.median, unit: row.unit) + " (" + row.subject.name + ")"]
                + peers.map { _ in "-" } + ["same for every thread"])
          }
        }
        for row in ours {
          let subjectLabel = ours.count > 1 ? label + " " + row.subject.name : label
          table.rows.append(
            [subjectLabel, item.guide, Format.value(row.median, unit: row.unit) + " (" + row.subject.name + ")"]
              + peerCells + [results.ratioText(row)])
        }
        table.notes.append(howMeasured(id: id))
      }
    }
    table.notes.append("vs best peer: this toolkit's median / the fastest peer's median (below 1.00x = faster).")
    return table
  }

  /// "id: method; subject median [min-max]; ..." for the notes under a table.
  func howMeasured(id: String) -> String {
    let rows = results.rows(id: id)
    guard let first = rows.first else { return id + ": not measured" }
    let spreads = rows.map { row in
      row.subject.name + " " + Format.value(row.median, unit: row.unit) + " [min "
        + Format.value(row.min, unit: row.unit) + ", max " + Format.value(row.max, unit: row.unit) + "]"
    }
    return id + ": " + (first.method.isEmpty ? "" : first.method + ". ") + spreads.joined(separator: "; ")
  }

  func detailTable(group: String, ids: [String]) -> ReportTable {
    var table = ReportTable(
      title: "Extended: " + group,
      columns: ["benchmark", "subject", "median", "min", "max", "samples", "vs best peer"], rows: [])
    var methods: [String] = []
    for id in ids {
      for row in results.rows(id: id) {
        table.rows.append([
          row.benchmark, row.subject.name, Format.value(row.median, unit: row.unit),
          Format.value(row.min, unit: row.unit),
          Format.value(row.max, unit: row.unit), String(row.samples.count), results.ratioText(row),
        ])
        if !methods.contains(row.method) { methods.append(row.method) }
      }
    }
    table.notes = methods.filter { !$0.isEmpty }.map { "Method: " + $0 }
    return table
  }

  func scalingTable(_ series: Series) -> ReportTable {
    let subjects = series.subjects(in: results)
    let unit = results.rows(id: series.points[0].id).first?.unit ?? "ns"
    var table = ReportTable(
      title: "Scaling: " + series.base + "-N (median per operation)",
      columns: ["subject"] + series.points.map { "N=" + String($0.n) } + ["growth with N", "worst sample"], rows: [])
    var findings: [String] = []
    for subject in subjects {
      let medians = series.medians(subject: subject, in: results)
      let growth = Series.growth(Series.slope(medians))
      let worst = series.points.compactMap { point -> (n: Int, value: Double)? in
        guard let row = results.rows(id: point.id).first(where: { $0.subject == subject }) else { return nil }
        return (point.n, row.max)
      }.max { $0.value < $1.value }
      let worstText = worst.map { Format.value($0.value, unit: unit) + " (N=" + String($0.n) + ")" } ?? "-"
      table.rows.append(
        [subject.name] + medians.map { $0.value.map { Format.value($0, unit: unit) } ?? "-" } + [growth, worstText])
      if let worst, let median = medians.first(where: { $0.n == worst.n })?.value, worst.value > 20 * median {
        findings.append(
          "Finding: " + subject.name + " has samples " + Format.fixed(worst.value / median, 0) + "x its median at N="
            + String(worst.n) + " (" + Format.value(worst.value, unit: unit)
            + " per operation): it collapses now and then.")
      }
      if growth.hasPrefix("SUPER-LINEAR") {
        findings.append("Finding: " + subject.name + " grows super-linearly in " + series.base + ": " + growth + ".")
      }
    }
    // Ratio rows: each of ours against the best peer at every N (the best like-for-like
    // peer where the rows compare like for like).
    for subject in subjects where subject.isToolkit {
      let ratios = series.points.map { point -> String in
        guard let ours = results.rows(id: point.id).first(where: { $0.subject == subject }),
          let best = results.comparedPeer(id: point.id, for: subject)
        else { return "-" }
        return Format.ratio(ours.median / best.median)
      }
      let peers = RunResults.likeForLikePeers(id: series.points[0].id, of: subject)
      let label = peers.map { " / best of " + $0.joined(separator: ", ") } ?? " / best peer"
      table.rows.append([subject.name + label] + ratios + ["", ""])
    }
    if let first = results.rows(id: series.points[0].id).first { table.notes.append("Method: " + first.method) }
    if series.base.contains("contended") {
      table.notes.append(
        "Per operation = wall time from a common start gate to the last join / total operations across all threads; a flat row is constant total throughput."
      )
    }
    table.notes.append("Growth: least-squares slope of log(median) over log(N); 0 = constant, 1 = linear.")
    table.notes += findings
    return table
  }

  /// Every row where a subject of ours is not ahead of the best peer.
  func notAheadTable() -> ReportTable {
    var table = ReportTable(
      title: "Where this toolkit is not ahead of the best peer",
      columns: ["benchmark", "subject", "ours", "best peer", "ratio"], rows: [])
    for id in results.ids {
      for row in results.rows(id: id) where row.isOurs {
        guard let best = results.comparedPeer(id: id, for: row.subject), row.median >= best.median else { continue }
        table.rows.append([
          id, row.subject.name, Format.value(row.median, unit: row.unit),
          Format.value(best.median, unit: best.unit) + " (" + best.subject.name + ")",
          Format.ratio(row.median / best.median),
        ])
      }
    }
    if results.rows.isEmpty {
      table.notes.append("No rows were measured.")
    } else if table.rows.isEmpty {
      table.notes.append("None: every row of ours is ahead of its best peer in this run.")
    }
    table.notes.append(
      "In the contention.* and fairness.* rows each lock is compared with its like-for-like peers only (the scaling tables name them)."
    )
    table.notes.append("Reasons belong in the README's closing note; a ratio within a few percent is noise here.")
    return table
  }

  /// This machine: kernel, architecture, online cores and CPU model.
  static func machineDescription() -> String {
    var system = utsname()
    uname(&system)
    func field<T>(_ value: T) -> String {
      withUnsafeBytes(of: value) { raw in
        String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
      }
    }
    let cores = sysconf(Int32(_SC_NPROCESSORS_ONLN))
    return field(system.sysname) + " " + field(system.release) + " " + field(system.machine) + ", "
      + String(cores) + " online cores" + (cpuModel().map { ", " + $0 } ?? "")
  }

  /// The run's mode: this run's, or the one the file read records.
  var modeLine: String {
    let measured =
      "Mode: " + (quick ? "--quick (few samples: the figures prove the benchmarks run, nothing more)" : "full")
      + "; up to " + String(sampleCount)
      + " samples per row after one warm-up (each row says); peers interleaved with ours."
    guard readFrom != nil else { return measured }
    guard let recorded = readRun?.mode else { return "Mode: not recorded in the file (each row's method says)." }
    return recorded
  }

  /// The header: machine, mode, caveats.
  func header() -> [String] {
    let machine = Report.machineDescription()
    var lines = [
      "cost-tables: the guide's cost tables on this machine, beside the peers, in one run",
      readFrom.map { path in
        guard let measuredOn = readRun?.machine else {
          return "Figures read from " + path + ", measured by an earlier run: the file does not record that run's"
            + " machine or load (this machine: " + machine + ")"
        }
        return "Figures read from " + path + ", measured by an earlier run on: " + measuredOn
      } ?? "Machine: " + machine,
      modeLine,
      "Every figure was taken in a multithreaded process (one thread started and joined first).",
      readFrom == nil ? PingPongPlacement.summary : readRun?.placements ?? "Ping-pong rows: not recorded in the file.",
      "Absolute times on a shared VM move from run to run; the ratios measured in one run are the claim.",
    ]
    let loads = readFrom == nil ? (loadBefore, loadAfter) : (readRun?.loadBefore, readRun?.loadAfter)
    if let loadBefore = loads.0, let loadAfter = loads.1 {
      lines.append(
        "Load average (1/5/15 min) before the run: " + loadBefore + "; after: " + loadAfter
          + ". Above the core count, other work shares the cores and contended threads run more one at a time.")
    }
    if results.rows.isEmpty { lines.append("No rows ran (check --filter).") }
    return lines
  }

  /// The CPU model from /proc/cpuinfo, if readable.
  static func cpuModel() -> String? {
    guard let file = fopen("/proc/cpuinfo", "r") else { return nil }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 512)
    while fgets(&buffer, Int32(buffer.count), file) != nil {
      let line = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
      if line.hasPrefix("model name"), let colon = line.firstIndex(of: ":") {
        return String(line[line.index(after: colon)...]).trimmingSpaces()
      }
    }
    return nil
  }

  func text() -> String {
    header().joined(separator: "\n") + "\n" + tables().map { $0.text() }.joined()
  }

  func markdown() -> String {
    "## Cost tables\n\n" + header().map { $0.markdownEscaped + "  " }.joined(separator: "\n") + "\n"
      + tables().map { $0.markdown() }.joined()
  }
}

extension String {
  func trimmingSpaces() -> String {
    var scalars = Substring(self)
    while let first = scalars.first, first == " " || first == "\t" || first == "\n" { scalars.removeFirst() }
    while let last = scalars.last, last == " " || last == "\t" || last == "\n" { scalars.removeLast() }
    return String(scalars)
  }
}
