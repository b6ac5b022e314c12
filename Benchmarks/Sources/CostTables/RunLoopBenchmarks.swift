// RunLoop rows: perform-block throughput, cross-thread signal + wake round trip, timer
// lateness and idle CPU, each beside its peer (Foundation's RunLoop, or raw eventfd syscalls)
// measured in the same run.

import CBenchmarkShims
import Foundation
import RunLoop
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Registers the RunLoop benchmark rows.
func registerRunLoopBenchmarks(_ harness: Harness) {
  // Measure in a multithreaded process (glibc takes single-threaded shortcuts otherwise).
  joinOneThread()
  benchmarkPerformBlock(harness)
  benchmarkTimerLateness(harness)
  benchmarkIdleCPU(harness)
}

private func joinOneThread() {
  do {
    try Threads.Thread.spawn { () throws(Never) in }.join()
  } catch {
    fatalError("Thread.spawn failed: \(error)")
  }
}

/// A counter the benchmark blocks bump (all on one thread, but blocks must be Sendable).
private final class Counter: @unchecked Sendable {
  var value = 0
}

// MARK: Perform a block on the current run loop and drain it

private func benchmarkPerformBlock(_ harness: Harness) {
  let id = "runloop.perform-block"
  let group = "RunLoop"
  guard harness.wants(id) else { return }
  let counter = Counter()

  let ours = RunLoop::RunLoop.current
  harness.measure(id: id, subject: .toolkit("RunLoop (perform + zero-timeout run)"), group: group, operations: 20_000) {
    n in
    for _ in 0..<n {
      ours.perform(inModes: [.default]) { counter.value &+= 1 }
      ours.run(mode: .default, timeout: .zero)
    }
  }
  let foundation = Foundation.RunLoop.current
  // A far-future timer keeps Foundation's default mode non-empty, so run(until:) makes a pass.
  let keepAlive = Foundation.Timer(timeInterval: 1e6, repeats: false) { _ in }
  foundation.add(keepAlive, forMode: .default)
  harness.measure(
    id: id, subject: .peer("Foundation.RunLoop (perform + run(until: now))"), group: group, operations: 20_000
  ) { n in
    for _ in 0..<n {
      foundation.perform(inModes: [.default]) { counter.value &+= 1 }
      foundation.run(until: Date())
    }
  }
  keepAlive.invalidate()

  let batchID = "runloop.perform-block-batch64"
  harness.measure(id: batchID, subject: .toolkit("RunLoop (64 performs, one drain)"), group: group, operations: 20_000)
  { n in
    for _ in 0..<(n / 64) {
      for _ in 0..<64 { ours.perform(inModes: [.default]) { counter.value &+= 1 } }
      ours.run(mode: .default, timeout: .zero)
    }
  }
  let keepAlive2 = Foundation.Timer(timeInterval: 1e6, repeats: false) { _ in }
  foundation.add(keepAlive2, forMode: .default)
  harness.measure(
    id: batchID, subject: .peer("Foundation.RunLoop (64 performs, one drain)"), group: group, operations: 20_000
  ) { n in
    for _ in 0..<(n / 64) {
      for _ in 0..<64 { foundation.perform(inModes: [.default]) { counter.value &+= 1 } }
      foundation.run(until: Date())
    }
  }
  keepAlive2.invalidate()
  if counter.value == 0 { fatalError("perform-block: no block ran") }
}

// MARK: Cross-thread signal + wake round trip

