// cost-tables: the guide's cost tables on this machine, beside the peers, in one run.

import CBenchmarkShims

#if canImport(Glibc)
  import Glibc
#endif

/// Every area's rows, in report order. Merging an area adds one line here.
let registrations: [(Harness) -> Void] = [
  registerMutexBenchmarks,
  registerAtomicBenchmarks,
  registerLockBenchmarks,
  registerPingPongBenchmarks,
  registerOnceBenchmarks,
  registerSynchronizedBenchmarks,
  registerThreadBenchmarks,
  registerRunLoopBenchmarks,
  registerScalingBenchmarks,
  registerDiagnosticsBenchmarks,
  registerPriorityInheritanceBenchmarks,
  registerContentionBenchmarks,
  registerReadWriteFairnessBenchmarks,
  registerPoolBenchmarks,
  registerLockDiagnosticsBenchmarks,
  registerLockHooksBenchmarks,
  registerReadWriteLockHooksBenchmarks,
  registerExecutorBenchmarks,
]

/// The ping-pong rows in each placement the options ask for: unpinned first (the headline,
/// what users get: `PingPongPlacement.unpinnedRuns` runs in one report, each row's median of
/// the runs' medians with the worst run as its max), then the pinned references under ids
/// ending in "@two-cpus" and "@one-cpu".
func registerPingPongBenchmarks(_ harness: Harness) {
  // The rows whose two threads hand work back and forth (condition hand-off, semaphore
  // ping-pong, run-loop wake, port and perform round trips). Where the scheduler puts the
  // two threads decides these figures as much as the code does.
  let pingPongRegistrations: [(Harness) -> Void] = [
    registerHandOffBenchmarks,
    registerCrossThreadWakeBenchmarks,
    registerEmbeddingBenchmarks,
    registerPortBenchmarks,
    registerExecutorHopBenchmarks,
    registerExecutorActorBenchmarks,
  ]
  for placement in PingPongPlacement.placements {
    PingPongPlacement.mode = placement
    harness.idSuffix = placement.idSuffix
    defer { harness.idSuffix = "" }
    if placement == .unpinned {
      harness.repeatedRuns(
        harness.quick ? 2 : PingPongPlacement.unpinnedRuns, samplesPerRun: 5,
        reference: (id: "runloop.cross-thread-wake", subject: .peer("raw eventfd ping-pong (round trip)"))
      ) {
        for register in pingPongRegistrations { register(harness) }
      }
    } else {
      for register in pingPongRegistrations { register(harness) }
    }
  }
}

/// Prints to stderr (errors must not mix into a report piped to a file).
func printError(_ text: String) {
  var line = text + "\n"
  line.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
}

let costTablesUsage = """
  usage: cost-tables [options]

  Measures the guide's cost tables (Table 4-2: mutex and compare-and-swap; Table 2-1: thread
  creation) and the extended tables (every lock, condition, thread and run-loop row, and the
  scaling series) for this toolkit and its peers (raw pthread, Synchronization, Foundation),
  interleaved in one run, and prints them with the ratio to the best peer.

  options:
    --quick              few iterations and samples: the whole run takes seconds (for CI);
                         the figures prove the benchmarks run, not speed
    --filter SUBSTRING   run only benchmark ids containing SUBSTRING (e.g. mutex, contended);
                         fails when no id contains it
    --json FILE          also write the rows as JSON: benchmark, subject, role (toolkit or
                         peer), group, unit, median_ns, min_ns, max_ns, samples, method,
                         values, and the run's machine, load_before, load_after, mode and
                         placements on every row
    --markdown FILE      also write the tables as Markdown (for the README)
    --svg DIR            also write SVG charts to DIR: one per scaling series (e.g. lock
                         contention over 1-16 threads), bars per group (Table 4-2 among
                         them), timer lateness (DIR is created if missing)
    --compare OLD.json   print the change per row against an earlier --json run
    --from-json FILE     do not measure: report (and chart) the rows of an earlier run
    --progress           print each benchmark id on stderr as it finishes (default when
                         stderr is a terminal)
    --ping-pong-placement all|unpinned|two-cpus|one-cpu
                         where the two threads of hand-off and round-trip rows run: all
                         (default) measures them unpinned (left to the scheduler, as users
                         run them: the headline, 10 runs in one report, median of the runs'
                         medians and the worst run) and then pinned to two different CPUs
                         (ids ending "@two-cpus") and to one CPU ("@one-cpu", where the
                         toolkit's own overhead weighs most); any other value measures only
                         that placement
    --help, -h           this text

  Files named are read, and output paths checked, before anything is measured. Exit status:
  0 done, 1 a file could not be read or written or no row ran, 2 a bad command line.

  Build and run in release mode:  scripts/cost-tables (swift run -c release --package-path Benchmarks cost-tables)
  """

/// The command line, parsed. (Kept out of top-level globals so row files can name their
/// own helpers freely.)
struct CostTablesOptions {
  var quick = false
  var jsonPath: String?
  var markdownPath: String?
  var svgDirectory: String?
  var comparePath: String?
  var fromJSONPath: String?
  var filter: String?
  var progress = false

