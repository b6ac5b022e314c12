import Sync
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

// Scenarios of WebKit's WTF Threading tests translated to the toolkit's `Thread`.

/// Runs `body` on a raw pthread (a thread the toolkit did not create) and joins it.
private func runOnForeignThread(_ body: @escaping @Sendable () -> Void) throws {
  final class Context: @unchecked Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
  }
  var handle = pthread_t()
  let context = Unmanaged.passRetained(Context(body)).toOpaque()
  let result = pthread_create(
    &handle, nil,
    { raw in
      Unmanaged<Context>.fromOpaque(raw!).takeRetainedValue().body()
      return nil
    }, context)
  try #require(result == 0)
  #expect(pthread_join(handle, nil) == 0)
}

@Suite("WebKit WTF scenarios: threads", .timeLimit(.minutes(3)))
struct PeerWebKitThreadTests {
  @Test("foreign threads get distinct thread objects, distinct from a toolkit thread's, while they are referenced")
  func foreignThreadIdentity() throws {
    let first = TestBox<Thread?>(nil)
    let second = TestBox<Thread?>(nil)
    // One after the other: the second pthread may reuse the first one's handle and stack.
    try runOnForeignThread { first.value = Thread.current }
    try runOnForeignThread { second.value = Thread.current }
    let thread1 = try #require(first.value)
    let thread2 = try #require(second.value)
    #expect(thread1 !== thread2)
    #expect(thread1 != thread2)
    #expect(thread1.id != thread2.id)
    let own = try Thread.spawn { () throws(Never) -> Bool in
      let current = Thread.current
      return current !== thread1 && current !== thread2 && current.id != thread1.id && current.id != thread2.id
    }
    let distinct = own.join()
    #expect(distinct)
    #expect(thread1.isFinished && thread2.isFinished)
  }

  @Test("fifty threads, each started with a handshake, run their work on themselves and are joined")
  func manyThreadsWithHandshake() throws {
    let count = 50
    let results = try spawnAll(0..<count) { index -> Int in
      // The work checks it runs on its own thread, twice, as WTF's assertIsCurrent does.
      let me = Thread.current
      var counter = 0
      if Thread.current == me { counter += 1 }
      if Thread.current == me && !me.isMainThread && me.isExecuting { counter += 1 }
      return counter * 1_000 + index
    }
    #expect(results == (0..<count).map { 2_000 + $0 })
  }

  @Test("a thread's name is what it was spawned with, seen from the thread and from outside")
  func threadNames() throws {
    let name = "peer-webkit-name"
    let started = TestLatch()
    let release = TestLatch()
    let worker = try Thread.spawn(name: name) { () throws(Never) -> String? in
      started.open()
      release.wait()
      return Thread.current.name
    }
    started.wait()
    #expect(worker.thread.name == name)
    release.open()
    let seenInside = worker.join()
    #expect(seenInside == name)
  }

  @Test("thread-local copies get their destructor on their own thread when it ends, once each")
  func threadLocalDestructors() throws {
    let destroyed = TestBox<[Int]>([])
    let onRightThread = TestBox(true)
    let owner = TestBox<[UInt64: Int]>([:])
    let local = ThreadLocal<Int>(
      initialValue: { -1 },
      destructor: { value in
        let expected = owner.value[Thread.current.id]
        if expected != nil && expected != value { onRightThread.value = false }
        destroyed.update { $0.append(value) }
      })
    _ = try spawnAll(0..<8) { index in
      local.value = index
      owner.update { $0[Thread.current.id] = index }
      local.value += 100
      owner.update { $0[Thread.current.id] = index + 100 }
    }
    #expect(destroyed.value.sorted() == (0..<8).map { $0 + 100 })
    #expect(onRightThread.value)
  }
}
