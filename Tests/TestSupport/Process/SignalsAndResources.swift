// Helpers for exit-test children that deliver signals to blocked threads and that count
// the process's descriptors and threads. Both touch process-wide state (a signal handler,
// /proc/self), so use them only in a child process that runs one scenario alone.

import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// How many SIGUSR1 the process has handled since ``installCountingSignalHandler()``.
public let signalsHandled = Atomic<Int>(0)

/// Installs a SIGUSR1 handler without `SA_RESTART` (`sa_flags = 0`, so an interrupted system
/// call fails with `EINTR` instead of restarting) that only counts into ``signalsHandled``,
/// and unblocks SIGUSR1 on the calling thread (threads started from it inherit the mask).
public func installCountingSignalHandler() {
  _ = signalsHandled.load(ordering: .relaxed)  // initialized before any signal
  var action = sigaction()
  action.__sigaction_handler.sa_handler = { _ in signalsHandled.wrappingAdd(1, ordering: .relaxed) }
  sigemptyset(&action.sa_mask)
  action.sa_flags = 0
  precondition(sigaction(SIGUSR1, &action, nil) == 0, "sigaction failed: \(errno)")
  unblockSignalOnCallingThread()
}

/// Unblocks SIGUSR1 on the calling thread (the test runner's threads block it, and new
/// threads inherit the mask of the thread that created them) and returns the thread.
@discardableResult
public func unblockSignalOnCallingThread() -> pthread_t {
  var set = sigset_t()
  sigemptyset(&set)
  sigaddset(&set, SIGUSR1)
  precondition(pthread_sigmask(SIG_UNBLOCK, &set, nil) == 0)
  return pthread_self()
}

/// The monotonic clock in nanoseconds.
public func monotonicNanoseconds() -> Int64 {
  var time = timespec()
  precondition(clock_gettime(CLOCK_MONOTONIC, &time) == 0)
  return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
}

/// Waits (yielding) until ``signalsHandled`` has grown by `count` since `start`; stops the
/// process after 20 s.
public func waitForSignalsHandled(_ count: Int, since start: Int) {
  let giveUp = monotonicNanoseconds() + 20_000_000_000
  while signalsHandled.load(ordering: .relaxed) - start < count {
    precondition(monotonicNanoseconds() < giveUp, "no signals were handled")
    sched_yield()
  }
}

/// The entries of a `/proc` directory, without `.` and `..`. For `/proc/self/fd`, the
/// listing's own descriptor and pipes are left out: the test library's exit-test machinery
/// in the child opens a pipe of its own at a moment of its choosing, while the toolkit
/// creates no pipe (its loops and ports use epoll, eventfd, timerfd and sockets).
public func procEntryCount(_ path: String) -> Int {
  guard let directory = opendir(path) else { return -1 }
  defer { closedir(directory) }
  let own = dirfd(directory)
  var count = 0
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    if name.hasPrefix(".") { continue }
    if path == "/proc/self/fd" {
      guard let number = Int32(name), number != own else { continue }
      var target = [CChar](repeating: 0, count: 64)
      let length = readlink("/proc/self/fd/\(name)", &target, target.count - 1)
      if length >= 5, target[0..<5].map({ UInt8(bitPattern: $0) }) == Array("pipe:".utf8) { continue }
    }
    count += 1
  }
  return count
}

/// The process's open descriptors, each as "number -> target" (its `/proc/self/fd` link,
/// such as `anon_inode:[eventfd]`), without the listing's own.
public func openDescriptorListing() -> Set<String> {
  guard let directory = opendir("/proc/self/fd") else { return [] }
  defer { closedir(directory) }
  let own = dirfd(directory)
  var listing = Set<String>()
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    guard let number = Int32(name), number != own else { continue }
    var target = [CChar](repeating: 0, count: 256)
    let length = readlink("/proc/self/fd/\(name)", &target, target.count - 1)
    let text = length > 0 ? String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
    listing.insert("\(name) -> \(text)")
  }
  return listing
}

/// The open descriptors (as ``openDescriptorListing()``) that are in each of `listings`
/// listings: a descriptor another thread holds for a moment (a file the runtime reads and
/// closes) is left out, while a leaked one is in every listing.
public func stableOpenDescriptors(listings: Int = 5) -> Set<String> {
  (1..<listings).reduce(openDescriptorListing()) { stable, _ in stable.intersection(openDescriptorListing()) }
}

/// Waits until the process is back to `descriptors` and at most `threads`, or stops it
/// after 20 s. The runtime's own worker threads come and go, so fewer threads is fine; the
/// test library's machinery in the child may open a descriptor or two of its own meanwhile,
/// so two more are tolerated: a leak in any 1,000-fold loop leaves hundreds.
public func expectProcessBack(descriptors: Int, threads: Int, _ what: String) {
  let giveUp = monotonicNanoseconds() + 20_000_000_000
  while procEntryCount("/proc/self/fd") > descriptors + 2 || procEntryCount("/proc/self/task") > threads {
    if monotonicNanoseconds() > giveUp {
      let counts =
        "descriptors \(procEntryCount("/proc/self/fd")) (start \(descriptors))"
        + ", threads \(procEntryCount("/proc/self/task")) (start \(threads))"
      fatalError("\(what): \(counts); open: \(openDescriptorListing().sorted())")
    }
    var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
    _ = nanosleep(&pause, nil)
  }
}
