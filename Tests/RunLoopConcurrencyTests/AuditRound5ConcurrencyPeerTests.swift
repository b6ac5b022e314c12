import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

/// Round 5: Swift runtime executor scenarios not ported before
/// (`test/Concurrency/Runtime/async_task_executor_unstructured_task_ownership.swift`).
@Suite("Audit round 5: concurrency, peer scenarios", .timeLimit(.minutes(3)))
struct AuditRound5ConcurrencyPeerTests {
  /// The runtime's task-executor ownership test: an unstructured task keeps its preferred
  /// executor alive, so the executor is released only after the task completes, whenever
  /// the creator let go of it. With a group: the creator drops its reference while the task
  /// is suspended; every later resumption still runs on the group's threads (not on the
  /// global executor, as after a shutdown), and once the task has completed the group is
  /// released and its threads end.
  @Test func aTaskKeepsItsPreferredGroupAliveAndOnItUntilItCompletes() async {
    var group: RunLoopThreadGroup? = makeGroup(threadCount: 2)
    let threads = group!.threads
    let weak = WeakGroup(group!)
    let gate = AsyncStepGate()
    let task = Task(executorPreference: group!) { () -> [Bool] in
      var onGroup: [Bool] = [threads.contains(Thread.current)]
      for _ in 0..<5 {
        await gate.pass()
        onGroup.append(threads.contains(Thread.current))
        try? await Task.sleep(for: .milliseconds(1))
        onGroup.append(threads.contains(Thread.current))
      }
      return onGroup
    }
    group = nil
    // The creator's reference is gone; the task still holds the group.
    #expect(weak.group != nil)
    #expect(threads.allSatisfy { !$0.isFinished })
    for _ in 0..<5 { await gate.open() }
    let onGroup = await task.value
    #expect(onGroup.allSatisfy { $0 }, "resumptions off the group: \(onGroup)")
    await offPool { waitUntil { weak.group == nil && threads.allSatisfy { $0.isFinished } } }
    #expect(weak.group == nil)
    #expect(threads.allSatisfy { $0.isFinished })
  }
}

private final class WeakGroup: @unchecked Sendable {
  weak var group: RunLoopThreadGroup?
  init(_ group: RunLoopThreadGroup) { self.group = group }
}

/// A gate a task passes once per `open()`: `pass()` suspends until the next opening.
private actor AsyncStepGate {
  private var permits = 0
  private var waiter: CheckedContinuation<Void, Never>?

  func pass() async {
    if permits > 0 {
      permits -= 1
      return
    }
    await withCheckedContinuation { waiter = $0 }
  }

  func open() {
    if let waiter {
      self.waiter = nil
      waiter.resume()
    } else {
      permits += 1
    }
  }
}