/// Two run-loop threads bounce a signal: A's source signals B's and wakes B, B's signals A's
/// and wakes A. Returns ns per round trip.
private func runLoopPingPong(roundTrips: Int) -> Double {
  final class Shared: @unchecked Sendable {
    let lock = Sync.Lock()
    var loops: [RunLoop::RunLoop] = []  // protected by lock
    var sources: [RunLoopSource] = []  // protected by lock
    var count = 0  // only touched by the loops' handlers, one at a time (they alternate)
    var peers: (RunLoop::RunLoop, RunLoopSource, RunLoop::RunLoop, RunLoopSource)? = nil
  }
  let shared = Shared()
  let ready = AtomicInteger<Int>(0)
  func makeSide(_ index: Int) -> JoinableThread<Void, Never> {
    do {
      return try Threads.Thread.spawn { () throws(Never) in
        if index == 0 { PingPongPlacement.pinPartner() } else { PingPongPlacement.pinMain() }
        let loop = RunLoop::RunLoop.current
        let source = RunLoopSource(perform: {
          guard let (loopA, sourceA, loopB, sourceB) = shared.peers else { return }
          if index == 0 {
            shared.count += 1
            if shared.count > roundTrips {
              loopA.stop()
              loopB.stop()
              return
            }
            sourceB.signal()
            loopB.wakeUp()
          } else {
            sourceA.signal()
            loopA.wakeUp()
          }
        })
        loop.add(source, forMode: .default)
        shared.lock.withLock {
          shared.loops.append(loop)
          shared.sources.append(source)
        }
        _ = ready.increment(ordering: .full)
        loop.run()
        source.invalidate()
      }
    } catch {
      fatalError("Thread.spawn failed: \(error)")
    }
  }
  let first = makeSide(0)
  while ready.load(ordering: .acquiring) < 1 { sched_yield() }
  let second = makeSide(1)
  while ready.load(ordering: .acquiring) < 2 { sched_yield() }
  shared.lock.withLock {
    shared.peers = (shared.loops[0], shared.sources[0], shared.loops[1], shared.sources[1])
  }
  // Let both loops reach their first sleep.
  while !(shared.loops[0].isWaiting && shared.loops[1].isWaiting) { sched_yield() }
  let start = Harness.now()
  shared.sources[0].signal()
  shared.loops[0].wakeUp()
  first.join()
  second.join()
  let elapsed = Harness.now() - start
  return Double(elapsed) / Double(roundTrips)
}

/// A plain thread signals a source on a run-loop thread and wakes the loop; the source's
/// handler answers through a `Semaphore` the plain thread waits on (how a worker thread is
/// usually driven). Returns ns per round trip.
private func runLoopSemaphorePingPong(roundTrips: Int) -> Double {
  final class Shared: @unchecked Sendable {
    let answer = Sync.Semaphore()
    let lock = Sync.Lock()
    var loop: RunLoop::RunLoop?  // protected by lock
    var source: RunLoopSource?  // protected by lock
  }
  let shared = Shared()
  let ready = Sync.Semaphore()
  let server: JoinableThread<Void, Never>
  do {
    server = try Threads.Thread.spawn { () throws(Never) in
      PingPongPlacement.pinPartner()
      let loop = RunLoop::RunLoop.current
      let source = RunLoopSource(perform: { shared.answer.signal() })
      loop.add(source, forMode: .default)
      shared.lock.withLock {
        shared.loop = loop
        shared.source = source
      }
      ready.signal()
      loop.run()
      source.invalidate()
    }
  } catch {
    fatalError("Thread.spawn failed: \(error)")
  }
  ready.wait()
  let (loop, source) = shared.lock.withLock { (shared.loop!, shared.source!) }
  while !loop.isWaiting { sched_yield() }
  let start = Harness.now()
  for _ in 0..<roundTrips {
    source.signal()
    loop.wakeUp()
    shared.answer.wait()
  }
  let elapsed = Harness.now() - start
  loop.stop()
  server.join()
  return Double(elapsed) / Double(roundTrips)
}

private func read1(_ fd: Int32) {
  var value: UInt64 = 0
  while read(fd, &value, 8) != 8 { precondition(errno == EINTR, "read failed") }
}

private func write1(_ fd: Int32) {
  var one: UInt64 = 1
  while write(fd, &one, 8) != 8 { precondition(errno == EINTR, "write failed") }
}

