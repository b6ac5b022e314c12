// Port rows: message round trips through this toolkit's ports and
// perform requests, beside the raw kernel mechanism they are built on, sampled interleaved
// (one sample of each subject in turn) so the ratios survive a loaded machine.
//
//   ports.roundtrip.inprocess  Port between two run-loop threads    vs raw eventfd ping-pong
//                              (also: Port with blocking receive)      between two threads
//   ports.perform.roundtrip    RunLoop.performAndWait(on:)   vs the Port round trip
//   ports.roundtrip.xprocess   MessagePort request/reply            vs raw Unix-socket
//                              between two processes                   ping-pong, same two
//
// The second process is a fork of this one, made while no other thread runs (every row
// joins its threads first), so the child inherits a quiescent runtime; it serves, then
// _exits.

import CBenchmarkShims
import RunLoop
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

func registerPortBenchmarks(_ harness: Harness) {
  PingPongPlacement.withMainPinned {
    portsInProcessRows(harness)
    portsCrossProcessRows(harness)
  }
}

private func portsCheck(_ condition: Bool, _ what: String) {
  if !condition { fatalError("cost-tables (ports): \(what) failed: errno \(errno)") }
}

/// Starts a toolkit thread running `body`, pinned to the partner side's CPU of a ping-pong
/// (or to the measuring side's, `onMainCPU`; see `PingPongPlacement`).
private func portsSpawn(onMainCPU: Bool = false, _ body: @escaping @Sendable () -> Void) -> JoinableThread<Void, Never>
{
  do {
    return try Thread.spawn { () throws(Never) in
      if onMainCPU { PingPongPlacement.pinMain() } else { PingPongPlacement.pinPartner() }
      body()
    }
  } catch {
    fatalError("cost-tables (ports): Thread.spawn failed: \(error)")
  }
}

/// A value shared between the benchmark threads (set once, read after a handshake).
private final class PortsShared<Value: Sendable>: @unchecked Sendable {
  private let lock = Sync.Lock()
  private var stored: Value
  init(_ value: Value) { stored = value }
  var value: Value {
    get { lock.withLock { stored } }
    set { lock.withLock { stored = newValue } }
  }
}

private func portsWait(until condition: () -> Bool) {
  while !condition() { sched_yield() }
}

/// Takes `samples` samples of each subject in turn (after one warm-up round) and records
/// ns per operation; returns the samples per subject, in order.
@discardableResult
private func portsInterleaved(
  _ harness: Harness, id: String, group: String, operations: Int,
  _ subjects: [(subject: Subject, body: (Int) -> Void)]
) -> [[Double]] {
  let iterations = harness.quick ? max(1, operations / 100) : operations
  let sampleCount = harness.sampleCount(rowDefault: 15)
  for subject in subjects { subject.body(iterations) }
  var samples = Array(repeating: [Double](), count: subjects.count)
  for _ in 0..<sampleCount {
    for (index, subject) in subjects.enumerated() {
      let start = Harness.now()
      subject.body(iterations)
      samples[index].append(Double(Harness.now() - start) / Double(iterations))
    }
  }
  for (index, subject) in subjects.enumerated() {
    harness.record(id: id, subject: subject.subject, group: group, nanoseconds: samples[index])
  }
  return samples
}

// MARK: - In-process

