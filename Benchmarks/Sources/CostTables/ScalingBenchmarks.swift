// Scaling series: how the run loop's cost per pass grows with the number of timers
// and of file-descriptor sources, and how thread creation behaves when many threads exist.
//
//   runloop.pass-with-timers-N      one zero-timeout pass of a mode holding N far-future timers
//   runloop.pass-with-fd-sources-N  one zero-timeout pass of a mode holding N idle fd sources
//   thread.create-with-existing-N   create-to-start latency while N other threads are parked
//
// The report prints each as a scaling table with its growth (constant / log / linear).

import CBenchmarkShims
import RunLoop
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

func registerScalingBenchmarks(_ harness: Harness) {
  let counts = harness.quick ? [1, 10, 100] : [1, 10, 100, 1_000, 10_000]
  let group = "Scaling"
  let runLoop = RunLoop.current

  if harness.wants("runloop.pass-with-timers") {
    for count in counts {
      let mode = RunLoopMode("scaling-timers-\(count)")
      let base = MonotonicInstant.after(.seconds(3_600))
      let timers = (0..<count).map { index in
        RunLoopTimer(fireAt: base + .microseconds(Int64(index))) { _ in }
      }
      for timer in timers { runLoop.add(timer, forMode: mode) }
      harness.measure(
        id: "runloop.pass-with-timers-\(count)", subject: .toolkit("RunLoop (zero-timeout pass)"), group: group,
        operations: max(100, 200_000 / count)
      ) { iterations in
        for _ in 0..<iterations { _ = runLoop.run(mode: mode, timeout: .zero) }
      }
      for timer in timers { timer.invalidate() }
    }
  }

  if harness.wants("runloop.pass-with-fd-sources") {
    raiseDescriptorLimit()
    let limit = descriptorLimit()
    for count in counts where count + 64 <= limit {
      let mode = RunLoopMode("scaling-fds-\(count)")
      var descriptors: [Int32] = []
      var sources: [FileDescriptorSource] = []
      for _ in 0..<count {
        let descriptor = bench_eventfd()
        guard descriptor >= 0 else { break }
        descriptors.append(descriptor)
        let source = FileDescriptorSource(descriptor: descriptor, events: .readable) { _, _ in }
        _ = runLoop.add(source, forMode: mode)
        sources.append(source)
      }
      guard descriptors.count == count else {
        printError("runloop.pass-with-fd-sources-\(count): could not create \(count) eventfds; skipped")
        for source in sources { source.invalidate() }
        for descriptor in descriptors { close(descriptor) }
        continue
      }
      harness.measure(
        id: "runloop.pass-with-fd-sources-\(count)", subject: .toolkit("RunLoop (zero-timeout pass)"), group: group,
        operations: max(100, 200_000 / count)
      ) { iterations in
        for _ in 0..<iterations { _ = runLoop.run(mode: mode, timeout: .zero) }
      }
      for source in sources { source.invalidate() }
      for descriptor in descriptors { close(descriptor) }
    }
  }

  if harness.wants("thread.create-with-existing") {
    let existing = harness.quick ? [1, 10, 100] : [1, 10, 100, 1_000]
    for count in existing {
      let release = Sync.Semaphore(value: 0)
      let parked = Latch(count: count)
      var configuration = ThreadConfiguration()
      configuration.stackSize = ThreadConfiguration.minimumStackSize * 4
      let sleepers = SpawnedThreads(count: count, configuration: configuration) {
        parked.countDown(by: 1)
        release.wait()
      }
      parked.wait()
      let samples = (0..<(harness.quick ? 5 : 101)).map { _ in createToStartNanoseconds() }
      harness.record(
        id: "thread.create-with-existing-\(count)", subject: .toolkit("Threads.Thread (create to start)"),
        group: group, nanoseconds: samples)
      for _ in 0..<count { release.signal() }
      sleepers.joinAll()
    }
  }
}

/// Nanoseconds from `Thread.spawn` until the new thread's body starts.
private func createToStartNanoseconds() -> Double {
  let started = AtomicInteger<UInt64>(0)
  let before = Harness.now()
  let thread = try! Threads.Thread.spawn { started.store(Harness.now(), ordering: .releasing) }
  thread.join()
  return Double(started.load(ordering: .acquiring) - before)
}

private func descriptorLimit() -> Int {
  var limit = rlimit()
  guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1_024 }
  return Int(clamping: limit.rlim_cur)
}

private func raiseDescriptorLimit() {
  var limit = rlimit()
  guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
  limit.rlim_cur = min(limit.rlim_max, 65_536)
  _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
}
