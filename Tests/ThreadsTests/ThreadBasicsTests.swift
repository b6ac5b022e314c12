import CThreadingShims
import Sync
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

struct ParseError: Error, Equatable {
  var line: Int
}

@Suite("Spawning, joining and detaching", .timeLimit(.minutes(3)))
struct SpawnTests {
  @Test func joinReturnsTheBodysValue() throws {
    let worker = try Thread.spawn(name: "summer") { (1...100).reduce(0, +) }
    #expect(worker.join() == 5050)
  }

  @Test func joinRethrowsTheTypedError() throws {
    let worker = try Thread.spawn { () throws(ParseError) -> Int in throw ParseError(line: 7) }
    do throws(ParseError) {
      _ = try worker.join()
      Issue.record("join() returned instead of rethrowing")
    } catch {
      #expect(error == ParseError(line: 7))
    }
  }

  @Test func bodyRunsOnAnotherThread() throws {
    let joiner = Thread.current
    let worker = try Thread.spawn { Thread.current.id }
    let thread = worker.thread
    let workerID = worker.join()
    #expect(workerID != joiner.id)
    #expect(workerID == thread.id)
  }

  @Test func manyThreadsEachReturnTheirOwnValue() throws {
    let values = try spawnAll(0..<8) { index in index * index }
    #expect(values == (0..<8).map { $0 * $0 })
  }

  @Test func detachedThreadRuns() throws {
    let latch = TestLatch()
    let ran = TestBox(false)
    let thread = try Thread.detach(name: "detached-worker") {
      ran.value = Thread.current.name == "detached-worker"
      latch.open()
    }
    latch.wait()
    #expect(ran.value)
    #expect(thread.name == "detached-worker")
  }

  @Test func joinableThreadCanBeDetachedAfterStart() throws {
    let release = TestLatch()
    let done = TestLatch()
    let worker = try Thread.spawn {
      release.wait()
      done.open()
      return 1
    }
    let thread = worker.thread
    worker.detach()
    release.open()
    done.wait()
    #expect(thread.id > 1)
  }

  @Test func initThenStartAppliesConfigurationSetBeforeStart() throws {
    let latch = TestLatch()
    let seen = TestBox<(String?, Int)>((nil, 0))
    let thread = Thread {
      seen.value = (Thread.current.name, try Thread.currentStackSize().stackSize)
      latch.open()
    }
    #expect(!thread.isExecuting && !thread.isFinished)
    var configuration = thread.configuration
    configuration.stackSize = 128 * 1024
    thread.configuration = configuration
    thread.name = "configured-later"
    try thread.start()
    latch.wait()
    #expect(seen.value.0 == "configured-later")
    // glibc may hand the thread a cached stack of up to 4x the requested size.
    #expect(seen.value.1 >= 128 * 1024 && seen.value.1 <= 4 * (128 + 64) * 1024)
  }

  @Test func lifecycleFlags() throws {
    let release = TestLatch()
    let started = TestLatch()
    let worker = try Thread.spawn {
      started.open()
      release.wait()
    }
    started.wait()
    #expect(worker.thread.isExecuting)
    #expect(!worker.thread.isFinished)
    release.open()
    let thread = worker.thread
    worker.join()
    #expect(thread.isFinished)
    #expect(!thread.isExecuting)
  }
}

@Suite("Current thread, main thread, ids", .timeLimit(.minutes(3)))
struct IdentityTests {
  @Test func currentIsStableOnAThread() throws {
    let worker = try Thread.spawn { Thread.current === Thread.current }
    let stopped = worker.join()
    #expect(stopped)
    #expect(Thread.current === Thread.current)
  }

  @Test func spawnedThreadsCurrentIsItsObject() throws {
    let worker = try Thread.spawn { Thread.current }
    let thread = worker.thread
    let inside = worker.join()
    #expect(inside === thread)
  }

  @Test func mainThreadHasIDOneAndKnowsItIsMain() throws {
    #expect(Thread.main.id == 1)
    #expect(Thread.main.isMainThread)
    #expect(Thread.main.kernelThreadID == getpid())
    let worker = try Thread.spawn { (Thread.isMainThread, Thread.current.isMainThread) }
    let (staticFlag, instanceFlag) = worker.join()
    #expect(!staticFlag && !instanceFlag)
  }