/// Two threads bounce a count through two blocking eventfds. Returns ns per round trip.
private func eventfdPingPong(roundTrips: Int) -> Double {
  let there = eventfd(0, Int32(EFD_CLOEXEC))
  let back = eventfd(0, Int32(EFD_CLOEXEC))
  precondition(there >= 0 && back >= 0, "eventfd failed")
  defer {
    close(there)
    close(back)
  }
  let echo: JoinableThread<Void, Never>
  do {
    echo = try Threads.Thread.spawn { () throws(Never) in
      PingPongPlacement.pinPartner()
      for _ in 0..<roundTrips {
        read1(there)
        write1(back)
      }
    }
  } catch {
    fatalError("Thread.spawn failed: \(error)")
  }
  let start = Harness.now()
  for _ in 0..<roundTrips {
    write1(there)
    read1(back)
  }
  let elapsed = Harness.now() - start
  echo.join()
  return Double(elapsed) / Double(roundTrips)
}

/// Registers the cross-thread wake round trip (a ping-pong row: main.swift measures it in
/// every placement, see `PingPongPlacement`).
func registerCrossThreadWakeBenchmarks(_ harness: Harness) {
  joinOneThread()
  let id = "runloop.cross-thread-wake"
  guard harness.wants(id) else { return }
  PingPongPlacement.withMainPinned { crossThreadWakeRows(harness, id: id) }
}

private func crossThreadWakeRows(_ harness: Harness, id: String) {
  let roundTrips = harness.quick ? 50 : 2_000
  let samples = harness.sampleCount(rowDefault: 11)
  _ = runLoopPingPong(roundTrips: roundTrips / 10)  // warm-up
  _ = runLoopSemaphorePingPong(roundTrips: roundTrips / 10)
  _ = eventfdPingPong(roundTrips: roundTrips / 10)
  var ours: [Double] = []
  var answered: [Double] = []
  var raw: [Double] = []
  for _ in 0..<samples {  // interleaved
    ours.append(runLoopPingPong(roundTrips: roundTrips))
    answered.append(runLoopSemaphorePingPong(roundTrips: roundTrips))
    raw.append(eventfdPingPong(roundTrips: roundTrips))
  }
  harness.record(
    id: id, subject: .toolkit("RunLoop (source signal + wakeUp, round trip)"), group: "RunLoop", nanoseconds: ours)
  harness.record(
    id: id, subject: .toolkit("RunLoop (signal + wakeUp, answered by Semaphore)"), group: "RunLoop",
    nanoseconds: answered)
  harness.record(id: id, subject: .peer("raw eventfd ping-pong (round trip)"), group: "RunLoop", nanoseconds: raw)
}

// MARK: Timer lateness

private final class LatenessLog: @unchecked Sendable {
  var values: [Double] = []  // only touched on the thread running the loop
}

private func percentile(_ values: [Double], _ fraction: Double) -> Double {
  let sorted = values.sorted()
  guard !sorted.isEmpty else { return .nan }
  return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * fraction))]
}

private func benchmarkTimerLateness(_ harness: Harness) {
  let id = "runloop.timer-lateness"
  guard harness.wants(id) else { return }
  let fires = harness.quick ? 20 : 300

  // Ours: lateness = actual - scheduled, monotonic clock.
  let ours = LatenessLog()
  let loop = RunLoop::RunLoop.current
  let timer = RunLoopTimer(after: .milliseconds(2), interval: .milliseconds(2)) { timer in
    let now = MonotonicInstant.now
    ours.values.append(
      Double(timer.nextFireDate.duration(to: now).components.attoseconds / 1_000_000_000)
        + Double(timer.nextFireDate.duration(to: now).components.seconds) * 1e9)
    if ours.values.count >= fires { timer.invalidate() }
  }
  loop.add(timer, forMode: .default)
  while timer.isValid { loop.run(mode: .default, timeout: .seconds(10)) }

  // Foundation: lateness = now - fireDate (wall clock, the only clock its Timer offers).
  let theirs = LatenessLog()
  let foundationTimer = Foundation.Timer(timeInterval: 0.002, repeats: true) { timer in
    theirs.values.append(Date().timeIntervalSince(timer.fireDate) * 1e9)
    if theirs.values.count >= fires { timer.invalidate() }
  }
  Foundation.RunLoop.current.add(foundationTimer, forMode: .default)
  while foundationTimer.isValid { Foundation.RunLoop.current.run(until: Date(timeIntervalSinceNow: 0.1)) }

  harness.record(
    id: id, subject: .toolkit("RunLoopTimer 2 ms (lateness, ns)"), group: "RunLoop", nanoseconds: ours.values)
  harness.record(
    id: id, subject: .peer("Foundation.Timer 2 ms (lateness, ns)"), group: "RunLoop", nanoseconds: theirs.values)
  harness.record(
    id: id + "-p99", subject: .toolkit("RunLoopTimer 2 ms (p99 lateness, ns)"), group: "RunLoop",
    nanoseconds: [percentile(ours.values, 0.99)])
  harness.record(
    id: id + "-p99", subject: .peer("Foundation.Timer 2 ms (p99 lateness, ns)"), group: "RunLoop",
    nanoseconds: [percentile(theirs.values, 0.99)])
}

