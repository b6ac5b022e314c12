import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

@Suite("Exit handlers (onExit)", .timeLimit(.minutes(3)))
struct ExitHandlerTests {
  @Test func handlersRunOnTheExitingThreadAfterTheBodyLastAddedFirst() throws {
    let log = TestBox<[String]>([])
    let worker = try Thread.spawn { () -> Thread in
      let me = Thread.current
      for index in 1...3 {
        me.onExit { log.update { $0.append("exit \(index) on itself: \(Thread.current === me)") } }
      }
      log.update { $0.append("body") }
      return me
    }
    let thread = worker.thread
    let inside = worker.join()
    #expect(inside === thread)
    // join() returned, so the handlers have run: the thread ended after them.
    #expect(log.value == ["body", "exit 3 on itself: true", "exit 2 on itself: true", "exit 1 on itself: true"])
  }

  @Test func handlersSeeTheThreadDictionaryWhileTheThreadIsNotYetFinished() throws {
    let seen = TestBox<(Int?, Bool, Bool)?>(nil)
    let worker = try Thread.spawn {
      Thread.current.threadDictionary["connection"] = 42
      Thread.current.onExit {
        let me = Thread.current
        seen.value = (me.threadDictionary["connection", as: Int.self], me.isExecuting, me.isFinished)
      }
    }
    let thread = worker.thread
    worker.join()
    let (value, executing, finished) = try #require(seen.value)
    #expect(value == 42)
    #expect(executing && !finished)
    #expect(thread.isFinished)
    #expect(thread.threadDictionary.count == 0)
  }

  @Test func aHandlerAddedByARunningHandlerAlsoRuns() throws {
    let log = TestBox<[String]>([])
    let worker = try Thread.spawn {
      Thread.current.onExit { log.update { $0.append("first") } }
      Thread.current.onExit {
        log.update { $0.append("second") }
        Thread.current.onExit { log.update { $0.append("added by second") } }
      }
    }
    worker.join()
    #expect(log.value == ["second", "added by second", "first"])
  }

  @Test func aHandlerAddedBeforeStartRunsOnTheStartedThread() throws {
    let ran = TestLatch()
    let onItself = TestBox(false)
    let bodyRan = TestBox(false)
    let thread = Thread(name: "exit-handler-before-start") { bodyRan.value = true }
    let expected = ObjectIdentifier(thread)
    thread.onExit {
      onItself.value = bodyRan.value && ObjectIdentifier(Thread.current) == expected
      ran.open()
    }
    try thread.start()
    ran.wait()
    #expect(onItself.value)
  }

  @Test func aDroppedHandleStillRunsTheThreadsHandlers() throws {
    let ran = TestLatch()
    let release = TestLatch()
    let worker = try Thread.spawn {
      Thread.current.onExit { ran.open() }
      release.wait()
    }
    worker.detach()
    release.open()
    ran.wait()
  }

  @Test func threadsCreatedByOtherCodeRunTheirHandlersAsTheyEnd() throws {
    // A thread created with raw pthread_create: its handlers run from the destructor of
    // `Thread.current`'s thread-specific data, with `Thread.current` still its object.
    let log = TestBox<[String]>([])
    let adopted = TestBox<Thread?>(nil)
    let context = Unmanaged.passRetained(Context(log: log, adopted: adopted)).toOpaque()
    var handle = pthread_t()
    let result = pthread_create(
      &handle, nil,
      { context in
        let context = Unmanaged<Context>.fromOpaque(context!).takeRetainedValue()
        let me = Thread.current
        context.adopted.value = me
        me.threadDictionary["probe"] = "still here"
        let log = context.log
        me.onExit { log.update { $0.append("first, current is itself: \(Thread.current === me)") } }
        me.onExit {
          let probe = Thread.current.threadDictionary["probe", as: String.self] ?? "gone"
          log.update { $0.append("second, dictionary: \(probe)") }
        }
        log.update { $0.append("start routine returns") }
        return nil
      }, context)
    try #require(result == 0)
    #expect(pthread_join(handle, nil) == 0)
    #expect(
      log.value == [
        "start routine returns", "second, dictionary: still here", "first, current is itself: true",
      ])
    let thread = try #require(adopted.value)
    #expect(thread.isFinished)
  }

  @Test func aThreadCreatedByOtherCodeReleasesItsDictionaryWhileCurrentIsStillItsObject() throws {
    // As on a toolkit thread: a value released with the dictionary as the thread ends sees
    // `Thread.current` as the ending thread's object (not a fresh one adopted anew).
    let log = TestBox<[String]>([])
    let adopted = TestBox<Thread?>(nil)
    let context = Unmanaged.passRetained(Context(log: log, adopted: adopted)).toOpaque()
    var handle = pthread_t()
    let result = pthread_create(
      &handle, nil,
      { context in
        let context = Unmanaged<Context>.fromOpaque(context!).takeRetainedValue()
        let me = Thread.current
        me.name = "foreign"
        context.adopted.value = me
        let log = context.log
        me.threadDictionary["probe"] = DeinitProbe {
          log.update {
            $0.append("released, current is itself: \(Thread.current === me) \(Thread.current.name ?? "nil")")
          }
        }
        return nil
      }, context)
    try #require(result == 0)
    #expect(pthread_join(handle, nil) == 0)
    #expect(log.value == ["released, current is itself: true foreign"])
    let thread = try #require(adopted.value)
    #expect(thread.isFinished)
    #expect(thread.threadDictionary.count == 0)
  }
}

/// Runs `onDeinit` when released.
private final class DeinitProbe: Sendable {
  let onDeinit: @Sendable () -> Void
  init(_ onDeinit: @escaping @Sendable () -> Void) { self.onDeinit = onDeinit }
  deinit { onDeinit() }
}

/// What the raw pthread in `threadsCreatedByOtherCodeRunTheirHandlersAsTheyEnd` receives.
private final class Context {
  let log: TestBox<[String]>
  let adopted: TestBox<Thread?>
  init(log: TestBox<[String]>, adopted: TestBox<Thread?>) {
    self.log = log
    self.adopted = adopted
  }
}
