import RunLoop
import Sync
import TestSupport
import Testing

// Listings 3-3..3-9: a custom input source with a command buffer. Its schedule routine
// registers the source with the "main thread" (here a coordinator thread running its own run
// loop, standing in for the application's main thread, which the test runner owns), its
// perform routine drains the commands, its cancel routine unregisters it; clients add a
// command, signal the source and wake its run loop.

/// Listing 3-3: the custom input source object and its command buffer.
final class CommandRunLoopSource: Sendable {
  /// Commands and their data, protected by the lock (clients add from other threads).
  private let commands = Recorder<(command: Int, data: String)>()
  private let drained = Box(0)
  let processed = Recorder<String>()
  private let box = Box<RunLoopSource?>(nil)
  let delegate: SourceRegistry

  /// Listing 3-7 (init): creates the run-loop source with the three routines.
  init(delegate: SourceRegistry) {
    self.delegate = delegate
    let source = RunLoopSource(
      order: 0,
      schedule: { [unowned self] runLoop, mode in self.scheduleRoutine(runLoop, mode) },
      cancel: { [unowned self] runLoop, mode in self.cancelRoutine(runLoop, mode) },
      perform: { [unowned self] in self.sourceFired() })
    box.value = source
  }

  var runLoopSource: RunLoopSource { box.value! }

  /// Listing 3-7: install the source on the calling thread's run loop.
  func addToCurrentRunLoop() {
    RunLoop.current.add(runLoopSource, forMode: .default)
  }

  func invalidate() {
    runLoopSource.invalidate()
  }

  /// Listing 3-4: the schedule routine registers the source with the coordinator.
  private func scheduleRoutine(_ runLoop: RunLoop, _ mode: RunLoopMode) {
    let context = RunLoopContext(runLoop: runLoop, source: self)
    delegate.runLoop.performAndWakeUp(inModes: [.default]) { [delegate] in delegate.registerSource(context) }
  }

  /// Listing 3-5: the perform routine drains the command buffer.
  private func sourceFired() {
    let all = commands.snapshot
    let start = drained.value
    for entry in all[start...] { processed.append("\(entry.command):\(entry.data)") }
    drained.value = all.count
  }

  /// Listing 3-6: the cancel routine unregisters the source from the coordinator.
  private func cancelRoutine(_ runLoop: RunLoop, _ mode: RunLoopMode) {
    let context = RunLoopContext(runLoop: runLoop, source: self)
    delegate.runLoop.performAndWakeUp(inModes: [.default]) { [delegate] in delegate.removeSource(context) }
  }

  /// Client interface: record a command for the source's thread.
  func addCommand(_ command: Int, withData data: String) {
    commands.append((command, data))
  }

  /// Listing 3-9: signal the source and wake its run loop.
  func fireAllCommands(on runLoop: RunLoop) {
    runLoopSource.signal()
    runLoop.wakeUp()
  }
}

/// The container passed to the coordinator on registration (Listing 3-3's RunLoopContext).
struct RunLoopContext: Sendable {
  let runLoop: RunLoop
  let source: CommandRunLoopSource

  func isSame(as other: RunLoopContext) -> Bool {
    runLoop === other.runLoop && source === other.source
  }
}

/// Listing 3-8: the coordinator's registration methods (the app delegate's sourcesToPing).
final class SourceRegistry: Sendable {
  let runLoop: RunLoop
  let sourcesToPing = Box<[RunLoopContext]>([])
  let registrations = Box(0)

  init(runLoop: RunLoop) { self.runLoop = runLoop }

  func registerSource(_ sourceInfo: RunLoopContext) {
    sourcesToPing.value.append(sourceInfo)
    registrations.value += 1
  }

  func removeSource(_ sourceInfo: RunLoopContext) {
    var sources = sourcesToPing.value
    if let index = sources.firstIndex(where: { $0.isSame(as: sourceInfo) }) { sources.remove(at: index) }
    sourcesToPing.value = sources
  }
}

@Suite(.timeLimit(.minutes(3))) struct Listing3_3_3_9Tests {
  @Test func customInputSourceWithCommandBuffer() {
    // The coordinator ("main") thread runs its run loop until told to finish.
    let registryBox = Box<SourceRegistry?>(nil)
    let coordinatorDone = Box(false)
    let coordinator = runLoopExampleSpawn {
      let runLoop = RunLoop.current
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: .default)
      registryBox.value = SourceRegistry(runLoop: runLoop)
      while !coordinatorDone.value { runLoop.run(mode: .default, timeout: .seconds(1)) }
    }
    waitUntil { registryBox.value != nil }
    let registry = registryBox.value!

    // The worker installs the source and runs its loop (Listing 3-2's skeleton).
    let workerLoop = Box<RunLoop?>(nil)
    let commandSource = CommandRunLoopSource(delegate: registry)
    let worker = runLoopExampleSpawn {
      commandSource.addToCurrentRunLoop()
      workerLoop.value = RunLoop.current
      var done = false
      repeat {
        let result = RunLoop.current.run(mode: .default, timeout: .seconds(1), returnAfterSourceHandled: true)
        done = result == .stopped || result == .finished
      } while !done
    }

    // The schedule routine registered the source with the coordinator.
    waitUntil { registry.sourcesToPing.value.count == 1 }
    let context = registry.sourcesToPing.value[0]
    waitUntil { workerLoop.value != nil }
    #expect(context.runLoop === workerLoop.value)
    #expect(context.source === commandSource)

    // Clients add commands, then signal and wake.
    for batch in 0..<3 {
      context.source.addCommand(batch * 2, withData: "a")
      context.source.addCommand(batch * 2 + 1, withData: "b")
      context.source.fireAllCommands(on: context.runLoop)
      waitUntil { commandSource.processed.count == (batch + 1) * 2 }
    }
    #expect(commandSource.processed.snapshot == ["0:a", "1:b", "2:a", "3:b", "4:a", "5:b"])

    // Invalidating calls the cancel routine, which unregisters the source.
    commandSource.invalidate()
    context.runLoop.wakeUp()
    worker.join()
    waitUntil { registry.sourcesToPing.value.isEmpty }
    #expect(registry.registrations.value == 1)

    coordinatorDone.value = true
    registry.runLoop.stop()
    coordinator.join()
  }
}
