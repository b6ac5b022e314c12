// Run-loop rows for a loop embedded in a foreign event loop: the cross-thread wake round trip
// when the loop's thread sleeps in the foreign loop's poll() on `RunLoop.pollDescriptor` and
// runs the loop with `runDueWork()`, beside the same round trip with the loop sleeping in its
// own run (the "runloop.cross-thread-wake" row) and the raw eventfd ping-pong reference.

import RunLoop
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Registers the embedded wake round trip (a ping-pong row, measured in every placement).
func registerEmbeddingBenchmarks(_ harness: Harness) {
  let id = "runloop.embedded-wake"
  guard harness.wants(id) else { return }
  PingPongPlacement.withMainPinned {
    let roundTrips = harness.quick ? 50 : 2_000
    let samples = harness.sampleCount(rowDefault: 11)
    _ = embeddedWakePingPong(roundTrips: roundTrips / 10)  // warm-up
    var embedded: [Double] = []
    for _ in 0..<samples { embedded.append(embeddedWakePingPong(roundTrips: roundTrips)) }
    harness.record(
      id: id, subject: .toolkit("RunLoop in a poll() loop (signal + wakeUp, answered by Semaphore)"),
      group: "RunLoop", nanoseconds: embedded)
  }
}

/// A plain thread signals a source on a thread whose run loop is driven by a hand-written
/// poll() loop (standing in for GTK or libuv) and wakes the loop; the source's handler
/// answers through a `Semaphore`. Returns ns per round trip. Per round trip the loop's thread
/// makes one poll(), one zero-timeout epoll_wait and no other system call; the waker one
/// eventfd write.
private func embeddedWakePingPong(roundTrips: Int) -> Double {
  final class Shared: @unchecked Sendable {
    let answer = Semaphore()
    let done = AtomicBool(false)
    let lock = Lock()
    var loop: RunLoop?  // protected by lock
    var source: RunLoopSource?  // protected by lock
  }
  let shared = Shared()
  let ready = Semaphore()
  let server: JoinableThread<Void, Never>
  do {
    server = try Thread.spawn { () throws(Never) in
      PingPongPlacement.pinPartner()
      let loop = RunLoop.current
      let source = RunLoopSource(perform: { shared.answer.signal() })
      loop.add(source, forMode: .default)
      shared.lock.withLock {
        shared.loop = loop
        shared.source = source
      }
      loop.runDueWork()
      ready.signal()
      var watched = pollfd(fd: loop.pollDescriptor, events: Int16(POLLIN), revents: 0)
      while !shared.done.load(ordering: .acquiring) {
        watched.revents = 0
        if poll(&watched, 1, -1) > 0 { loop.runDueWork() }
      }
      source.invalidate()
    }
  } catch {
    fatalError("Thread.spawn failed: \(error)")
  }
  ready.wait()
  let (loop, source) = shared.lock.withLock { (shared.loop!, shared.source!) }
  let start = Harness.now()
  for _ in 0..<roundTrips {
    source.signal()
    loop.wakeUp()
    shared.answer.wait()
  }
  let elapsed = Harness.now() - start
  // Handed to the loop as a block: a wake-up alone asks the loop to re-check its own work,
  // not a flag of the caller's.
  loop.performAndWakeUp { shared.done.store(true, ordering: .releasing) }
  server.join()
  return Double(elapsed) / Double(roundTrips)
}
