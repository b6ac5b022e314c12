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
  /// (`CFRunLoopPerformBlock`)
  public func perform(inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void) {
    enqueue(QueuedBlock(modes: modes, block: block))
  }

  /// Makes the common modes count as never empty (an internal keep-alive item), for
  /// `RunLoopThread`.
  func keepCommonModesAlive() {
    lock.withLock { keepsCommonModesAlive = true }
  }

  /// Queues `item` (see ``perform(inModes:_:)``).
  /// A loop whose thread has ended drops the block at once, after the lock is released (its
  /// release tells a waiting request that it will never run).
  func enqueue(_ item: QueuedBlock) {
    let modes = item.modes
    let refused: QueuedBlock? = lock.withLock {
      if threadHasEnded { return item }
      // Like Core Foundation, naming a mode creates it, so a run in it sees the block.
      for mode in modes where mode != .common && mode != .default && self.modes[mode] == nil {
        _ = modeItems(mode)
      }
      blocks.append(item)
      return nil
    }
    withExtendedLifetime(refused) {}
  }

  /// Queues `block` as ``performAndWakeUp(inModes:_:)`` does, tagged with `request` (an
  /// object the caller keeps alive until the block ran or was withdrawn), so that
  /// ``withdrawQueuedBlock(request:)`` can take it out again. For the toolkit's own waiting
  /// requests (the async bridge's `performAndAwait`).
  package func performAndWakeUp(
    inModes modes: [RunLoopMode], request: ObjectIdentifier, _ block: @escaping @Sendable () -> Void
  ) {
    enqueue(QueuedBlock(modes: modes, block: block, request: request))
    wakeUp()
  }

  /// Removes the queued block that carries out `request` (a waiting perform request whose
  /// waiter gave up), so requests to a loop that does not run cannot pile up, and the
  /// block's captures are released at once (outside the lock). A block already taken by a
  /// pass is not affected (the request itself refuses to run once withdrawn).
  package func withdrawQueuedBlock(request: ObjectIdentifier) {
    let removed: [QueuedBlock] = lock.withLock {
      guard let index = blocks.firstIndex(where: { $0.request == request }) else { return [] }
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

  /// Runs the taken blocks that match `mode` and puts the others back at the queue's head.
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
      lock.withLock { blocks = kept + blocks }
    }
  }
}
