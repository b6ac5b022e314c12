// Where the subjects of the contended rows live (SubjectPlacement) and where the two threads
// of a ping-pong benchmark run (PingPongPlacement).
//
// Ping-pong:
// Unpinned, the scheduler sometimes puts both threads of a ping-pong on one CPU (a hand-off
// is then a context switch) and sometimes on two (an inter-processor wake-up of a possibly
// idle virtual CPU, dearer on a VM), and it moves them during a run. Users do not pin their
// threads, so the unpinned placement is what they get and it is the headline; because one
// run can settle into either placement, it is measured in many runs in one report and
// stated as the median of the runs' medians with the worst run beside it. The pinned
// placements are kept as reference rows, the same for every subject:
//
// - unpinned (headline): wherever the scheduler puts them;
// - two-cpus ("@two-cpus" ids): on two different CPUs, the placement the scheduler settles
//   into for two busy threads, and the one a loaded server's threads see;
// - one-cpu ("@one-cpu" ids): both on one CPU, where the hand-off is a context switch and
//   the software on the path weighs most (the strictest view of the toolkit's overhead).

import CBenchmarkShims
import Synchronization
import Threads

#if canImport(Glibc)
  import Glibc
#endif

enum PingPongPlacement {
  enum Mode: String, CaseIterable {
    case unpinned
    case twoCPUs = "two-cpus"
    case oneCPU = "one-cpu"

    /// Appended to the ids of rows measured in this placement (none for the headline).
    var idSuffix: String { self == .unpinned ? "" : "@" + rawValue }
  }

  /// The placements measured, in order (`--ping-pong-placement`; all by default).
  nonisolated(unsafe) static var placements: [Mode] = Mode.allCases

  /// Runs of the unpinned ping-pong rows in one full report.
  static let unpinnedRuns = 10

  /// The placement being measured; set by `registerPingPongBenchmarks` between rows.
  nonisolated(unsafe) static var mode: Mode = .unpinned

  /// The CPUs the process could use when the first ping-pong row started (read before any
  /// thread is pinned: main.swift touches it first).
  static let allowed: [Int] = (try? Thread.currentCPUAffinity()) ?? []

  /// The CPU of the measuring (main) side and the CPU of the partner side; nil when nothing
  /// is pinned (`unpinned`, or two CPUs asked for and fewer usable).
  static var cpus: (main: Int, partner: Int)? {
    switch mode {
    case .unpinned: return nil
    case .oneCPU: return allowed.first.map { ($0, $0) }
    case .twoCPUs: return allowed.count >= 2 ? (allowed[0], allowed[1]) : nil
    }
  }

  /// One line for the report header.
  static var summary: String {
    placements.map { placement -> String in
      switch placement {
      case .unpinned:
        return "unpinned (the headline ids: threads left to the scheduler, as users run them; "
          + "\(unpinnedRuns) runs in a full report, median of the runs' medians, max = worst run)"
      case .twoCPUs:
        return allowed.count >= 2
          ? "pinned to CPUs \(allowed[0]) and \(allowed[1]) (ids ending @two-cpus)"
          : "@two-cpus rows unpinned (fewer than two usable CPUs)"
      case .oneCPU:
        return "both on CPU \(allowed.first ?? 0) (ids ending @one-cpu)"
      }
    }.reduce("Ping-pong rows: ") { $0 == "Ping-pong rows: " ? $0 + $1 : $0 + "; " + $1 } + "."
  }

  /// Pins the calling thread to the partner side's CPU. Call first thing in a partner thread.
  static func pinPartner() {
    guard let cpus else { return }
    pin([cpus.partner])
  }

  /// Pins the calling thread to the measuring side's CPU.
  static func pinMain() {
    guard let cpus else { return }
    pin([cpus.main])
  }

  /// Runs `body` with the calling thread pinned to the measuring side's CPU, then restores
  /// the affinity it had.
  static func withMainPinned<Result>(_ body: () -> Result) -> Result {
    guard cpus != nil, let previous = try? Thread.currentCPUAffinity() else { return body() }
    pinMain()
    defer { pin(previous) }
    return body()
  }

  /// Pins every thread of the process but `partners` (kernel thread ids) to the measuring
  /// side's CPU: for rows whose measuring side is a runtime's pool, whose threads cannot be
  /// pinned from inside. Threads started later inherit their creator's CPUs, which may be
  /// the partner side's, so rows call it before each sample. Does nothing when unpinned.
  static func pinProcessThreads(excluding partners: Set<Int32>) {
    guard let cpus else { return }
    for id in processThreadIDs() where !partners.contains(id) { pin(thread: id, [cpus.main]) }
  }

  /// Lets every thread of the process run on every CPU the process could use at the start
  /// again (after `pinProcessThreads`). Does nothing when unpinned.
  static func unpinProcessThreads() {
    guard cpus != nil else { return }
    for id in processThreadIDs() { pin(thread: id, allowed) }
  }

  /// The kernel ids of the process's threads (`/proc/self/task`).
  private static func processThreadIDs() -> [Int32] {
    guard let directory = opendir("/proc/self/task") else {
      fatalError("cost-tables: opendir(/proc/self/task) failed: errno \(errno)")
    }
    defer { closedir(directory) }
    var ids: [Int32] = []
    while let entry = readdir(directory) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
        String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
      }
      if let id = Int32(name) { ids.append(id) }
    }
    return ids
  }

  private static func pin(thread id: Int32, _ set: [Int]) {
    let result = set.map(Int32.init).withUnsafeBufferPointer { bench_pin_thread(id, $0.baseAddress, Int32($0.count)) }
    // ESRCH: the thread ended since the listing.
    if result != 0 && result != -ESRCH {
      fatalError("cost-tables: pinning thread \(id) to CPUs \(set) failed: errno \(-result)")
    }
  }

  private static func pin(_ set: [Int]) {
    do {
      try Thread.setCurrentCPUAffinity(set)
    } catch {
      fatalError("cost-tables: pinning a ping-pong thread to CPUs \(set) failed: \(error)")
    }
  }
}

/// Where each sample's subject lives in memory, for the contended rows (`contention.*`,
/// `fairness.*`, the `*.contended-N` lock rows). On the 2-vCPU AMD EPYC VM a contended
/// loop's speed depends on where its lock's cache line is: the same subject at the same
/// address ran at one of two or three levels for a whole process
/// (`Synchronization.Mutex<Int>` with private work at two threads 34-36 ns in some
/// processes, 54-59 ns in others), and at fresh addresses it moved between them from sample
/// to sample. The allocator gives a freed object's address to the next object of its size,
/// so a subject made afresh for every sample would still sit at one address per process, and
/// a row's samples would be one draw. So every sample's subject is kept alive until its row
/// is done, after a padding allocation of 1-16 pages (plus a random part of a page): the
/// samples land at different addresses and pages, and a row's median is taken over them.
enum SubjectPlacement {
  /// The subjects and paddings of the row being measured.
  private static let kept = Mutex<(subjects: [AnyObject], paddings: [[UInt8]])>(([], []))

  /// Pads the heap, then makes the subject and keeps it until ``releaseRow()``.
  static func place<Subject: AnyObject & Sendable>(_ make: () -> Subject) -> Subject {
    let padding = [UInt8](repeating: 1, count: 4096 * Int.random(in: 1...16) + 64 * Int.random(in: 0...63))
    let subject = make()
    kept.withLock {
      $0.paddings.append(padding)
      $0.subjects.append(subject)
    }
    return subject
  }

  /// Frees the kept subjects and paddings: the row is done.
  static func releaseRow() {
    kept.withLock { $0 = ([], []) }
  }
}
