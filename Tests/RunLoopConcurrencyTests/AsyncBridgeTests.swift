import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

@Suite(.timeLimit(.minutes(3))) struct PerformAndAwaitTests {
  struct Failed: Error, Equatable { let code: Int }

  @Test func theBlockRunsOnTheLoopsThreadAndItsValueIsReturned() async throws {
    let loop = LoopThread()
    let thread = try await loop.runLoop.performAndAwait { Thread.current }
    #expect(thread === loop.thread)
    loop.stop()
  }

  @Test func theBlocksTypedErrorIsPreserved() async {
    let loop = LoopThread()
    do {
      _ = try await loop.runLoop.performAndAwait { () throws(Failed) -> Int in throw Failed(code: 3) }
      Issue.record("no error")
    } catch {
      guard case .failed(let failure) = error else {
        Issue.record("unexpected \(error)")
        return
      }
      #expect(failure == Failed(code: 3))  // typed: `failure` is a `Failed`
      #expect(error.failure == Failed(code: 3))
      #expect(error.cancellationError == nil)
    }
    loop.stop()
  }

  @Test func cancellingBeforeTheBlockStartedThrowsCancelledAndTheBlockNeverRuns() async {
    let held = HeldLoop()
    let ran = AtomicBool(false)
    let call = Task { () -> AwaitedPerformError<Never>? in
      do throws(AwaitedPerformError<Never>) {
        try await held.runLoop.performAndAwait { ran.store(true, ordering: .relaxed) }
        return nil
      } catch {
        return error
      }
    }
    call.cancel()
    let outcome = await call.value
    held.release()
    await offPool { held.onLoop {} }  // queued after the withdrawn block: its turn has passed
    #expect(outcome.map { if case .cancelled = $0 { true } else { false } } == true)
    #expect(outcome?.cancellationError != nil)
    #expect(outcome.map { $0.failure == nil } == true)
    #expect(!ran.load(ordering: .relaxed))
    held.stop()
  }

  @Test func aRequestCancelledBeforeItsBlockStartedLeavesTheLoopsQueueWithItsCaptures() async {
    final class Capture: Sendable {}
    final class WeakCapture: @unchecked Sendable { weak var value: Capture? }
    // A loop whose thread does not run yet: the request's block stays queued.
    let held = HeldLoop()
    let watched = WeakCapture()
    let call = Task { () -> Bool in
      let capture = Capture()
      watched.value = capture
      do throws(AwaitedPerformError<Never>) {
        try await held.runLoop.performAndAwait { withExtendedLifetime(capture) {} }
        return false
      } catch {
        if case .cancelled = error { return true }
        return false
      }
    }
    let loop = held.runLoop
    func queuedBlocks() -> Int { loop.lock.withLock { loop.blocks.count } }
    while queuedBlocks() == 0 { await Task.yield() }
    call.cancel()
    #expect(await call.value, "the call did not end with cancelled")
    #expect(queuedBlocks() == 0, "the cancelled request's block is still queued")
    #expect(watched.value == nil, "the cancelled request's block and its captures are still held")
    held.release()
    held.stop()
  }

  @Test func cancellingWhileTheBlockRunsStillReturnsItsValue() async {
    let loop = LoopThread()
    let handle = LockedValue<Task<Int?, Never>?>(nil)
    let call = Task { () -> Int? in
      while handle.withLock({ $0 }) == nil { await Task.yield() }
      return try? await loop.runLoop.performAndAwait { () -> Int in
        handle.withLock { $0 }?.cancel()  // the awaiting task is cancelled while the block runs
        return 9
      }
    }
    handle.withLock { $0 = call }
    #expect(await call.value == 9)
    #expect(call.isCancelled)
    loop.stop()
  }

  @Test func aLoopWhoseThreadEndedThrowsTargetExited() async {
    let slot = LockedValue<RunLoop?>(nil)
    let thread = try! Thread.spawn { () throws(Never) in slot.withLock { $0 = RunLoop.current } }
    await thread.value()
    let runLoop = slot.withLock { $0 }!
    do {
      try await runLoop.performAndAwait {}
      Issue.record("no error")
    } catch {
      #expect({ if case .targetExited = error { true } else { false } }())
    }
  }
}

