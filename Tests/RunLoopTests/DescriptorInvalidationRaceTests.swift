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
@Suite("RunLoop descriptor sources invalidated while firing", .timeLimit(.minutes(1)))
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
}
