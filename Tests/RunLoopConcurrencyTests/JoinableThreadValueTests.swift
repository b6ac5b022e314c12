import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

@Suite(.timeLimit(.minutes(3))) struct JoinableThreadValueTests {
  struct Failed: Error, Equatable { let code: Int }

  @Test func valueReturnsTheBodysResult() async {
    let thread = try! Thread.spawn(name: "answer") { () throws(Never) -> Int in 42 }
    #expect(await thread.value() == 42)
  }

  @Test func valueRethrowsTheBodysTypedError() async {
    let thread = try! Thread.spawn { () throws(Failed) -> Int in throw Failed(code: 7) }
    do throws(Failed) {
      _ = try await thread.value()
      Issue.record("no error")
    } catch {
      #expect(error == Failed(code: 7))
    }
  }

  @Test func valueReturnsAfterTheThreadsExitHandlersRan() async {
    let handlerRan = AtomicBool(false)
    let thread = try! Thread.spawn { () throws(Never) in
      Thread.current.onExit { handlerRan.store(true, ordering: .releasing) }
    }
    await thread.value()
    #expect(handlerRan.load(ordering: .acquiring))
  }

  @Test func cancellingTheAwaitingTaskLeavesTheThreadRunningAndStillDeliversItsResult() async {
    let release = Latch(count: 1)
    let started = Latch(count: 1)
    let exitRequested = AtomicBool(false)
    let object = LockedValue<Thread?>(nil)
    let waiter = Task {
      let thread = try! Thread.spawn { () throws(Never) -> Int in
        started.countDown()
        release.wait()
        exitRequested.store(Thread.current.isExitRequested, ordering: .relaxed)
        return 5
      }
      object.withLock { $0 = thread.thread }
      return await thread.value()
    }
    await offPool { blockingWait(started) }
    waiter.cancel()
    let thread = object.withLock { $0 }
    #expect(thread?.isFinished == false)  // the thread runs on, untouched by the cancellation
    release.countDown()
    #expect(await waiter.value == 5)
    #expect(!exitRequested.load(ordering: .relaxed))
    #expect(thread?.isFinished == true)
  }

  @Test func aCancellationHandlerCanForwardCancellationAsAnExitRequest() async {
    let started = Latch(count: 1)
    let waiter = Task {
      let thread = try! Thread.spawn { () throws(Never) -> Bool in
        let exitRequested = Latch(count: 1)
        _ = Thread.current.addExitRequestHandler { exitRequested.countDown() }
        started.countDown()
        exitRequested.wait()
        return Thread.current.isExitRequested
      }
      let object = thread.thread
      var handle = Optional(consume thread)
      return await withTaskCancellationHandler {
        await handle.take()!.value()
      } onCancel: {
        object.requestExit()
      }
    }
    await offPool { blockingWait(started) }
    waiter.cancel()
    #expect(await waiter.value == true)
  }
}