@Suite(.timeLimit(.minutes(3))) struct PortMessagesTests {
  /// Two sequences would take each other's handlers (releasing one clears the other's, which
  /// then waits for ever): the second is refused with a message naming the misuse.
  @Test(.runsExitTests) func aSecondSequenceForAPortWhileTheFirstExistsStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      let loop = LoopThread()
      let port = Port()
      let first = port.messages(on: loop.runLoop)
      let second = port.messages(on: loop.runLoop)
      withExtendedLifetime((first, second)) {}
    }
    if let result {
      let text = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(text.contains("PortMessages") && text.contains("second message sequence"), "\(text)")
    }
  }

  /// Once the first sequence is released, a new one owns the port's handlers and receives
  /// the messages.
  @Test func aSequenceCreatedAfterTheFirstIsReleasedReceivesTheMessages() async {
    let loop = LoopThread()
    let port = Port()
    do {
      let first = port.messages(on: loop.runLoop)
      TestThread.run { sendMessage(1, to: port) }
      var iterator = first.makeAsyncIterator()
      #expect(await iterator.next()?.msgid == 1)
    }
    let second = port.messages(on: loop.runLoop)
    TestThread.run { sendMessage(2, to: port) }
    var iterator = second.makeAsyncIterator()
    #expect(await iterator.next()?.msgid == 2)
    loop.stop()
  }

  @Test func messagesArriveInTheOrderSent() async {
    let loop = LoopThread()
    let port = Port()
    let messages = port.messages(on: loop.runLoop)
    TestThread.run { for id in 1...3 { sendMessage(id, to: port) } }
    var received: [Int32] = []
    for await message in messages {
      received.append(message.msgid)
      if received.count == 3 { break }
    }
    #expect(received == [1, 2, 3])
    loop.stop()
  }

  @Test func whileNobodyWaitsMessagesStayInThePort() async {
    let loop = LoopThread()
    let port = Port()
    let messages = port.messages(on: loop.runLoop)
    TestThread.run { for id in 1...2 { sendMessage(id, to: port) } }
    loop.onLoop {}  // the loop made a pass since the sends
    #expect(port.pendingMessageCount == 2)
    var iterator = messages.makeAsyncIterator()
    #expect(await iterator.next()?.msgid == 1)
    #expect(await iterator.next()?.msgid == 2)
    loop.stop()
  }

  @Test func oneNextTakesOneMessageAndTheRestStayInThePort() async {
    let loop = LoopThread()
    let port = Port()
    let messages = port.messages(on: loop.runLoop)
    TestThread.run { for id in 1...3 { sendMessage(id, to: port) } }
    var iterator = messages.makeAsyncIterator()
    #expect(await iterator.next()?.msgid == 1)
    // The delivering pass is over: what it did not hand to a waiter is still in the port.
    loop.onLoop {}
    #expect(port.pendingMessageCount == 2, "messages left in the port: \(port.pendingMessageCount)")
    loop.stop()
  }

  @Test func aReturnedMessageIsNotKeptAliveByTheSequence() async throws {
    final class WeakPort: @unchecked Sendable { weak var port: Port? }
    let loop = LoopThread()
    let port = Port()
    let messages = port.messages(on: loop.runLoop)
    let watched = WeakPort()
    TestThread.run {
      let replyPort = Port()
      watched.port = replyPort
      sendMessage(1, to: port)
      do {
        try port.send(PortMessage(msgid: 2, replyPort: .port(replyPort)), timeout: .seconds(10))
      } catch {
        Issue.record("send: \(error)")
      }
      sendMessage(3, to: port)
    }
    var iterator = messages.makeAsyncIterator()
    #expect(await iterator.next()?.msgid == 1)
    do {
      let second = await iterator.next()
      #expect(second?.msgid == 2)
      #expect(second?.replyPort?.port != nil)
    }
    // Message 2, and the reply port only it held, was returned and dropped. The loop's
    // thread may still be ending the delivering pass (the task resumed first): a block of
    // its next step runs after it.
    loop.onLoop {}
    #expect(watched.port == nil, "the sequence still holds a message it returned")
    #expect(await iterator.next()?.msgid == 3)
    loop.stop()
  }

  @Test func aCancelledWaiterReturnsNilAndTheNextMessageGoesToTheNextIteration() async {
    let loop = LoopThread()
    let port = Port()
    let messages = port.messages(on: loop.runLoop)
    let waiter = Task { () -> PortMessage? in
      var iterator = messages.makeAsyncIterator()
      return await iterator.next()
    }
    waiter.cancel()
    #expect(await waiter.value == nil)
    TestThread.run { sendMessage(7, to: port) }
    var iterator = messages.makeAsyncIterator()
    #expect(await iterator.next()?.msgid == 7)
    loop.stop()
  }

  /// Waiters cancelled while messages arrive: each message goes to the cancelled waiter or
  /// to a later call, never nowhere.
  @Test func noMessageIsLostWhenWaitersAreCancelledAsMessagesArrive() async {
    let loop = LoopThread()
    let port = Port()
    let messages = port.messages(on: loop.runLoop)
    let rounds = 200
    var received: [Int32] = []
    for round in 0..<rounds {
      let waiter = Task { () -> PortMessage? in
        var iterator = messages.makeAsyncIterator()
        return await iterator.next()
      }
      let sender = TestThread.spawn { sendMessage(round, to: port) }
      waiter.cancel()
      if let message = await waiter.value { received.append(message.msgid) }
      await sender.joined()
    }
    // Whatever the cancelled waiters did not take is still there, in order.
    var iterator = messages.makeAsyncIterator()
    while received.count < rounds, let message = await iterator.next() { received.append(message.msgid) }
    #expect(received == (0..<Int32(rounds)).map { $0 })
    loop.stop()
  }

  @Test func theSequenceEndsWhenThePortIsInvalidated() async {
    let loop = LoopThread()
    let port = Port()
    let messages = port.messages(on: loop.runLoop)
    let consumer = Task { () -> Int in
      var count = 0
      for await _ in messages { count += 1 }
      return count
    }
    TestThread.run { sendMessage(1, to: port) }
    // Invalidated once the message was taken (the port is then empty).
    while port.pendingMessageCount > 0 { await Task.yield() }
    loop.onLoop {}
    port.invalidate()
    #expect(await consumer.value <= 1)
    loop.stop()
  }

  /// A loop whose thread ended never takes a message again: a waiting task is resumed with
  /// nil at once, not left waiting until it is cancelled; the messages stay in the port.
  @Test func theSequenceEndsWhenTheLoopsThreadEnds() async {
    let loop = LoopThread()
    let port = Port()
    let messages = port.messages(on: loop.runLoop)
    let waiter = await taskWaitingInNext(messages)
    await offPool { loop.stop() }
    let (message, rescued) = await valueUnlessHung(waiter)
    #expect(message == nil)
    #expect(!rescued, "the waiter was still waiting after its loop's thread ended")
    // A sequence made for a loop whose thread has already ended is over at once (another
    // port: a port has one sequence at a time).
    let latePort = Port()
    let late = latePort.messages(on: loop.runLoop)
    let (lateMessage, lateRescued) = await valueUnlessHung(
      Task { () -> PortMessage? in
        var iterator = late.makeAsyncIterator()
        return await iterator.next()
      })
    #expect(lateMessage == nil)
    #expect(!lateRescued, "a sequence on a loop whose thread had ended waited")
    TestThread.run { sendMessage(1, to: latePort) }
    #expect(latePort.pendingMessageCount == 1)
    latePort.invalidate()
    withExtendedLifetime(messages) {}
  }
}