private func portsInProcessRows(_ harness: Harness) {
  let group = "Ports"
  guard harness.wants("ports.roundtrip.inprocess") || harness.wants("ports.perform.roundtrip") else { return }

  // Raw: two blocking eventfds, one per direction; the peer reads one and writes the other.
  let rawToPeer = bench_eventfd()
  let rawFromPeer = bench_eventfd()
  portsCheck(rawToPeer >= 0 && rawFromPeer >= 0, "eventfd")
  for descriptor in [rawToPeer, rawFromPeer] { portsCheck(fcntl(descriptor, F_SETFL, 0) == 0, "fcntl") }
  let stopValue = UInt64.max - 1
  let rawPeer = portsSpawn {
    var value: UInt64 = 0
    while true {
      portsCheck(read(rawToPeer, &value, 8) == 8, "read(eventfd)")
      if value == stopValue { return }
      portsCheck(write(rawFromPeer, &value, 8) == 8, "write(eventfd)")
    }
  }

  // Ours, blocking: the peer receives on one port and answers on the other.
  let blockingToPeer = Port(capacity: 16)
  let blockingFromPeer = Port(capacity: 16)
  let blockingPeer = portsSpawn {
    while let message = try? blockingToPeer.receive(before: .distantFuture) {
      do { try blockingFromPeer.send(message, before: .distantFuture) } catch { fatalError("port send: \(error)") }
    }
  }

  // Ours, run loops: two threads run their loops; each has a port whose handler passes the
  // message to the other's port, counting down, until the count is spent (as the run-loop
  // core's own cross-thread row does with sources). A third port tells the benchmark.
  let finished = Port(capacity: 4)
  let sidePorts = PortsShared<[Port]>([])
  let sideThreads = PortsShared<[Thread]>([])
  let stopSides = PortsShared(false)
  // The two sides run on the two CPUs of the placement, as the two threads of every other
  // row do.
  func makeSide(_ index: Int) -> JoinableThread<Void, Never> {
    portsSpawn(onMainCPU: index == 1) {
      let port = Port(capacity: 16)
      port.setHandler { message in
        do {
          if message.msgid == 0 {
            try finished.send(message, before: .distantFuture)
          } else {
            let other = sidePorts.value[1 - index]
            try other.send(PortMessage(msgid: message.msgid - 1, payload: message.payload), before: .distantFuture)
          }
        } catch {
          fatalError("port send: \(error)")
        }
      }
      RunLoop.current.add(port, forMode: .default)
      sidePorts.value = sidePorts.value + [port]
      sideThreads.value = sideThreads.value + [Thread.current]
      while !stopSides.value {
        _ = RunLoop.current.run(mode: .default, before: .distantFuture)
      }
    }
  }
  // Reference: the same two-loop bounce with bare version-0 sources (the run-loop core's
  // cross-thread path), to show what the port adds on top of it.
  let sourceSides = PortsShared<[(RunLoop, RunLoopSource)]>([])
  let bouncesLeft = AtomicInteger<Int>(0)
  func makeSourceSide(_ index: Int) -> JoinableThread<Void, Never> {
    portsSpawn(onMainCPU: index == 1) {
      let source = RunLoopSource(perform: {
        if bouncesLeft.decrement(ordering: .full) <= 0 {
          do { try finished.send(PortMessage(msgid: 0), before: .distantFuture) } catch { fatalError("\(error)") }
        } else {
          let (loop, other) = sourceSides.value[1 - index]
          other.signal()
          loop.wakeUp()
        }
      })
      RunLoop.current.add(source, forMode: .default)
      sourceSides.value = sourceSides.value + [(RunLoop.current, source)]
      while !stopSides.value {
        _ = RunLoop.current.run(mode: .default, before: .distantFuture)
      }
    }
  }
  let firstSourceSide = makeSourceSide(0)
  portsWait { sourceSides.value.count == 1 }
  let secondSourceSide = makeSourceSide(1)
  portsWait { sourceSides.value.count == 2 }

  let firstSide = makeSide(0)
  portsWait { sidePorts.value.count == 1 }
  let secondSide = makeSide(1)
  portsWait { sidePorts.value.count == 2 }
  let loopTarget = sidePorts.value[0]
  let performTarget = sideThreads.value[0]

  let ping = PortMessage(msgid: 1, payload: [1, 2, 3, 4])
  let samples = portsInterleaved(
    harness, id: "ports.roundtrip.inprocess", group: group, operations: 5_000,
    [
      (
        .peer("raw eventfd"),
        { iterations in
          var value: UInt64 = 1
          for _ in 0..<iterations {
            value = 1
            portsCheck(write(rawToPeer, &value, 8) == 8, "write(eventfd)")
            portsCheck(read(rawFromPeer, &value, 8) == 8, "read(eventfd)")
          }
        }
      ),
      (
        .toolkit("RunLoop.Port (run loops)"),
        { iterations in
          do {
            try loopTarget.send(
              PortMessage(msgid: Int32(2 * iterations), payload: [1, 2, 3, 4]), before: .distantFuture)
            _ = try finished.receive(before: .distantFuture)
          } catch {
            fatalError("port round trips: \(error)")
          }
        }
      ),
      (
        .toolkit("RunLoopSource signal + wakeUp (core path, reference)"),
        { iterations in
          bouncesLeft.store(2 * iterations, ordering: .full)
          let (loop, source) = sourceSides.value[0]
          source.signal()
          loop.wakeUp()
          do { _ = try finished.receive(before: .distantFuture) } catch { fatalError("\(error)") }
        }
      ),
      (
        .toolkit("RunLoop.Port (blocking receive)"),
        { iterations in
          for _ in 0..<iterations {
            do {
              try blockingToPeer.send(ping, before: .distantFuture)
              _ = try blockingFromPeer.receive(before: .distantFuture)
            } catch {
              fatalError("port round trip: \(error)")
            }
          }
        }
      ),
      (
        .toolkit("RunLoop.performAndWait(on:)"),
        { iterations in
          for _ in 0..<iterations {
            do { try RunLoop.performAndWait(on: performTarget) {} } catch { fatalError("perform: \(error)") }
          }
        }
      ),
    ])
  // The perform goal is stated against the port round trip: show both under one id.
  harness.record(
    id: "ports.perform.roundtrip", subject: .toolkit("RunLoop.Port (run loops)"), group: group, nanoseconds: samples[1])
  harness.record(
    id: "ports.perform.roundtrip", subject: .toolkit("RunLoop.performAndWait(on:)"), group: group,
    nanoseconds: samples[4])

  var value = stopValue
  portsCheck(write(rawToPeer, &value, 8) == 8, "write(eventfd)")
  rawPeer.join()
  blockingToPeer.invalidate()
  blockingPeer.join()
  stopSides.value = true
  for port in sidePorts.value { port.invalidate() }
  firstSide.join()
  secondSide.join()
  for (_, source) in sourceSides.value { source.invalidate() }
  for (loop, _) in sourceSides.value { loop.wakeUp() }
  firstSourceSide.join()
  secondSourceSide.join()
  finished.invalidate()
  portsCheck(close(rawToPeer) == 0 && close(rawFromPeer) == 0, "close")
}

