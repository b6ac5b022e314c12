import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// A file descriptor watched by run loops: the machinery behind ``FileDescriptorSource`` and
/// message ports scheduled in a run loop.
///
/// How it works, per run loop it is scheduled in:
/// 1. The descriptor joins the run loop's own epoll set (the `EpollBackend` seam) with a
///    process-unique token, *one-shot* (`EPOLLONESHOT`): the kernel reports it once, then
///    stops watching it until it is re-armed.
/// 2. When the run loop's wait reports the token, the loop calls
///    ``RunLoop/descriptorTokenReady(_:)`` (the one-line hook in `consumeReadyTokens`), which
///    signals the member's version-0 ``RunLoopSource``. The source lives in exactly the modes
///    the member was added to, so it fires only in a run in one of them; in other modes it
///    stays signalled while the descriptor stays disarmed, so a ready descriptor never makes
///    a loop running another mode spin.
/// 3. The source's perform callback (on the run-loop thread) asks `poll` which events are
///    ready, calls the handler, then re-arms the descriptor, so a descriptor that is still
///    ready is reported again at once (level-triggered behaviour, without busy loops).
///
/// Every ready member of a loop is signalled in one wait and fires in the next pass: many
/// descriptors are handled in one pass, without a helper thread.
///
/// Every `epoll_ctl` and `poll` on the descriptor runs under the member's `lock` and only
/// while the member is not `retired`: `invalidate()` sets that mark under the same lock (and
/// in that critical section removes the descriptor from every epoll set), so once it returns
/// no call on the descriptor is under way or will follow, and the owner may close it.
/// Otherwise a re-arm could modify, under this member's stale token, or a removal delete, the
/// registration of a later member watching a descriptor that reuses the number in the same
/// loop (which would then never fire), and `poll` could ask about another file.
///
/// **Closed while watched.** epoll watches an open file, not a number: a descriptor closed
/// while a duplicate of it stays open keeps reporting the member's token, and the number may
/// meanwhile name another file. Closing before `invalidate()` is misuse, and it is reported
/// instead of being turned into events for the wrong file: `poll` answering `POLLNVAL` (the
/// number is closed), a re-arm refused with `ENOENT` (the number names a file this loop does
/// not watch) and, in checked mode (``/Sync/MisuseChecking``), a file identity (`st_dev`,
/// `st_ino`, recorded when the member joins a loop while in no other) that differs at a wake-up, each
/// stop the process with a message. Checked mode looks before the handler runs (one `fstat`
/// per wake-up); unchecked mode finds a reused number at the re-arm after it.
///
/// Locks: a run loop's lock, then `DescriptorMember.registry`'s lock, then a member's `lock`,
/// then the source's lock; never the other way round.
final class DescriptorMember: @unchecked Sendable {
  let descriptor: Int32
  let token: UInt64
  /// The version-0 source that carries the member into run-loop modes.
  private(set) var source: RunLoopSource!

  /// Protects `interest`, `loops`, `retired`, `testHooks`, and is held across every system
  /// call on `descriptor` (zero-timeout `poll`, `epoll_ctl`; never user code).
  private let lock = Sync.Lock()
  /// Set by `invalidate()`: the descriptor may be closed from then on, so it is never
  /// touched again.
  private var retired = false
  /// Test seam, nil outside tests; see ``TestHooks``.
  private var testHooks: TestHooks?
  /// TK_EPOLL_READABLE / TK_EPOLL_WRITABLE bits the handler wants (0 = disabled).
  private var interest: UInt32
  /// The run loops the member is scheduled in, with how many of their modes hold it (the
  /// schedule callbacks less the cancel callbacks so far): positive for a loop whose epoll
  /// set holds the descriptor. Negative while cancel callbacks ran ahead of the schedule
  /// callbacks of the adds they undo (the loop calls both without its lock, so a removal on
  /// one thread can call back before another thread's add does): that loop's set does not
  /// hold the descriptor, and the late schedule callbacks only bring the count back to zero.
  /// A loop whose count reaches zero leaves the list.
  private var loops: [(runLoop: WeakRunLoop, modes: Int)] = []

  /// The watched file's (`st_dev`, `st_ino`), recorded when the member joins a run loop
  /// while in no other; compared at each wake-up in checked mode.
  private var identity: (device: UInt64, inode: UInt64)?
  /// Whether the process runs in checked mode (``/Sync/MisuseChecking``), read once.
  private let checksIdentity = MisuseChecking.mode == .checked

  private let handler: @Sendable (_ ready: UInt32) -> Bool