@Suite(.timeLimit(.minutes(3))) struct FileDescriptorReadinessTests {
  @Test func aWrittenPipeIsReportedReadableAndAgainUntilRead() async {
    let loop = LoopThread()
    let (readEnd, writeEnd) = makePipe()
    let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
    var iterator = readiness.makeAsyncIterator()
    writeByte(writeEnd)
    #expect(await iterator.next()?.contains(.readable) == true)
    // Not read: the level is reported again at the next call.
    #expect(await iterator.next()?.contains(.readable) == true)
    withExtendedLifetime(readiness) {}
    loop.stop()
    close(readEnd)
    close(writeEnd)
  }

  @Test func aCancelledWaiterReturnsNilAndTheNextCallSeesTheReadiness() async {
    let loop = LoopThread()
    let (readEnd, writeEnd) = makePipe()
    let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
    let waiter = Task { () -> FileDescriptorSource.Events? in
      var iterator = readiness.makeAsyncIterator()
      return await iterator.next()
    }
    waiter.cancel()
    #expect(await waiter.value == nil)
    writeByte(writeEnd)
    var iterator = readiness.makeAsyncIterator()
    #expect(await iterator.next()?.contains(.readable) == true)
    loop.stop()
    close(readEnd)
    close(writeEnd)
  }

  @Test func aHangUpIsReported() async {
    let loop = LoopThread()
    let (readEnd, writeEnd) = makePipe()
    let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
    close(writeEnd)
    var iterator = readiness.makeAsyncIterator()
    #expect(await iterator.next()?.contains(.hangUp) == true)
    loop.stop()
    close(readEnd)
  }

  /// A loop whose thread ended never reports the descriptor again: a waiting task is resumed
  /// with nil at once, not left waiting until it is cancelled.
  @Test func theSequenceEndsWhenTheLoopsThreadEnds() async {
    let loop = LoopThread()
    let (readEnd, writeEnd) = makePipe()
    let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
    let waiter = await taskWaitingInNext(readiness)
    await offPool { loop.stop() }
    let (events, rescued) = await valueUnlessHung(waiter)
    #expect(events == nil)
    #expect(!rescued, "the waiter was still waiting after its loop's thread ended")
    // A sequence made for a loop whose thread has already ended is over at once, even for a
    // descriptor that is ready.
    writeByte(writeEnd)
    let late = loop.runLoop.readiness(of: readEnd, events: .readable)
    let (lateEvents, lateRescued) = await valueUnlessHung(
      Task { () -> FileDescriptorSource.Events? in
        var iterator = late.makeAsyncIterator()
        return await iterator.next()
      })
    #expect(lateEvents == nil)
    #expect(!lateRescued, "a sequence on a loop whose thread had ended waited")
    withExtendedLifetime((readiness, late)) {}
    close(readEnd)
    close(writeEnd)
  }
}

