import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

/// `FileDescriptorReadiness.invalidate()` and `PortMessages.invalidate()`: the sequence ends
/// at once, and a new sequence of the same descriptor or port can be made right after, even
/// while the runtime still holds the old one (a finished task's captures are released on the
/// runtime's own thread, possibly after its `value` was returned).
@Suite("Async sequences invalidated explicitly", .timeLimit(.minutes(3)))
struct SequenceInvalidationTests {
  /// Each round: a task takes one report from a new sequence and returns; the awaiting code
  /// invalidates the sequence and makes the next one for the same descriptor at once. Every
  /// old sequence is kept alive here, as the runtime may keep one a while: one still
  /// watching the descriptor would stop the process ("already watched").
  @Test func aNewReadinessSequenceRightAfterInvalidateNeverFindsTheDescriptorWatched() async {
    let loop = LoopThread()
    let (readEnd, writeEnd) = makePipe()
    writeByte(writeEnd)  // Readable throughout: every round gets a report.
    var kept: [FileDescriptorReadiness] = []
    for round in 0..<300 {
      let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
      kept.append(readiness)
      let events = await Task { () -> FileDescriptorSource.Events? in
        var iterator = readiness.makeAsyncIterator()
        return await iterator.next()
      }.value
      #expect(events?.contains(.readable) == true, "round \(round): \(String(describing: events))")
      readiness.invalidate()
    }
    withExtendedLifetime(kept) {}
    loop.stop()
    close(readEnd)
    close(writeEnd)
  }

  /// A task waiting in `next()` gets nil at once when another invalidates the sequence; a
  /// later call returns nil though the descriptor is ready; a second `invalidate()` is
  /// harmless.
  @Test func invalidatingEndsWaitingAndLaterCalls() async {
    let loop = LoopThread()
    let (readEnd, writeEnd) = makePipe()
    let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
    let waiter = await taskWaitingInNext(readiness)
    readiness.invalidate()
    let (events, rescued) = await valueUnlessHung(waiter)
    #expect(events == nil)
    #expect(!rescued, "the waiter was still waiting after the sequence was invalidated")
    writeByte(writeEnd)
    var iterator = readiness.makeAsyncIterator()
    #expect(await iterator.next() == nil)
    readiness.invalidate()
    loop.stop()
    close(readEnd)
    close(writeEnd)
  }

  /// After `invalidate()` the descriptor may be closed and its number reused: a new pipe,
  /// likely under the same number, is watched by a new sequence and reported.
  @Test func theDescriptorCanBeClosedAndItsNumberWatchedAgain() async {
    let loop = LoopThread()
    for _ in 0..<50 {
      let (readEnd, writeEnd) = makePipe()
      let readiness = loop.runLoop.readiness(of: readEnd, events: .readable)
      writeByte(writeEnd)
      var iterator = readiness.makeAsyncIterator()
      #expect(await iterator.next()?.contains(.readable) == true)
      readiness.invalidate()
      close(readEnd)
      close(writeEnd)
    }
    loop.stop()
  }

  /// Each round: a task takes one message from a new sequence of the port; the awaiting code
  /// invalidates it and makes the next sequence at once. Every old sequence is kept alive
  /// here, as the runtime may keep one a while: one still owning the port would stop the
  /// process ("a second message sequence"). Every message arrives, in order.
  @Test func aNewMessageSequenceRightAfterInvalidateIsNeverASecondOne() async {
    let loop = LoopThread()
    let port = Port()
    var kept: [PortMessages] = []
    for round in 0..<300 {
      let messages = port.messages(on: loop.runLoop)
      kept.append(messages)
      TestThread.run { sendMessage(round, to: port) }
      let message = await Task { () -> PortMessage? in
        var iterator = messages.makeAsyncIterator()
        return await iterator.next()
      }.value
      #expect(message?.msgid == Int32(round), "round \(round): \(String(describing: message?.msgid))")
      messages.invalidate()
    }
    withExtendedLifetime(kept) {}
    loop.stop()
  }

  /// Messages still queued in the port when a sequence is invalidated stay there for the
  /// next one; a task waiting in the invalidated sequence gets nil at once.
  @Test func queuedMessagesStayInThePortForTheNextSequence() async {
    let loop = LoopThread()
    let port = Port()
    let first = port.messages(on: loop.runLoop)
    TestThread.run { for id in 1...3 { sendMessage(id, to: port) } }
    var iterator = first.makeAsyncIterator()
    #expect(await iterator.next()?.msgid == 1)
    loop.onLoop {}  // the delivering pass is over
    first.invalidate()
    #expect(await iterator.next() == nil)
    #expect(port.pendingMessageCount == 2, "messages left in the port: \(port.pendingMessageCount)")
    let second = port.messages(on: loop.runLoop)
    var secondIterator = second.makeAsyncIterator()
    #expect(await secondIterator.next()?.msgid == 2)
    #expect(await secondIterator.next()?.msgid == 3)
    let waiter = await taskWaitingInNext(second)
    second.invalidate()
    let (message, rescued) = await valueUnlessHung(waiter)
    #expect(message == nil)
    #expect(!rescued, "the waiter was still waiting after the sequence was invalidated")
    second.invalidate()
    loop.stop()
  }
}