  @Test func idsAreUniqueAndKernelIDsMatchGettid() throws {
    let results = try spawnAll(0..<4) { _ -> (UInt64, Int32?, Int32) in
      (Thread.current.id, Thread.current.kernelThreadID, tk_gettid())
    }
    #expect(Set(results.map(\.0)).count == 4)
    for result in results { #expect(result.1 == result.2) }
  }

  @Test func adoptedThreadGetsAnObjectThatEndsWithIt() throws {
    // A thread created with raw pthread_create, not through the toolkit.
    let box = TestBox<Thread?>(nil)
    var handle = pthread_t()
    let context = Unmanaged.passRetained(box).toOpaque()
    let result = pthread_create(
      &handle, nil,
      { context in
        let box = Unmanaged<TestBox<Thread?>>.fromOpaque(context!).takeRetainedValue()
        let current = Thread.current
        current.threadDictionary["probe"] = 1
        box.value = current
        return nil
      }, context)
    try #require(result == 0)
    #expect(pthread_join(handle, nil) == 0)
    let adopted = try #require(box.value)
    #expect(!adopted.isMainThread)
    #expect(adopted.isFinished)
    #expect(adopted.threadDictionary.count == 0)
    #expect(Thread.isMultiThreaded)
  }

  @Test func processIsMultiThreadedAfterASpawn() throws {
    try Thread.spawn {}.join()
    #expect(Thread.isMultiThreaded)
  }
}

@Suite("Exit requests", .timeLimit(.minutes(3)))
struct ExitRequestTests {
  @Test func workerObservesARequestFromAnotherThread() throws {
    let started = TestLatch()
    let worker = try Thread.spawn { () -> Int in
      started.open()
      var iterations = 0
      while !Thread.current.isExitRequested {
        iterations += 1
        Thread.yield()
      }
      return iterations
    }
    started.wait()
    #expect(!worker.thread.isExitRequested)
    worker.thread.requestExit()
    #expect(worker.thread.isExitRequested)
    #expect(worker.join() >= 0)
  }

  @Test func handlersRunOnTheRequestingThreadOnce() throws {
    let thread = Thread {}
    let calls = TestBox<[UInt64]>([])
    thread.addExitRequestHandler { calls.update { $0.append(Thread.current.id) } }
    let requester = try Thread.spawn { () -> UInt64 in
      thread.requestExit()
      thread.requestExit()
      return Thread.current.id
    }
    let requesterID = requester.join()
    #expect(calls.value == [requesterID])
  }

  @Test func handlerAddedAfterTheRequestRunsAtOnce() {
    let thread = Thread {}
    thread.requestExit()
    let ran = TestBox(false)
    thread.addExitRequestHandler { ran.value = true }
    #expect(ran.value)
  }

  @Test func removedHandlerDoesNotRun() {
    let thread = Thread {}
    let ran = TestBox(0)
    let token = thread.addExitRequestHandler { ran.value += 1 }
    thread.addExitRequestHandler { ran.value += 10 }
    thread.removeExitRequestHandler(token)
    thread.requestExit()
    #expect(ran.value == 10)
  }
}

@Suite("Sleeping and yielding", .timeLimit(.minutes(3)))
struct SleepTests {
  @Test func sleepForNeverReturnsEarly() {
    let start = MonotonicInstant.now
    Thread.sleep(for: .milliseconds(20))
    let elapsed = start.duration(to: .now)
    #expect(elapsed >= .milliseconds(20))
    #expect(elapsed < .seconds(10))
  }

  @Test func sleepUntilNeverReturnsEarly() {
    let deadline = MonotonicInstant.after(.milliseconds(15))
    Thread.sleep(until: deadline)
    #expect(deadline.hasPassed)
  }

  @Test func sleepUntilThePastReturnsAtOnce() {
    let start = MonotonicInstant.now
    Thread.sleep(until: .distantPast)
    Thread.sleep(for: .milliseconds(-5))
    Thread.yield()
    #expect(start.duration(to: .now) < .seconds(10))
  }
}

@Suite("Identity and description", .timeLimit(.minutes(3)))
struct ThreadIdentityTests {
  @Test func equalityIsIdentityAndDescriptionNamesTheThread() throws {
    let worker = try Thread.spawn(name: "decoder") { Thread.current }
    let thread = worker.thread
    let inside = worker.join()
    #expect(inside == thread)
    #expect(inside != Thread.main)
    #expect(Set([inside, thread, Thread.main]).count == 2)
    #expect(inside.description == "Thread \(inside.id) \"decoder\"")
    #expect(Thread.main.description.hasSuffix(" main") || Thread.main.name != nil)
  }
}