  /// Creates a member for `descriptor`, initially interested in `interest`; `handler` gets
  /// the ready TK_EPOLL_* bits on the run-loop thread.
  convenience init(descriptor: Int32, interest: UInt32, handler: @escaping @Sendable (_ ready: UInt32) -> Void) {
    self.init(handlingDescriptor: descriptor, interest: interest) { ready -> Bool in
      handler(ready)
      return true
    }
  }

  /// Creates a member whose `handler` returns whether it handled the descriptor. When it
  /// returns false (it left the descriptor to a handler running in another of the member's
  /// loops), the member is not re-armed: that handler's own re-arm, which comes after it and
  /// covers every loop, reports whatever is still ready. Re-arming here instead would report
  /// the descriptor again at once, for as long as the other handler runs (a spin).
  init(handlingDescriptor descriptor: Int32, interest: UInt32, handler: @escaping @Sendable (_ ready: UInt32) -> Bool) {
    self.descriptor = descriptor
    self.interest = interest
    self.handler = handler
    token = DescriptorMember.nextToken.fetchAdd(1, ordering: .relaxed)
    source = RunLoopSource(
      order: 0,
      schedule: { [weak self] runLoop, _ in self?.scheduled(in: runLoop) },
      cancel: { [weak self] runLoop, _ in self?.cancelled(in: runLoop) },
      reportingPerform: { [weak self] in self?.perform() ?? false })
    DescriptorMember.registry.withLock { $0[token] = WeakMember(value: self) }
  }

  deinit {
    DescriptorMember.registry.withLock { _ = $0.removeValue(forKey: token) }
  }

  /// Calls a test makes from `perform` (on the run-loop thread) and from the cancel callback,
  /// without the member's lock, to put another thread's `invalidate()` at a chosen point.
  struct TestHooks: Sendable {
    /// Called before the member polls the descriptor.
    var beforePoll: (@Sendable () -> Void)?
    /// Called after the handler, before the member re-arms the descriptor.
    var beforeRearm: (@Sendable () -> Void)?
    /// Called by the cancel callback (on the thread that removed the member from a mode),
    /// before it takes the member's lock.
    var beforeCancel: (@Sendable () -> Void)?
  }

  /// Installs (or removes) the test seam.
  func setTestHooks(_ hooks: TestHooks?) {
    lock.withLock { testHooks = hooks }
  }

  /// Stops watching for good: the member is retired (an in-progress `poll` or re-arm ends
  /// first, none starts after) and the descriptor leaves every epoll set in the same critical
  /// section, the source leaves every mode, and the run loops are woken so a run whose mode
  /// is now empty returns instead of sleeping on. Once it returns, the owner may close the
  /// descriptor: the cancel callbacks of removals still under way on other threads find the
  /// member retired and make no system call (one could otherwise remove, by number, another
  /// member's registration of a file that reuses the number).
  func invalidate() {
    let (wake, watching): ([RunLoop], [RunLoop]) = lock.withLock {
      let wake = loops.compactMap(\.runLoop.value)
      retired = true
      let watching = loops.filter { $0.modes > 0 }.compactMap(\.runLoop.value)
      for runLoop in watching { removeFromEpollSet(of: runLoop) }
      loops = []
      return (wake, watching)
    }
    for runLoop in watching { runLoop.memberRemoved() }
    source.invalidate()
    DescriptorMember.registry.withLock { _ = $0.removeValue(forKey: token) }
    for runLoop in wake { runLoop.wakeUp() }
  }

  /// Changes the events of interest and re-arms the descriptor in every run loop.
  func setInterest(_ newInterest: UInt32) {
    // Taken first and released after the lock: the last reference to a run loop is never
    // dropped with the member's lock held.
    let alive = liveRunLoops()
    lock.withLock {
      interest = newInterest
      rearmEverywhere(alive)
    }
  }

  var currentInterest: UInt32 { lock.withLock { interest } }

  /// Whether the member is scheduled in the calling thread's run loop and in no other: only
  /// this thread, by running its loop, can then handle the descriptor.
  var isScheduledOnlyInCallingThreadsLoop: Bool {
    let live = liveRunLoops()
    return live.count == 1 && live[0].isOwnedByCurrentThread
  }

  /// The live run loops whose epoll set holds the descriptor.
  private func liveRunLoops() -> [RunLoop] {
    lock.withLock { loops.compactMap { $0.modes > 0 ? $0.runLoop.value : nil } }
  }

  // MARK: - Source callbacks