// MARK: - Across processes

/// Forks a child that runs `body`, pinned to the partner side's CPU of the ping-pong
/// placement, and then `_exit`s with its result; returns the child's pid.
private func portsFork(_ body: () -> Int32) -> pid_t {
  let pid = fork()
  portsCheck(pid >= 0, "fork")
  if pid == 0 {
    PingPongPlacement.pinPartner()
    _exit(body())
  }
  return pid
}

/// Starts this program again as `cost-tables --serve-port NAME [--pin CPU]` (see
/// ``servePortIfAsked()``) without `fork`, with `closing` closed in the child; returns its pid.
private func spawnPortServer(name: String, cpu: Int?, closing descriptor: Int32) -> pid_t {
  var executable = [CChar](repeating: 0, count: 4096)
  let length = readlink("/proc/self/exe", &executable, executable.count - 1)
  portsCheck(length > 0, "readlink(/proc/self/exe)")
  let path = String(decoding: executable[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  var actions = posix_spawn_file_actions_t()
  portsCheck(posix_spawn_file_actions_init(&actions) == 0, "posix_spawn_file_actions_init")
  defer { posix_spawn_file_actions_destroy(&actions) }
  // The raw row's socket end: the raw child must be the only other holder of the pair.
  portsCheck(posix_spawn_file_actions_addclose(&actions, descriptor) == 0, "posix_spawn_file_actions_addclose")
  let arguments = [path, "--serve-port", name] + (cpu.map { ["--pin", String($0)] } ?? [])
  let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
  defer { for argument in argv { free(argument) } }
  var pid: pid_t = 0
  let spawned = posix_spawn(&pid, path, &actions, nil, argv, environ)
  if spawned != 0 { fatalError("cost-tables (ports): posix_spawn failed: \(String(cString: strerror(spawned)))") }
  return pid
}

/// The serving side of the cross-process row, when this program was started as
/// `cost-tables --serve-port NAME [--pin CPU]`: registers `NAME` and answers every request
/// with its payload until a request with msgid 0. Exits with 2 when the name cannot be
/// registered, 3 when serving fails, 0 at the end. Returns when not asked.
func servePortIfAsked() {
  let arguments = CommandLine.arguments
  guard arguments.count >= 3, arguments[1] == "--serve-port" else { return }
  if arguments.count >= 5, arguments[3] == "--pin", let cpu = Int(arguments[4]) {
    do { try Thread.setCurrentCPUAffinity([cpu]) } catch { _exit(4) }
  }
  guard
    let port = try? MessagePort.local(
      name: arguments[2],
      handler: { message in
        if message.msgid == 0 { _exit(0) }
        return message.payload
      })
  else { _exit(2) }
  while true {
    do { try port.serve(before: .after(.seconds(300))) } catch { _exit(3) }
  }
}

private func portsReap(_ pid: pid_t) {
  var status: Int32 = 0
  portsCheck(waitpid(pid, &status, 0) == pid, "waitpid")
  if status != 0 { fatalError("cost-tables (ports): child process ended with status \(status)") }
}

/// How many times the cross-process rows ran in this process (their port names differ).
nonisolated(unsafe) private var crossProcessRuns = 0

private func portsCrossProcessRows(_ harness: Harness) {
  let group = "Ports"
  let id = "ports.roundtrip.xprocess"
  guard harness.wants(id) else { return }
  let payload = [UInt8](repeating: 7, count: 32)

  // Raw: a connected Unix stream socket pair; a child echoes 32-byte messages.
  var pair: [Int32] = [-1, -1]
  portsCheck(bench_unix_stream_socketpair(&pair) == 0, "socketpair")
  // Blocking mode, as a hand-written ping-pong would use.
  for descriptor in pair { portsCheck(fcntl(descriptor, F_SETFL, 0) == 0, "fcntl") }
  let rawChild = portsFork {
    // The parent's end must close here too, or the child never sees end of stream.
    if close(pair[0]) != 0 { return 4 }
    var buffer = [UInt8](repeating: 0, count: 32)
    while true {
      var got = 0
      while got < 32 {
        let count = buffer.withUnsafeMutableBytes { read(pair[1], $0.baseAddress! + got, 32 - got) }
        if count <= 0 { return 0 }  // parent closed: done
        got += count
      }
      if buffer.withUnsafeBytes({ write(pair[1], $0.baseAddress!, 32) }) != 32 { return 1 }
    }
  }
  portsCheck(close(pair[1]) == 0, "close")

  // Ours: another process registers a named local port and serves it; this process sends
  // requests through a remote port and waits for each reply. That process is this program
  // started afresh (`--serve-port`), not a fork: a fork of this multithreaded process could
  // inherit a lock some other thread held at that moment (Dispatch's, the Swift runtime's),
  // and a child that takes it hangs.
  // A name of its own per run (a full report runs this row ten times and more): no run
  // depends on how fast the previous run's registration is cleaned up.
  crossProcessRuns += 1
  let name = "cost-tables-ports-\(getpid())-\(crossProcessRuns)"
  let portChild = spawnPortServer(name: name, cpu: PingPongPlacement.cpus?.partner, closing: pair[0])
  var found: MessagePort?
  let giveUp = MonotonicInstant.after(.seconds(30))
  while found == nil {
    found = try? MessagePort.remote(name: name)
    if found == nil {
      // A child that ended without serving says why in its status (2: registering failed).
      var status: Int32 = 0
      if waitpid(portChild, &status, WNOHANG) == portChild {
        fatalError("cost-tables (ports): the child serving \(name) ended with status \(status) before serving")
      }
      if giveUp.hasPassed { fatalError("cost-tables (ports): the child never registered \(name)") }
      sched_yield()
    }
  }
  let remote = found!

  var buffer = payload
  portsInterleaved(
    harness, id: id, group: group, operations: 3_000,
    [
      (
        .peer("raw Unix socket"),
        { iterations in
          for _ in 0..<iterations {
            portsCheck(buffer.withUnsafeBytes { write(pair[0], $0.baseAddress!, 32) } == 32, "write")
            var got = 0
            while got < 32 {
              let count = buffer.withUnsafeMutableBytes { read(pair[0], $0.baseAddress! + got, 32 - got) }
              portsCheck(count > 0, "read")
              got += count
            }
          }
        }
      ),
      (
        .toolkit("RunLoop.MessagePort request/reply"),
        { iterations in
          for _ in 0..<iterations {
            do {
              _ = try remote.send(
                msgid: 1, data: payload, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply
              )
            } catch {
              fatalError("cost-tables (ports): request failed: \(error)")
            }
          }
        }
      ),
    ])

  portsCheck(close(pair[0]) == 0, "close")
  portsReap(rawChild)
  do {
    try remote.send(msgid: 0, sendTimeout: .seconds(10), receiveTimeout: .zero, replyMode: .oneWay)
  } catch {
    fatalError("cost-tables (ports): stop message failed: \(error)")
  }
  portsReap(portChild)
}
