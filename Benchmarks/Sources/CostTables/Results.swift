// JSON output (`--json`), reading an earlier run back (`--compare`, `--from-json`) and the
// per-row change table. Foundation is allowed in benchmarks; only its JSON coding is used.

import Foundation

/// One row as written to JSON (the fields every report promises: benchmark, subject, median_ns,
/// min_ns, max_ns, samples; plus group, unit, method and values).
struct JSONRow: Codable {
  var benchmark: String
  var subject: String
  /// "toolkit" (this toolkit's row) or "peer".
  var role: String
  var group: String
  var unit: String
  // The report's JSON field names (snake case, as every consumer of the files reads them).
  // swift-format-ignore: AlwaysUseLowerCamelCase
  var median_ns: Double
  // swift-format-ignore: AlwaysUseLowerCamelCase
  var min_ns: Double
  // swift-format-ignore: AlwaysUseLowerCamelCase
  var max_ns: Double
  var samples: Int
  var method: String?
  /// Every sample, so charts and distributions can be redrawn from the file.
  var values: [Double]?
  /// The run's machine (kernel, architecture, cores, CPU model) and load averages before and
  /// after it: the same on every row of a file, so a row copied out of it still says where
  /// it was measured. Absent in files written before they were recorded.
  var machine: String?
  // swift-format-ignore: AlwaysUseLowerCamelCase
  var load_before: String?
  // swift-format-ignore: AlwaysUseLowerCamelCase
  var load_after: String?
  /// The run's mode line (full or `--quick`, samples per row) and ping-pong placements, as
  /// its report printed them.
  var mode: String?
  var placements: String?

  init(_ row: BenchmarkRow, run: RunInfo? = nil) {
    benchmark = row.benchmark
    subject = row.subject.name
    role = row.subject.role.rawValue
    group = row.group
    unit = row.unit
    median_ns = row.median
    min_ns = row.min
    max_ns = row.max
    samples = row.samples.count
    method = row.method
    values = row.samples
    machine = run?.machine
    load_before = run?.loadBefore
    load_after = run?.loadAfter
    mode = run?.mode
    placements = run?.placements
  }

  /// Back to a row; a file without values yields the median as its only sample.
  var row: BenchmarkRow {
    BenchmarkRow(
      benchmark: benchmark, subject: Subject(name: subject, role: Subject.Role(rawValue: role) ?? .peer), group: group,
      samples: values ?? [median_ns], unit: unit, method: method ?? "")
  }

  enum CodingKeys: String, CodingKey {
    // swift-format-ignore: AlwaysUseLowerCamelCase
    case benchmark, subject, role, group, unit, median_ns, min_ns, max_ns, samples, method, values, machine,
      load_before, load_after, mode, placements
  }

  init(from decoder: any Decoder) throws {
    let container = try decoder.container(keyedBy: CodingKeys.self)
    benchmark = try container.decode(String.self, forKey: .benchmark)
    subject = try container.decode(String.self, forKey: .subject)
    role = try container.decodeIfPresent(String.self, forKey: .role) ?? JSONRow.role(ofUnlabelled: subject)
    group = try container.decodeIfPresent(String.self, forKey: .group) ?? "Other"
    unit = try container.decodeIfPresent(String.self, forKey: .unit) ?? "ns"
    median_ns = try container.decode(Double.self, forKey: .median_ns)
    min_ns = try container.decodeIfPresent(Double.self, forKey: .min_ns) ?? median_ns
    max_ns = try container.decodeIfPresent(Double.self, forKey: .max_ns) ?? median_ns
    samples = try container.decodeIfPresent(Int.self, forKey: .samples) ?? 1
    method = try container.decodeIfPresent(String.self, forKey: .method)
    values = try container.decodeIfPresent([Double].self, forKey: .values)
    machine = try container.decodeIfPresent(String.self, forKey: .machine)
    load_before = try container.decodeIfPresent(String.self, forKey: .load_before)
    load_after = try container.decodeIfPresent(String.self, forKey: .load_after)
    mode = try container.decodeIfPresent(String.self, forKey: .mode)
    placements = try container.decodeIfPresent(String.self, forKey: .placements)
  }

  /// The role of a subject in a file whose rows carry no `role` field: such files named
  /// this toolkit's subjects "Sync.…", "Threads…" or "RunLoop…", or marked them "(Sync raw)";
  /// every other subject in them is a peer. Only files are read this way; rows measured in
  /// this run state their role where they are registered.
  static func role(ofUnlabelled subject: String) -> String {
    let isToolkit =
      subject.hasPrefix("Sync.") || subject.hasPrefix("Threads") || subject.hasPrefix("RunLoop")
      || subject.contains("(Sync raw)")
    return (isToolkit ? Subject.Role.toolkit : Subject.Role.peer).rawValue
  }
}

/// Where, under what load and how a run measured its rows.
struct RunInfo {
  var machine: String
  /// The 1, 5 and 15 minute load averages before and after the run, if readable.
  var loadBefore: String?
  var loadAfter: String?
  /// The report's mode line and ping-pong placement line (nil in files that predate them).
  var mode: String? = nil
  var placements: String? = nil
}

enum ResultsFile {
  static func write(_ rows: [BenchmarkRow], run: RunInfo?, to path: String) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    // NaN (a row with no samples) is not JSON; write it as a string rather than fail.
    encoder.nonConformingFloatEncodingStrategy = .convertToString(
      positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
    let data = try encoder.encode(rows.map { JSONRow($0, run: run) })
    try data.write(to: URL(fileURLWithPath: path))
  }