  private func scheduled(in runLoop: RunLoop) {
    let first: Bool = lock.withLock {
      // Invalidated while being added: the descriptor may be closed already.
      if retired { return false }
      if let index = loops.firstIndex(where: { $0.runLoop.value === runLoop }) {
        // Already watched (positive), or undoing a cancel callback that ran ahead (negative:
        // not watched, and at zero not scheduled at all).
        loops[index].modes += 1
        if loops[index].modes == 0 { loops.remove(at: index) }
        return false
      }
      loops.removeAll { $0.runLoop.value == nil }
      let watchedElsewhere = loops.contains { $0.modes > 0 }
      loops.append((WeakRunLoop(value: runLoop), 1))
      do throws(SystemCallError) {
        // Recorded on joining a first loop (again after leaving every loop, as the owner
        // may then have closed the descriptor and reused its number legitimately).
        if !watchedElsewhere { identity = try fileIdentity() }
        _ = try shimCall("epoll_ctl") {
          tk_epoll_add(runLoop.backend.epollDescriptor, descriptor, DescriptorMember.armed(interest), token)
        }
      } catch {
        // ENOSPC/ENOMEM: the system refused another watch (its `fs.epoll.max_user_watches`,
        // or memory); `add` has no way to report it (see the type's documentation).
        if error.code.rawValue == ENOSPC || error.code.rawValue == ENOMEM {
          fatalError("FileDescriptorSource: the system refused to watch descriptor \(descriptor): \(error)")
        }
        // EBADF/EPERM: the descriptor is closed or cannot be watched (a regular file).
        reportMisuse("FileDescriptorSource", "descriptor \(descriptor) cannot be watched: \(error)")
      }
      return true
    }
    guard first else { return }
    // Polling passes must ask epoll too, and sleeps must be in epoll, now that it holds a
    // member.
    runLoop.memberAdded()
  }

  private func cancelled(in runLoop: RunLoop) {
    lock.withLock { testHooks }?.beforeCancel?()
    let last: Bool = lock.withLock {
      // Retired: `invalidate()` already took the descriptor out of every epoll set, and the
      // owner may have closed it since (and the number name another member's file).
      if retired { return false }
      guard let index = loops.firstIndex(where: { $0.runLoop.value === runLoop }) else {
        // Ahead of the schedule callback of the add this removal undoes: remembered, so
        // that callback does not start watching a descriptor in none of the loop's modes.
        loops.removeAll { $0.runLoop.value == nil }
        loops.append((WeakRunLoop(value: runLoop), -1))
        return false
      }
      loops[index].modes -= 1
      if loops[index].modes != 0 { return false }
      loops.remove(at: index)
      removeFromEpollSet(of: runLoop)
      return true
    }
    guard last else { return }
    runLoop.memberRemoved()
  }

  /// Removes the descriptor from `runLoop`'s epoll set. Called with `lock` held, before the
  /// member is retired or by `invalidate()` as it retires it, so the owner has not closed the
  /// descriptor yet (unless it broke that rule).
  private func removeFromEpollSet(of runLoop: RunLoop) {
    // A child of fork() releasing its copy must not remove the parent's registration.
    if runLoop.backend.isInherited { return }
    do throws(SystemCallError) {
      _ = try shimCall("epoll_ctl(EPOLL_CTL_DEL)") { tk_epoll_remove(runLoop.backend.epollDescriptor, descriptor) }
    } catch  where error.code == .noSuchFileOrDirectory || error.code == .badFileDescriptor {
      // The descriptor was closed before the source was invalidated; closing already took
      // it out of the epoll set, so there is nothing left to remove.
    } catch {
      fatalError("RunLoop: \(error)")
    }
  }

  /// Calls the handler if the descriptor is still ready (it may have been drained since the
  /// wait reported it) and re-arms it (not when the handler left it to another loop's, see
  /// ``init(handlingDescriptor:interest:handler:)``); returns whether the handler handled it.
  private func perform() -> Bool {
    let hooks = lock.withLock { testHooks }
    hooks?.beforePoll?()
    // Under the lock (a zero-timeout poll never blocks), so that `invalidate()` cannot
    // return, and the owner close the descriptor, while the poll is under way.
    let ready: UInt32? = lock.withLock {
      guard !retired, interest != 0 else { return nil }
      if checksIdentity { checkSameFile() }
      var entry = pollfd(fd: descriptor, events: Int16(truncatingIfNeeded: interest), revents: 0)
      // A zero-timeout poll: retrying after a signal asks the same question again.
      let count = mustSucceed("RunLoop") { () throws(SystemCallError) in
        try systemCall("poll", retryingInterrupts: true) { poll(&entry, 1, 0) }
      }
      if count > 0 && Int32(entry.revents) & Int32(POLLNVAL) != 0 { reportClosedWhileWatched("is closed") }
      return count > 0 ? UInt32(UInt16(bitPattern: entry.revents)) : nil
    }
    // The handler runs without any lock.
    if let ready, !handler(ready) { return false }
    hooks?.beforeRearm?()
    // Re-arm after the handler, in every loop: whatever is still ready is reported again.
    // Not while disabled: epoll reports a hang-up or an error whatever the mask, so a
    // disabled member re-armed here would be reported again at once, every pass (a spin);
    // it stays disarmed until `setInterest` enables it.
    let alive = liveRunLoops()
    lock.withLock { if interest != 0 { rearmEverywhere(alive) } }
    return ready != nil
  }

