// Where the two threads of a ping-pong benchmark run.
//
// Unpinned, the scheduler sometimes puts both threads of a ping-pong on one CPU (a hand-off
// is then a context switch: about 5.6 us per raw eventfd round trip on the 2-vCPU machine
// of the README) and sometimes on two (an inter-processor wake-up: about 10.7 us), and it
// moves them during a run. Which placement a sample happened to get decided a ratio more
// than the code under test did. So every ping-pong row (condition hand-off, semaphore
// ping-pong, run-loop cross-thread wake-up, port and perform round trips, in-process and
// across processes) pins its two threads, the same way for every subject:
//
// - two-cpus (default): on two different CPUs, the placement the scheduler settles into for
//   two threads that keep waking each other, and the one a server's threads see;
// - one-cpu: both on one CPU, where the hand-off is a context switch and the software on
//   the path weighs most (the strictest view of the toolkit's own overhead);
// - unpinned: wherever the scheduler puts them (the old behaviour; noisy).

import Threads

enum PingPongPlacement {
  enum Mode: String, CaseIterable {
    case twoCPUs = "two-cpus"
    case oneCPU = "one-cpu"
    case unpinned
  }

  /// Chosen by `--ping-pong-placement` before anything is measured; read-only afterwards.
  nonisolated(unsafe) static var mode: Mode = .twoCPUs

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
    guard let cpus else {
      return "Ping-pong rows: threads not pinned (the scheduler places them; expect noise)."
    }
    if cpus.main == cpus.partner {
      return "Ping-pong rows: both threads pinned to CPU \(cpus.main) (--ping-pong-placement one-cpu)."
    }
    return "Ping-pong rows: the two threads pinned to CPUs \(cpus.main) and \(cpus.partner) "
      + "(--ping-pong-placement two-cpus; one-cpu shows the software overhead more sharply)."
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

  private static func pin(_ set: [Int]) {
    do {
      try Thread.setCurrentCPUAffinity(set)
    } catch {
      fatalError("cost-tables: pinning a ping-pong thread to CPUs \(set) failed: \(error)")
    }
  }
}
