import Sync

extension RunLoop {
  // MARK: Blocks

  /// Queues `block` to run on the loop's thread during a pass in one of `modes`
  /// (``RunLoopMode/common`` means every common mode), after the blocks queued before it.
  /// Each pass runs every queued block whose mode matches. Does NOT wake a sleeping loop
  /// (Core Foundation's rule): the block runs when the loop next makes a pass; use
  /// ``performAndWakeUp(inModes:_:)`` for prompt execution, ``performAndWait(inModes:_:)``
  /// to wait for it. A block queued on the loop's own thread while it runs (by a callback, or
  /// by another block) needs no wake-up: the loop runs it before it would sleep. Never blocks
  /// and cannot fail. A queued block keeps its mode non-empty, so a run in it does not return
  /// finished before the block ran.
  ///
  /// Order within a nested run: a pass takes every queued block at once, so while a block
  /// runs the loop again (a nested run), the blocks queued before it that the pass has not
  /// reached yet are not visible to the nested run: blocks queued from then on run there
  /// first, and the taken ones run after the block that nested returns. Core Foundation does
  /// the same; WebKit's `RunLoop::dispatch` runs them in the nested run.
  ///
  /// An empty `modes` stops the process with a message (misuse: the block could never run);
  /// so it does for every perform request.
  /// (`CFRunLoopPerformBlock`)
  public func perform(inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void) {
    enqueue(QueuedBlock(modes: modes, block: block))
  }

  /// Stops the process when `modes` is empty: a block or request for no mode could never
  /// run, and a caller waiting for it would wait for ever. (Foundation's perform requests
  /// return without performing; an empty list is a mistake worth naming.)
  static func checkModesNotEmpty(_ modes: [RunLoopMode], _ call: String) {
    if modes.isEmpty { reportMisuse("RunLoop", "\(call) with no mode (inModes: []): the block could never run") }
  }

  /// Makes the common modes count as never empty (an internal keep-alive item), for
  /// `RunLoopThread`.
  func keepCommonModesAlive() {
    lock.withLock { keepsCommonModesAlive = true }
  }

  /// Queues `item` (see ``perform(inModes:_:)``).
  /// A loop whose thread has ended drops the block at once, after the lock is released (its
  /// release tells a waiting request that it will never run); so does any loop for a request
  /// withdrawn before it was queued (its waiter found it in no queue to take it out of).
  func enqueue(_ item: QueuedBlock) {
    let modes = item.modes
    RunLoop.checkModesNotEmpty(modes, "perform")
    let refused: QueuedBlock? = lock.withLock {
      if threadHasEnded || item.isWithdrawn { return item }
      // Like Core Foundation, naming a mode creates it, so a run in it sees the block.
      for mode in modes where mode != .common && mode != .default && self.modes[mode] == nil {
        _ = modeItems(mode)
      }
      blocks.append(item)
      return nil
    }
    withExtendedLifetime(refused) {}
  }

  /// Queues `block` as ``performAndWakeUp(inModes:_:)`` does, tagged with `request`, so
  /// that ``withdrawQueuedBlock(request:)`` can take it out again (and the loop drops it
  /// wherever it finds it withdrawn). For the toolkit's own waiting requests (the async
  /// bridge's `performAndAwait`).
  package func performAndWakeUp(
    inModes modes: [RunLoopMode], request: any WithdrawableRequest, _ block: @escaping @Sendable () -> Void
  ) {
    enqueue(QueuedBlock(modes: modes, block: block, request: request))
    wakeUp()
  }

  /// Removes the queued block that carries out `request` (a waiting perform request whose
  /// waiter gave up, so its `isWithdrawn` is already true), so requests to a loop that does
  /// not run cannot pile up, and the block's captures are released at once (outside the
  /// lock). A block a pass has taken is not here: the request refuses to run once withdrawn,
  /// and the pass drops it instead of putting it back if it was for another mode.
  package func withdrawQueuedBlock(request: ObjectIdentifier) {
    let removed: [QueuedBlock] = lock.withLock {
      guard let index = blocks.firstIndex(where: { $0.request.map(ObjectIdentifier.init) == request }) else {
        return []
      }
      let removed = blocks.remove(at: index)
      // A queued block keeps a run of its mode going (`isEmpty`); without it the run may
      // have nothing left and must end, as when its last source or timer leaves.
      wakeUpIfARunIsLeftEmpty()
      return [removed]
    }
    // Released outside the lock: the block's captures may run arbitrary deinit code.
    withExtendedLifetime(removed) {}
  }

  /// Queues `block` like ``perform(inModes:_:)`` and wakes the loop so a sleeping loop runs it
  /// promptly. Never blocks and cannot fail (a loop whose thread has ended drops the block
  /// unrun). (`CFRunLoopPerformBlock` + `CFRunLoopWakeUp`)
  public func performAndWakeUp(inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void) {
    perform(inModes: modes, block)
    wakeUp()
  }

  /// Takes every queued block (to run those of the running mode), with the common modes they
  /// are matched against. Called with `lock` held.
  func takeBlocks() -> ([QueuedBlock], Set<RunLoopMode>) {
    var taken: [QueuedBlock] = []
    swap(&taken, &blocks)
    return (taken, commonModeNames)
  }

  /// Runs the queued blocks that match `mode` (FIFO); blocks queued meanwhile wait for the
  /// next call, blocks of other modes stay queued in order.
  func runBlocks(_ mode: ModeItems) {
    var taken: ([QueuedBlock], Set<RunLoopMode>)? = lock.withLock {
      blocks.isEmpty ? nil : takeBlocks()
    }
    if let common = taken?.1 { runBlocks(&taken!.0, common, mode) }
  }

  /// Runs the taken blocks that match `mode` and puts the others back at the queue's head,
  /// except those of requests withdrawn meanwhile.
  func runBlocks(_ queued: inout [QueuedBlock], _ common: Set<RunLoopMode>, _ mode: ModeItems) {
    var kept: [QueuedBlock] = []
    // Popped one at a time, so each block (and its captures) is released once it ran,
    // before the next runs (which may run the loop nested and sleep).
    queued.reverse()
    while let item = queued.popLast() {
      if item.runs(in: mode.name, commonModes: common) {
        run(item, in: mode)
      } else {
        kept.append(item)
      }
    }
    if !kept.isEmpty {
      // A request withdrawn while this pass held its block was in no queue for its waiter
      // to take it out of: it is dropped here (released after the lock), since it would do
      // nothing and would keep its modes from counting as empty.
      let withdrawn: [QueuedBlock] = lock.withLock {
        var withdrawn: [QueuedBlock] = []
        var stay: [QueuedBlock] = []
        for item in kept {
          if item.isWithdrawn { withdrawn.append(item) } else { stay.append(item) }
        }
        blocks = stay + blocks
        return withdrawn
      }
      kept.removeAll()
      withExtendedLifetime(withdrawn) {}
    }
  }
}
