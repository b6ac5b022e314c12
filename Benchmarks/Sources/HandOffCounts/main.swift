// Load-independent counts for the unpinned cross-thread hand-offs: per round trip, the
// context switches and migrations of both threads (from /proc/self/task/<tid>/sched) and how
// often the two threads ran on one CPU, for the raw eventfd ping-pong beside the toolkit's
// hand-offs. Run each subject in its own process under `strace -c -f` for the system calls
// by type:
//
//   swift build -c release --package-path Benchmarks --product handoff-counts
//   Benchmarks/.build/release/handoff-counts runloop-wake 1000 [unpinned|two-cpus|one-cpu]
//   strace -c -f Benchmarks/.build/release/handoff-counts runloop-wake 1000
//
// Subjects: eventfd, semaphore, runloop-wake (source signal + wakeUp, answered by a
// Semaphore), perform (performAndWait), port (in-process Port, blocking receive on one side,
// run loop on the other). Not part of any report or CI run; timings it prints are
// informational only.

import CBenchmarkShims
import RunLoop
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Scheduler counters of one thread.
struct SchedCounters {
  var migrations = 0
  var voluntary = 0
  var involuntary = 0

  static func - (lhs: SchedCounters, rhs: SchedCounters) -> SchedCounters {
    SchedCounters(
      migrations: lhs.migrations - rhs.migrations, voluntary: lhs.voluntary - rhs.voluntary,
      involuntary: lhs.involuntary - rhs.involuntary)
  }
}

/// Reads the calling thread's counters.
func currentCounters() -> SchedCounters {
  let tid = Thread.current.kernelThreadID ?? 0
  guard let file = fopen("/proc/self/task/\(tid)/sched", "r") else { fatalError("open sched") }
  defer { fclose(file) }
  var counters = SchedCounters()
  var line = [CChar](repeating: 0, count: 512)
  while fgets(&line, Int32(line.count), file) != nil {
    let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    let parts = text.split(separator: ":")
    guard parts.count == 2 else { continue }
    let key = parts[0].trimmingCharacters()
    let value = Int(parts[1].trimmingCharacters()) ?? 0
    switch key {
    case "se.nr_migrations": counters.migrations = value
    case "nr_voluntary_switches": counters.voluntary = value
    case "nr_involuntary_switches": counters.involuntary = value
    default: break
    }
  }
  return counters
}