  /// Re-arms the descriptor with the current interest in each of `alive` that still holds
  /// the member, unless the member is retired. Called with `lock` held; `alive` is the
  /// caller's, so no run loop is released here.
  private func rearmEverywhere(_ alive: [RunLoop]) {
    guard !retired else { return }
    for runLoop in alive where loops.contains(where: { $0.runLoop.value === runLoop && $0.modes > 0 }) {
      rearm(in: runLoop, interest: interest)
    }
  }

  /// Called with `lock` held.
  private func rearm(in runLoop: RunLoop, interest: UInt32) {
    // In a child of fork(), the loop's epoll set is the parent's: leave it alone.
    if runLoop.backend.isInherited { return }
    do throws(SystemCallError) {
      _ = try shimCall("epoll_ctl(EPOLL_CTL_MOD)") {
        tk_epoll_modify(runLoop.backend.epollDescriptor, descriptor, DescriptorMember.armed(interest), token)
      }
    } catch  where error.code == .badFileDescriptor {
      // Closed by its owner before invalidating the source: the kernel forgot it (or a
      // duplicate keeps it, and the next wake-up's poll reports the closed number).
    } catch  where error.code == .noSuchFileOrDirectory {
      // The loop's set holds this member (the caller checked), so the number names a file
      // the set does not hold: the watched one was closed and the number reused.
      reportClosedWhileWatched("now names another file")
    } catch {
      fatalError("RunLoop: \(error)")
    }
  }

  /// The descriptor's file identity (`fstat`). Called with `lock` held.
  private func fileIdentity() throws(SystemCallError) -> (device: UInt64, inode: UInt64) {
    var info = stat()
    _ = try systemCall("fstat") { fstat(descriptor, &info) }
    return (UInt64(info.st_dev), UInt64(info.st_ino))
  }

  /// Checked mode, at a wake-up: stops the process if the descriptor no longer names the
  /// file recorded when the member joined its first loop. Called with `lock` held.
  private func checkSameFile() {
    guard let identity else { return }
    do throws(SystemCallError) {
      let current = try fileIdentity()
      if current != identity { reportClosedWhileWatched("now names another file") }
    } catch  where error.code == .badFileDescriptor {
      reportClosedWhileWatched("is closed")
    } catch {
      fatalError("RunLoop: \(error)")
    }
  }

  /// Stops the process: the descriptor was closed while a run loop watched it.
  private func reportClosedWhileWatched(_ finding: String) -> Never {
    reportMisuse(
      "FileDescriptorSource",
      "descriptor \(descriptor) was closed while a run loop watched it and \(finding); "
        + "invalidate() the source before closing its descriptor")
  }

  private static func armed(_ interest: UInt32) -> UInt32 {
    // One-shot even with no interest: epoll reports errors and hang-ups regardless of the mask.
    interest | UInt32(TK_EPOLL_ONE_SHOT)
  }

  // MARK: - Token registry

  private struct WeakMember {
    weak var value: DescriptorMember?
  }

  /// Tokens are unique in the process, so one registry serves every run loop.
  private static let nextToken = AtomicInteger<UInt64>(EpollBackend.firstMemberToken)
  private static let registry = LockedValue<[UInt64: WeakMember]>([:])

  /// Signals the member behind `token` and returns its source. Called by the run loop
  /// with its lock held.
  static func tokenReady(_ token: UInt64) -> RunLoopSource? {
    guard let member = registry.withLock({ $0[token]?.value }) else { return nil }
    member.source.signal()
    return member.source
  }
}

extension RunLoop {
  /// A descriptor member's token was reported ready by this loop's epoll wait: signal its
  /// source and list it in `readySources`, so it fires in the next pass of a run in one of
  /// its modes without any pass scanning the loop's members. Called from
  /// `consumeReadyTokens` with `lock` held.
  func descriptorTokenReady(_ token: UInt64) {
    if let source = DescriptorMember.tokenReady(token) { readySources.append(source) }
  }
}