  init(_ commandLine: [String]) {
    var arguments = commandLine.dropFirst()
    func value(for option: String) -> String {
      guard let value = arguments.popFirst(), !value.hasPrefix("--") else {
        printError("cost-tables: \(option) needs a value\n\n" + costTablesUsage)
        exit(2)
      }
      return value
    }
    while let argument = arguments.popFirst() {
      switch argument {
      case "--quick": quick = true
      case "--progress": progress = true
      case "--json": jsonPath = value(for: argument)
      case "--markdown": markdownPath = value(for: argument)
      case "--svg": svgDirectory = value(for: argument)
      case "--compare": comparePath = value(for: argument)
      case "--from-json": fromJSONPath = value(for: argument)
      case "--filter": filter = value(for: argument)
      case "--ping-pong-placement":
        let name = value(for: argument)
        if name == "all" {
          PingPongPlacement.placements = PingPongPlacement.Mode.allCases
        } else if let mode = PingPongPlacement.Mode(rawValue: name) {
          PingPongPlacement.placements = [mode]
        } else {
          printError("cost-tables: --ping-pong-placement takes all, unpinned, two-cpus or one-cpu, not \(name)\n")
          exit(2)
        }
      case "--help", "-h":
        print(costTablesUsage)
        exit(0)
      default:
        printError("cost-tables: unknown option \(argument)\n\n" + costTablesUsage)
        exit(2)
      }
    }
  }
}

/// Measures (or loads), prints and writes everything the options ask for.
@MainActor
func runCostTables(_ options: CostTablesOptions) -> Int32 {
  let loadBefore = Report.loadAverage()
  _ = PingPongPlacement.allowed  // read the process's CPUs before any thread is pinned
  let harness = Harness(quick: options.quick, filter: options.filter)
  if options.progress { harness.showsProgress = true }
  // Every file named is read, and every output checked, before anything is measured: a
  // mistyped path must not cost a full run (or its results).
  var oldRows: [BenchmarkRow]? = nil
  if let comparePath = options.comparePath {
    do {
      oldRows = try ResultsFile.read(comparePath)
    } catch {
      printError("cost-tables: cannot read \(comparePath): \(ResultsFile.describe(error))")
      return 1
    }
  }
  for path in [options.jsonPath, options.markdownPath].compactMap({ $0 }) {
    if let problem = ResultsFile.outputFileProblem(path) {
      printError("cost-tables: cannot write \(path): \(problem)")
      return 1
    }
  }
  if let svgDirectory = options.svgDirectory, let problem = ResultsFile.outputDirectoryProblem(svgDirectory) {
    printError("cost-tables: cannot write charts to \(svgDirectory): \(problem)")
    return 1
  }
  var readRun: RunInfo? = nil
  if let fromJSONPath = options.fromJSONPath {
    do {
      let file = try ResultsFile.readRun(fromJSONPath)
      readRun = file.run
      harness.load(file.rows.filter { harness.wants($0.benchmark) })
    } catch {
      printError("cost-tables: cannot read \(fromJSONPath): \(ResultsFile.describe(error))")
      return 1
    }
  } else {
    // glibc's locks skip their atomics until a second thread has existed.
    BenchThreads.makeProcessMultithreaded()
    for register in registrations { register(harness) }
  }
  // An empty report is a mistake (a mistyped --filter, an empty file), not a result.
  if harness.rows.isEmpty {
    if let filter = options.filter {
      printError("cost-tables: no benchmark id contains \"\(filter)\" (Benchmarks/Results/latest.txt lists them)")
    } else {
      printError("cost-tables: \(options.fromJSONPath ?? "the run") has no rows")
    }
    return 1
  }

  var report = Report(results: RunResults(rows: harness.rows), quick: options.quick, sampleCount: harness.sampleCount)
  if options.fromJSONPath == nil {
    report.loadBefore = loadBefore
    report.loadAfter = Report.loadAverage()
  } else {
    report.readFrom = options.fromJSONPath
    report.readRun = readRun
  }
  print(report.text())

  var failed = false
  if let comparePath = options.comparePath, let oldRows {
    print(compareTable(old: oldRows, new: harness.rows, oldPath: comparePath).text())
  }
  if let jsonPath = options.jsonPath {
    do {
      // A file re-written from another keeps the run it records, or records none when that
      // file has none: its rows were not measured on this machine.
      let run =
        options.fromJSONPath != nil
        ? readRun
        : RunInfo(
          machine: Report.machineDescription(), loadBefore: report.loadBefore, loadAfter: report.loadAfter,
          mode: report.modeLine, placements: PingPongPlacement.summary)
      try ResultsFile.write(harness.rows, run: run, to: jsonPath)
      print("Wrote \(harness.rows.count) rows to \(jsonPath)")
    } catch {
      printError("cost-tables: cannot write \(jsonPath): \(ResultsFile.describe(error))")
      failed = true
    }
  }
  if let markdownPath = options.markdownPath {
    do {
      try ResultsFile.writeText(report.markdown(), to: markdownPath)
      print("Wrote the Markdown tables to \(markdownPath)")
    } catch {
      printError("cost-tables: cannot write \(markdownPath): \(ResultsFile.describe(error))")
      failed = true
    }
  }
  if let svgDirectory = options.svgDirectory {
    do {
      let written = try Charts(results: report.results).write(to: svgDirectory)
      print("Wrote \(written.count) SVG charts to \(svgDirectory): " + written.joined(separator: ", "))
    } catch {
      printError("cost-tables: cannot write charts to \(svgDirectory): \(ResultsFile.describe(error))")
      failed = true
    }
  }
  return failed ? 1 : 0
}

// The cross-process port row starts this program again to serve its port (see
// `servePortIfAsked`); that run does nothing else.
servePortIfAsked()
var status = runCostTables(CostTablesOptions(CommandLine.arguments))
// A report that could not be printed (a full disk, a closed pipe) is a failure too.
let flushError = bench_flush_stdout()
if flushError != 0 {
  printError("cost-tables: cannot write the report to standard output: " + String(cString: strerror(flushError)))
  status = 1
}
exit(status)
