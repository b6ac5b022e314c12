// Threads and RunLoop beside Foundation and Synchronization: `Thread`, `RunLoop` and the
// timer types exist in Foundation too; module selectors pick the toolkit's.
import Foundation
import RunLoop
import Sync
import Synchronization
import Testing
import Threads

@Suite("Threads and RunLoop beside Foundation", .timeLimit(.minutes(3)))
struct ThreadsRunLoopInteropTests {
  @Test("every Threads public type is usable with Foundation imported")
  func threads() throws {
    var configuration = ThreadConfiguration()
    configuration.stackSize = ThreadConfiguration.defaultStackSize
    configuration.name = "interop"
    let worker = try Threads::Thread.spawn(configuration: configuration) { () -> String? in
      let local = ThreadLocal<Int> { 41 }
      local.value += 1
      Threads::Thread.current.threadDictionary["answer"] = local.value
      return Threads::Thread.current.name
    }
    #expect(worker.join() == "interop")
    #expect(Threads::Thread.main.isMainThread)
    let token: ExitRequestHandlerToken = Threads::Thread.current.addExitRequestHandler {}
    Threads::Thread.current.removeExitRequestHandler(token)
    let _: ThreadSchedulingPolicy? = configuration.schedulingPolicy
    let _: ThreadDictionary = Threads::Thread.current.threadDictionary
    // Foundation's Thread, by its own name, in the same scope.
    #expect(Foundation.Thread.current.isMainThread == Foundation.Thread.isMainThread)
  }

  @Test("every RunLoop public type is usable with Foundation imported")
  func runLoop() throws {
    let worker = try Threads::Thread.spawn { () -> [RunLoopRunResult] in
      let runLoop = RunLoop::RunLoop.current
      let fired = AtomicInteger<Int>(0)
      let activities = AtomicInteger<UInt32>(0)
      let observer = RunLoopObserver(activities: .allActivities) { _, activity in
        activities.fetchOr(UInt32(truncatingIfNeeded: activity.rawValue), ordering: .relaxed)
      }
      let source = RunLoopSource { fired.add(10, ordering: .relaxed) }
      let timer = RunLoopTimer(after: .zero) { _ in fired.add(1, ordering: .relaxed) }
      let mode: RunLoopMode = .default
      runLoop.add(observer, forMode: .common)
      runLoop.add(source, forMode: mode)
      runLoop.add(timer, forMode: mode)
      source.signal()
      let first = runLoop.run(mode: mode, timeout: .seconds(5), returnAfterSourceHandled: true)
      source.invalidate()
      // Only the one-shot timer is left: it fires, and the emptied mode finishes the run.
      let second = runLoop.run(mode: mode, timeout: .seconds(5))
      return [first, second, fired.load(ordering: .relaxed) == 11 ? .finished : .stopped]
    }
    #expect(worker.join() == [.handledSource, .finished, .finished])
    // Foundation's RunLoop, by its own name, in the same scope.
    _ = Foundation.RunLoop.current.currentMode
  }
}