/// Awaits `waiter`'s value; if it has not finished within `limit`, cancels it so that a hang
/// fails the test instead of blocking the run. Returns the value and whether it was
/// cancelled (`rescued`). The limit is a bound for a failure, never a synchronization.
func valueUnlessHung<Value: Sendable>(_ waiter: Task<Value, Never>, limit: Duration = .seconds(10)) async -> (
  Value, rescued: Bool
) {
  let rescue = Task {
    // Only a sleep that ran its whole length cancels the waiter: the sleep of a rescue
    // cancelled because the waiter finished throws at once, and must not cancel it then.
    do { try await Task.sleep(for: limit) } catch { return }
    waiter.cancel()
  }
  let value = await waiter.value
  rescue.cancel()
  // The rescue's end, so its cancellation (if its sleep ran out) is decided before it is read.
  await rescue.value
  return (value, waiter.isCancelled)
}

/// Sends a message with `id` to `port` (the send blocks while the port is full).
func sendMessage(_ id: Int, to port: Port) {
  do {
    try port.send(PortMessage(msgid: Int32(id)), timeout: .seconds(10))
  } catch {
    fatalError("send: \(error)")
  }
}

/// A pipe's two descriptors.
func makePipe() -> (Int32, Int32) {
  var fds: [Int32] = [0, 0]
  precondition(pipe(&fds) == 0, "pipe failed: \(errno)")
  return (fds[0], fds[1])
}

/// Writes one byte to `descriptor`.
func writeByte(_ descriptor: Int32) {
  var byte: UInt8 = 1
  precondition(write(descriptor, &byte, 1) == 1, "write failed: \(errno)")
}

/// The async bridges suspend the awaiting task instead of blocking its thread: with
/// `Diagnostics.Kind.blockingInTask` on, awaiting a thread's value and a block on a loop's
/// thread, each about ten thresholds long, reports nothing.
@Suite(.timeLimit(.minutes(3))) struct AsyncBridgesDoNotBlockTests {
  @Test(.runsExitTests) func awaitingAThreadOrALoopBlockReportsNoBlockingInTheTask() async {
    let result = await #expect(
      processExitsWith: .success, observing: [\.standardOutputContent, \.standardErrorContent]
    ) {
      // Started before the detector is on: starting a loop thread blocks for a moment.
      let loop = LoopThread()
      Diagnostics.blockingInTaskThreshold = .milliseconds(5)
      Diagnostics.setMode(.report, for: .blockingInTask)
      // Each waits about ten thresholds on its own thread (a duration to wait out, not a
      // synchronization), while the task awaits it.
      let thread = try! Thread.spawn(name: "slow") { () throws(Never) -> Int in
        _ = Semaphore().wait(timeout: .milliseconds(50))
        return 1
      }
      let first = await thread.value()
      let second = try! await loop.runLoop.performAndAwait { () -> Int in
        _ = Semaphore().wait(timeout: .milliseconds(50))
        return 2
      }
      Diagnostics.setMode(.off, for: .blockingInTask)
      loop.stop()
      print("values: \(first) \(second)")
    }
    guard let result else { return }
    let output = String(decoding: result.standardOutputContent, as: UTF8.self)
    #expect(output.contains("values: 1 2"))
    #expect(!String(decoding: result.standardErrorContent, as: UTF8.self).contains("[blocking-in-task]"))
  }
}
