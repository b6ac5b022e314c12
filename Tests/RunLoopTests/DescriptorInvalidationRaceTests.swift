import Sync
import TestSupport
import Testing

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

/// A `FileDescriptorSource` invalidated on another thread while its run loop handles it: once
/// `invalidate()` returns, the toolkit never touches the descriptor number again, so the owner
/// may close it, and a later source on a descriptor reusing the number works. The member's
/// test seam puts the invalidation at the points a real race could hit.
@Suite("RunLoop descriptor sources invalidated while firing", .timeLimit(.minutes(3)))
struct DescriptorInvalidationRaceTests {
  @Test("a source invalidated and closed before its member re-arms leaves a new source on the reused number working")
  func reArmAfterInvalidationSparesTheReusedNumber() {
    TestThread.run {
      let runLoop = RunLoop.current
      let first = PortsPipe()
      let second = PortsPipe()
      let number = first.readEnd
      let fired = Recorder<Int32>()
      let later = Box<FileDescriptorSource?>(nil)
      let source = FileDescriptorSource(descriptor: number, events: .readable) { _, _ in _ = first.readAll() }
      let invalidated = Box(false)
      source.member.setTestHooks(
        .init(beforeRearm: { [weak source] in
          guard !invalidated.value, let source else { return }
          invalidated.value = true
          // Another thread invalidates the source and closes its descriptor; the number is
          // reused at once (dup2 closes the old file) and watched by a new source.
          TestThread.run {
            source.invalidate()
            #expect(dup2(second.readEnd, number) == number)
          }
          let replacement = FileDescriptorSource(descriptor: number, events: .readable) { _, _ in
            fired.append(number)
            _ = second.readAll()
          }
          runLoop.add(replacement, forMode: .default)
          later.value = replacement
        }))
      runLoop.add(source, forMode: .default)
      first.write(1)
      let giveUp = MonotonicInstant.after(.seconds(10))
      while !invalidated.value && !giveUp.hasPassed { _ = runLoop.run(mode: .default, timeout: .zero) }
      #expect(invalidated.value)
      second.write(2)
      while fired.count == 0 && !giveUp.hasPassed { _ = runLoop.run(mode: .default, timeout: .milliseconds(100)) }
      #expect(fired.snapshot == [number], "the new source on the reused number fires")
      later.value?.invalidate()
    }
  }

  @Test("a source invalidated before its member polls never asks about, or reports, the file that reuses the number")
  func pollAfterInvalidationIsSkipped() {
    TestThread.run {
      let runLoop = RunLoop.current
      let first = PortsPipe()
      let second = PortsPipe()
      let number = first.readEnd
      let handled = Recorder<Int32>()
      let source = FileDescriptorSource(descriptor: number, events: .readable) { _, _ in handled.append(number) }
      let invalidated = Box(false)
      source.member.setTestHooks(
        .init(beforePoll: { [weak source] in
          guard !invalidated.value, let source else { return }
          invalidated.value = true
          TestThread.run {
            source.invalidate()
            // The number now names a readable file the source never watched.
            second.write(1)
            #expect(dup2(second.readEnd, number) == number)
          }
        }))
      runLoop.add(source, forMode: .default)
      first.write(1)
      let giveUp = MonotonicInstant.after(.seconds(10))
      while !invalidated.value && !giveUp.hasPassed { _ = runLoop.run(mode: .default, timeout: .zero) }
      #expect(invalidated.value)
      #expect(handled.count == 0, "the handler is not called for a poll after invalidate() returned")
    }
  }

  @Test("one source added and removed from two threads at once is watched exactly while it is in a mode")
  func concurrentAddAndRemoveKeepTheWatchInStep() {
    TestThread.run {
      let runLoop = RunLoop.current
      let pipe = PortsPipe()
      let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in _ = pipe.readAll() }
      func watched() -> Int { runLoop.lock.withLock { runLoop.memberCount } }
      for _ in 0..<20 {
        // A cancel callback of one thread's removal can run before the schedule callback of
        // the other thread's add that it undoes.
        runThreads(2) { _ in
          for _ in 0..<500 {
            runLoop.add(source, forMode: .default)
            runLoop.remove(source, forMode: .default)
          }
        }
        #expect(!runLoop.contains(source, inMode: .default))
        #expect(watched() == 0, "in no mode, so not in the epoll set")
        if watched() != 0 { break }
      }
      runLoop.add(source, forMode: .default)
      #expect(watched() == 1)
      pipe.write(1)
      #expect(runLoop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true) == .handledSource)
      source.invalidate()
      #expect(watched() == 0, "invalidated: no loop watches the descriptor")
    }
  }

  @Test("a removal whose cancel callback lags behind invalidate() spares a new source on the reused number")
  func lateCancelAfterInvalidationSparesTheReusedNumber() {
    TestThread.run {
      let runLoop = RunLoop.current
      let first = PortsPipe()
      let second = PortsPipe()
      let number = first.readEnd
      let source = FileDescriptorSource(descriptor: number, events: .readable) { _, _ in _ = first.readAll() }
      let fired = Recorder<Int32>()
      let replacement = Box<FileDescriptorSource?>(nil)
      let done = Box(false)
      source.member.setTestHooks(
        .init(beforeCancel: { [weak source] in
          guard !done.value, let source else { return }
          done.value = true
          // Between the removal (the source already left the mode) and its cancel callback,
          // another thread invalidates the source, closes the descriptor (dup2 reuses the
          // number at once) and watches the new file in the same loop.
          TestThread.run {
            source.invalidate()
            #expect(dup2(second.readEnd, number) == number)
            let later = FileDescriptorSource(descriptor: number, events: .readable) { _, _ in
              fired.append(number)
              _ = second.readAll()
            }
            runLoop.add(later, forMode: .default)
            replacement.value = later
          }
        }))
      runLoop.add(source, forMode: .default)
      runLoop.remove(source, forMode: .default)
      #expect(done.value)
      second.write(1)
      #expect(runLoop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true) == .handledSource)
      #expect(fired.snapshot == [number], "the new source on the reused number is still watched")
      replacement.value?.invalidate()
    }
  }
}