  static func read(_ path: String) throws -> [BenchmarkRow] {
    try readRun(path).rows
  }

  /// The rows of a file and the run it records (nil for files written before runs were
  /// recorded).
  static func readRun(_ path: String) throws -> (rows: [BenchmarkRow], run: RunInfo?) {
    // Foundation reports reading a directory only as "error 256".
    var info = stat()
    if stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR { throw Problem("it is a directory") }
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    let decoder = JSONDecoder()
    decoder.nonConformingFloatDecodingStrategy = .convertFromString(
      positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
    let rows = try decoder.decode([JSONRow].self, from: data)
    let run = rows.first.flatMap { row in
      row.machine.map {
        RunInfo(
          machine: $0, loadBefore: row.load_before, loadAfter: row.load_after, mode: row.mode,
          placements: row.placements)
      }
    }
    return (rows.map(\.row), run)
  }

  static func writeText(_ text: String, to path: String) throws {
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
  }

  /// Why `path` cannot be written as an output file, or nil when it can. Checked before
  /// measuring, so a mistyped path fails at once instead of losing a whole run's results.
  static func outputFileProblem(_ path: String) -> String? {
    var info = stat()
    if stat(path, &info) == 0 {
      if info.st_mode & S_IFMT == S_IFDIR { return "it is a directory" }
      return access(path, W_OK) == 0 ? nil : String(cString: strerror(errno))
    }
    let slash = path.lastIndex(of: "/")
    let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
    guard stat(directory, &info) == 0 else { return directory + ": " + String(cString: strerror(errno)) }
    guard info.st_mode & S_IFMT == S_IFDIR else { return directory + " is not a directory" }
    return access(directory, W_OK | X_OK) == 0 ? nil : directory + ": " + String(cString: strerror(errno))
  }

  /// Creates the chart directory `path` (and its parents) and checks it is writable; returns
  /// why not, or nil. Done before measuring, for the same reason as `outputFileProblem`.
  static func outputDirectoryProblem(_ path: String) -> String? {
    do {
      try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    } catch {
      return describe(error)
    }
    return access(path, W_OK | X_OK) == 0 ? nil : String(cString: strerror(errno))
  }

  /// A reason found before Foundation was asked.
  struct Problem: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
  }

  /// A short reason for a failed read, write or decode, instead of Foundation's error dump.
  static func describe(_ error: any Error) -> String {
    if let error = error as? Problem { return error.reason }
    if let error = error as? DecodingError {
      let context: DecodingError.Context
      switch error {
      case .dataCorrupted(let value): context = value
      case .keyNotFound(_, let value): context = value
      case .typeMismatch(_, let value): context = value
      case .valueNotFound(_, let value): context = value
      @unknown default: return "not a cost-tables --json file"
      }
      let location = context.codingPath.map(\.stringValue).joined(separator: ".")
      return "not a cost-tables --json file (a JSON array of rows with benchmark, subject and median_ns): "
        + (location.isEmpty ? "" : location + ": ") + context.debugDescription
    }
    let error = error as NSError
    if let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
      return String(cString: strerror(Int32(underlying.code)))
    }
    // The file errors that come without a POSIX error underneath.
    if error.domain == NSCocoaErrorDomain {
      switch CocoaError.Code(rawValue: error.code) {
      case .fileNoSuchFile, .fileReadNoSuchFile: return String(cString: strerror(ENOENT))
      case .fileReadNoPermission, .fileWriteNoPermission: return String(cString: strerror(EACCES))
      case .fileWriteFileExists: return "a file of that name exists"
      default: break
      }
    }
    return error.localizedDescription
  }
}

/// The change per row against an earlier run.
func compareTable(old: [BenchmarkRow], new: [BenchmarkRow], oldPath: String) -> ReportTable {
  var table = ReportTable(
    title: "Change against " + oldPath,
    columns: ["benchmark", "subject", "before", "now", "change", ""], rows: [])
  var oldByKey: [String: BenchmarkRow] = [:]
  for row in old { oldByKey[row.benchmark + "\u{1}" + row.subject.name] = row }
  var slower = 0
  var faster = 0
  var matched = Set<String>()
  for row in new {
    let key = row.benchmark + "\u{1}" + row.subject.name
    guard let before = oldByKey[key] else {
      table.rows.append([row.benchmark, row.subject.name, "-", Format.value(row.median, unit: row.unit), "new", ""])
      continue
    }
    matched.insert(key)
    let change = row.median / before.median - 1
    var flag = ""
    if change > 0.10 {
      flag = "SLOWER"
      slower += 1
    } else if change < -0.10 {
      flag = "faster"
      faster += 1
    }
    table.rows.append([
      row.benchmark, row.subject.name, Format.value(before.median, unit: before.unit),
      Format.value(row.median, unit: row.unit), Format.change(change), flag,
    ])
  }
  let missing = old.filter { !matched.contains($0.benchmark + "\u{1}" + $0.subject.name) }.count
  table.notes.append(
    "\(slower) rows more than 10% slower, \(faster) more than 10% faster; \(missing) rows of the earlier run not measured now."
  )
  table.notes.append("Absolute times on a shared VM move; compare ratios between ours and peers within each run too.")
  return table
}