extension Substring {
  func trimmingCharacters() -> String {
    String(self.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\n" || $0 == "\t" }.reversed())
  }
}

/// What one side of a subject records: its counters over the measured round trips and the
/// CPU it was on at each.
final class Side: @unchecked Sendable {
  var before = SchedCounters()
  var after = SchedCounters()
  var cpus: [Int32]
  init(_ count: Int) { cpus = [Int32](repeating: -1, count: count) }
}

@Sendable func check(_ condition: Bool, _ what: String) {
  if !condition { fatalError("\(what) failed: errno \(errno)") }
}

/// The CPU each side is pinned to (`two-cpus`: the first two the process may use, `one-cpu`:
/// both on the first), or nil.
nonisolated(unsafe) var pins: (main: Int, partner: Int)? = nil

func pin(_ cpu: Int?) {
  guard let cpu else { return }
  do { try Thread.setCurrentCPUAffinity([cpu]) } catch { fatalError("pin: \(error)") }
}

func spawn(_ body: @escaping @Sendable () -> Void) -> JoinableThread<Void, Never> {
  let cpu = pins?.partner
  do {
    return try Thread.spawn { () throws(Never) in
      pin(cpu)
      body()
    }
  } catch {
    fatalError("spawn: \(error)")
  }
}

/// Runs `roundTrips` round trips of `subject` and prints the counts.
func measure(_ subject: String, _ roundTrips: Int) {
  let main = Side(roundTrips)
  let partner = Side(roundTrips)

  let start = MonotonicInstant.now
  switch subject {
  case "eventfd":
    let there = eventfd(0, Int32(EFD_CLOEXEC))
    let back = eventfd(0, Int32(EFD_CLOEXEC))
    check(there >= 0 && back >= 0, "eventfd")
    let echo = spawn {
      var value: UInt64 = 0
      check(read(there, &value, 8) == 8, "read")  // warm-up round trip
      check(write(back, &value, 8) == 8, "write")
      partner.before = currentCounters()
      for index in 0..<roundTrips {
        check(read(there, &value, 8) == 8, "read")
        partner.cpus[index] = Int32(bench_current_cpu())
        check(write(back, &value, 8) == 8, "write")
      }
      partner.after = currentCounters()
    }
    var value: UInt64 = 1
    check(write(there, &value, 8) == 8, "write")
    check(read(back, &value, 8) == 8, "read")
    main.before = currentCounters()
    for index in 0..<roundTrips {
      value = 1
      check(write(there, &value, 8) == 8, "write")
      check(read(back, &value, 8) == 8, "read")
      main.cpus[index] = Int32(bench_current_cpu())
    }
    main.after = currentCounters()
    echo.join()

  case "semaphore":
    let ping = Semaphore()
    let pong = Semaphore()
    let echo = spawn {
      ping.wait()
      pong.signal()
      partner.before = currentCounters()
      for index in 0..<roundTrips {
        ping.wait()
        partner.cpus[index] = Int32(bench_current_cpu())
        pong.signal()
      }
      partner.after = currentCounters()
    }
    ping.signal()
    pong.wait()
    main.before = currentCounters()
    for index in 0..<roundTrips {
      ping.signal()
      pong.wait()
      main.cpus[index] = Int32(bench_current_cpu())
    }
    main.after = currentCounters()
    echo.join()

  case "runloop-wake":
    final class Shared: @unchecked Sendable {
      let answer = Semaphore()
      let ready = Semaphore()
      var loop: RunLoop?
      var source: RunLoopSource?
      var index = -1  // touched by the loop's handler only, between the main side's waits
    }
    let shared = Shared()
    let server = spawn {
      let loop = RunLoop.current
      let source = RunLoopSource(perform: {
        if shared.index == 0 { partner.before = currentCounters() }
        if shared.index >= 0 { partner.cpus[shared.index] = Int32(bench_current_cpu()) }
        if shared.index == roundTrips - 1 { partner.after = currentCounters() }
        shared.index += 1
        shared.answer.signal()
      })
      loop.add(source, forMode: .default)
      shared.loop = loop
      shared.source = source
      shared.ready.signal()
      loop.run()
      source.invalidate()
    }
    shared.ready.wait()
    let (loop, source) = (shared.loop!, shared.source!)
    source.signal()  // warm-up round trip
    loop.wakeUp()
    shared.answer.wait()
    main.before = currentCounters()
    for index in 0..<roundTrips {
      source.signal()
      loop.wakeUp()
      shared.answer.wait()
      main.cpus[index] = Int32(bench_current_cpu())
    }
    main.after = currentCounters()
    loop.stop()
    server.join()

  case "perform":
    final class Shared: @unchecked Sendable {
      let ready = Semaphore()
      var loop: RunLoop?
    }
    let shared = Shared()
    let server = spawn {
      shared.loop = RunLoop.current
      shared.loop!.add(RunLoopSource(perform: {}), forMode: .default)  // keeps the run going
      shared.ready.signal()
      RunLoop.current.run()
    }
    shared.ready.wait()
    let loop = shared.loop!
    do {
      try loop.performAndWait {}
      try loop.performAndWait { partner.before = currentCounters() }
      main.before = currentCounters()
      for index in 0..<roundTrips {
        try loop.performAndWait { partner.cpus[index] = Int32(bench_current_cpu()) }
        main.cpus[index] = Int32(bench_current_cpu())
      }
      main.after = currentCounters()
      try loop.performAndWait { partner.after = currentCounters() }
    } catch {
      fatalError("performAndWait: \(error)")
    }
    loop.stop()
    server.join()

  case "port":
    final class Shared: @unchecked Sendable {
      let ready = Semaphore()
      let toLoop = Port(capacity: 16)
      let back = Port(capacity: 16)
      var index = -1
      var loop: RunLoop?
    }
    let shared = Shared()
    let server = spawn {
      shared.toLoop.setHandler { message in
        if shared.index == 0 { partner.before = currentCounters() }
        if shared.index >= 0 { partner.cpus[shared.index] = Int32(bench_current_cpu()) }
        if shared.index == roundTrips - 1 { partner.after = currentCounters() }
        shared.index += 1
        do { try shared.back.send(message, before: .distantFuture) } catch { fatalError("send: \(error)") }
      }
      RunLoop.current.add(shared.toLoop, forMode: .default)
      shared.loop = RunLoop.current
      shared.ready.signal()
      RunLoop.current.run()
    }
    shared.ready.wait()
    let ping = PortMessage(msgid: 1)
    do {
      try shared.toLoop.send(ping, before: .distantFuture)
      _ = try shared.back.receive(before: .distantFuture)
      main.before = currentCounters()
      for index in 0..<roundTrips {
        try shared.toLoop.send(ping, before: .distantFuture)
        _ = try shared.back.receive(before: .distantFuture)
        main.cpus[index] = Int32(bench_current_cpu())
      }
      main.after = currentCounters()
    } catch {
      fatalError("port: \(error)")
    }
    shared.loop!.stop()
    server.join()

  default:
    fatalError("unknown subject \(subject)")  // the command line was checked before
  }
  let elapsed = start.duration(to: .now)

  let mainDelta = main.after - main.before
  let partnerDelta = partner.after - partner.before
  var sameCPU = 0
  for index in 0..<roundTrips where main.cpus[index] == partner.cpus[index] { sameCPU += 1 }
  func perThousand(_ value: Int) -> String { String(Double(value) * 1000 / Double(roundTrips)) }
  print(
    "\(subject): per 1000 round trips: main migrations \(perThousand(mainDelta.migrations)), "
      + "voluntary \(perThousand(mainDelta.voluntary)), involuntary \(perThousand(mainDelta.involuntary)); "
      + "partner migrations \(perThousand(partnerDelta.migrations)), voluntary \(perThousand(partnerDelta.voluntary)), "
      + "involuntary \(perThousand(partnerDelta.involuntary)); same CPU \(perThousand(sameCPU)); "
      + "elapsed \(elapsed) (informational)")
}

let usage =
  "usage: handoff-counts eventfd|semaphore|runloop-wake|perform|port [roundTrips] [unpinned|two-cpus|one-cpu]\n"
  + "  roundTrips: a positive integer (default 1000); two-cpus pins the sides to the first two CPUs\n"
  + "  the process may use, one-cpu both to the first (default unpinned)"

/// Prints `message` and the usage on stderr and exits with 2 (a bad command line).
func usageError(_ message: String) -> Never {
  var text = "handoff-counts: " + message + "\n" + usage + "\n"
  text.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
  exit(2)
}

let arguments = CommandLine.arguments
if arguments.count >= 2, arguments[1] == "--help" || arguments[1] == "-h" {
  print(usage)
  exit(0)
}
guard (2...4).contains(arguments.count) else { usageError(arguments.count < 2 ? "no subject" : "too many arguments") }
let subject = arguments[1]
guard ["eventfd", "semaphore", "runloop-wake", "perform", "port"].contains(subject) else {
  usageError("unknown subject \(subject)")
}
let roundTrips: Int
if arguments.count >= 3 {
  guard let count = Int(arguments[2]), count > 0 else {
    usageError("roundTrips must be a positive integer, not \(arguments[2])")
  }
  roundTrips = count
} else {
  roundTrips = 1000
}
let placement = arguments.count >= 4 ? arguments[3] : "unpinned"
// Pinned to CPUs this process may use (under `taskset` CPU 0 may not be one of them).
let allowed = (try? Thread.currentCPUAffinity()) ?? []
switch placement {
case "unpinned": pins = nil
case "two-cpus":
  guard allowed.count >= 2 else { usageError("two-cpus needs two usable CPUs; this process may use \(allowed)") }
  pins = (allowed[0], allowed[1])
case "one-cpu":
  guard let first = allowed.first else { usageError("one-cpu: the CPUs this process may use are unknown") }
  pins = (first, first)
default: usageError("unknown placement \(placement)")
}
pin(pins?.main)
measure(subject, roundTrips)