// MARK: Idle CPU

/// The calling thread's CPU time (ns), voluntary context switches (each blocking wait that
/// slept counts one) and involuntary ones (the scheduler took the processor away from it).
func threadUsage() -> (cpu: Double, sleeps: Double, preemptions: Double) {
  var usage = rusage()
  // RUSAGE_THREAD (1): glibc declares the name only under _GNU_SOURCE.
  precondition(getrusage(1, &usage) == 0, "getrusage failed")
  let user = Double(usage.ru_utime.tv_sec) * 1e9 + Double(usage.ru_utime.tv_usec) * 1e3
  let system = Double(usage.ru_stime.tv_sec) * 1e9 + Double(usage.ru_stime.tv_usec) * 1e3
  return (user + system, Double(usage.ru_nvcsw), Double(usage.ru_nivcsw))
}

private func benchmarkIdleCPU(_ harness: Harness) {
  let id = "runloop.idle-cpu"
  guard harness.wants(id) else { return }
  let idle: Duration = harness.quick ? .milliseconds(50) : .milliseconds(500)
  let seconds = Double(idle.components.seconds) + Double(idle.components.attoseconds) / 1e18

  // Several idle runs each, interleaved; CPU time is charged in scheduler ticks on some
  // kernels, so single runs are coarse.
  let runs = harness.quick ? 1 : 5
  var ours: [(cpu: Double, sleeps: Double)] = []
  var theirs: [(cpu: Double, sleeps: Double)] = []
  let loop = RunLoop::RunLoop.current
  for _ in 0..<runs {
    let far = RunLoopTimer(after: .seconds(86_400)) { _ in }
    loop.add(far, forMode: .default)
    let before = threadUsage()
    loop.run(mode: .default, timeout: idle)
    let after = threadUsage()
    far.invalidate()
    ours.append((after.cpu - before.cpu, after.sleeps - before.sleeps))

    let farFoundation = Foundation.Timer(timeInterval: 86_400, repeats: false) { _ in }
    Foundation.RunLoop.current.add(farFoundation, forMode: .default)
    let before2 = threadUsage()
    Foundation.RunLoop.current.run(until: Date(timeIntervalSinceNow: seconds))
    let after2 = threadUsage()
    farFoundation.invalidate()
    theirs.append((after2.cpu - before2.cpu, after2.sleeps - before2.sleeps))
  }
  harness.record(
    id: id, subject: .toolkit("RunLoop, far-future timer only (CPU ns per idle run)"), group: "RunLoop",
    nanoseconds: ours.map(\.cpu))
  harness.record(
    id: id, subject: .peer("Foundation.RunLoop, far-future timer only (CPU ns per idle run)"), group: "RunLoop",
    nanoseconds: theirs.map(\.cpu))
  // Not nanoseconds: how many times the thread slept (voluntary context switches) per idle run.
  harness.record(
    id: id + "-sleeps", subject: .toolkit("RunLoop (blocking waits per idle run)"), group: "RunLoop",
    nanoseconds: ours.map(\.sleeps))
  harness.record(
    id: id + "-sleeps", subject: .peer("Foundation.RunLoop (blocking waits per idle run)"), group: "RunLoop",
    nanoseconds: theirs.map(\.sleeps))
}
