import ProcessTestSupport
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

// Audit round 5: resource accounting. Every resource-owning object of the RunLoop module is
// created and destroyed 1,000 times; the process's descriptors (/proc/self/fd) and threads
// (/proc/self/task) must come back to where they started, and each object's deinit must
// run (a weak reference reads nil). Each scenario runs alone in a child process (an exit
// test): other tests of the same process open descriptors and start threads.

/// The names in `directory` (without "." and ".."), or stops the child when it cannot be read.
func round5Entries(_ directory: String) -> [String] {
  guard let handle = opendir(directory) else { preconditionFailure("opendir \(directory): errno \(errno)") }
  defer { closedir(handle) }
  // The directory's own descriptor is listed under /proc/self/fd while it is read.
  let own = String(dirfd(handle))
  var names: [String] = []
  while let entry = readdir(handle) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    if name != "." && name != ".." && !(directory == "/proc/self/fd" && name == own) { names.append(name) }
  }
  return names
}

/// The open descriptors and the threads of the process.
func round5Counts() -> (descriptors: Int, threads: Int) {
  (round5Entries("/proc/self/fd").count, round5Entries("/proc/self/task").count)
}

/// Where each open descriptor points, for a failure message.
func round5DescriptorTargets() -> String {
  round5Entries("/proc/self/fd").sorted().map { name in
    var buffer = [CChar](repeating: 0, count: 256)
    let length = readlink("/proc/self/fd/\(name)", &buffer, 255)
    return
      "\(name) -> \(length > 0 ? String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?")"
  }.joined(separator: ", ")
}

/// Runs `round` once to warm up (first-use allocations: registries, the port directory,
/// the diagnostics watchdog), takes the counts, runs it `count` times more, and stops the
/// child unless the counts come back within 2 (threads may take a moment to be reaped after
/// a detach, seconds under ThreadSanitizer: they are waited for, up to 15 s).
func round5CheckBalanced(_ what: String, count: Int = 1000, _ round: (Int) -> Void) {
  round(-1)
  let before = round5Counts()
  let targetsBefore = round5DescriptorTargets()
  for index in 0..<count { round(index) }
  // Threads that end detached leave the process at their own pace: under a sanitizer on a
  // loaded machine, hundreds of them took more than 15 s.
  let giveUp = MonotonicInstant.after(.seconds(isRunningUnderSanitizer ? 60 : 15))
  var after = round5Counts()
  while (after.descriptors != before.descriptors || after.threads > before.threads) && !giveUp.hasPassed {
    sched_yield()
    after = round5Counts()
  }
  // The child's test runtime (libdispatch, the test library) opens or closes a descriptor
  // or a thread of its own now and then; a leak per round shows as `count`.
  precondition(
    abs(after.descriptors - before.descriptors) <= 2,
    "\(what): \(after.descriptors - before.descriptors) descriptors leaked over \(count) rounds; before: \(targetsBefore); after: \(round5DescriptorTargets())"
  )
  precondition(
    abs(after.threads - before.threads) <= 2,
    "\(what): \(after.threads - before.threads) threads left over \(count) rounds")
}

/// Rounds of the scenarios that start a thread per round: 1,000, fewer under a sanitizer
/// (thread creation there costs a millisecond or more).
let round5ThreadRounds = isRunningUnderSanitizer ? 300 : 1000

/// Lowers the soft descriptor limit so that exactly `free` more descriptors can be opened
/// (descriptors take the lowest free numbers), runs `body`, and restores the limit.
func round5WithFreeDescriptors<T>(_ free: Int, _ body: () -> T) -> T {
  var original = rlimit()
  precondition(getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &original) == 0)
  let open = Set(round5Entries("/proc/self/fd").compactMap { Int($0) })
  var freeNumbers: [Int] = []
  var number = 0
  while freeNumbers.count <= free {
    if !open.contains(number) { freeNumbers.append(number) }
    number += 1
  }
  var lowered = original
  lowered.rlim_cur = rlim_t(freeNumbers[free])
  precondition(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &lowered) == 0)
  let result = body()
  precondition(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &original) == 0)
  return result
}

/// A capture whose release tells a weak reference.
final class Round5Token: Sendable {}

/// How many descriptors the epoll set `descriptor` watches (its `tfd:` lines in fdinfo).
func round5EpollMemberCount(_ descriptor: Int32) -> Int {
  let file = open("/proc/self/fdinfo/\(descriptor)", O_RDONLY | O_CLOEXEC)
  precondition(file >= 0)
  defer { close(file) }
  var text: [UInt8] = []
  var buffer = [UInt8](repeating: 0, count: 4096)
  while true {
    let count = read(file, &buffer, buffer.count)
    if count <= 0 { break }
    text += buffer[0..<count]
  }
  return String(decoding: text, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("tfd:") }.count
}

@Suite("Audit round 5: RunLoop resource accounting", .timeLimit(.minutes(3)))
struct AuditRound5RunLoopResourceTests {
  @Test(
    "1,000 threads each using a run loop with a timer, a source, a descriptor source and a port leave nothing behind",
    .runsExitTests)
  func threadRunLoopsAreReleased() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        var ends: [Int32] = [0, 0]
        precondition(pipe(&ends) == 0)
        let readEnd = ends[0]
        round5CheckBalanced("thread run loops", count: round5ThreadRounds) { _ in
          let weakLoop = Box<WeakRunLoopReference>(WeakRunLoopReference(nil))
          let token = Box<Round5TokenReference>(Round5TokenReference(nil))
          TestThread.run {
            let runLoop = RunLoop.current
            weakLoop.value = WeakRunLoopReference(runLoop)
            let captured = Round5Token()
            token.value = Round5TokenReference(captured)
            runLoop.add(RunLoopTimer(after: .seconds(3600)) { _ in _ = captured }, forMode: .default)
            runLoop.add(RunLoopSource { _ = captured }, forMode: .default)
            // Items that capture their own loop: cycles the thread's end must break.
            runLoop.add(
              RunLoopObserver(activities: .allActivities) { _, _ in _ = (captured, runLoop) }, forMode: .common)
            runLoop.add(RunLoopTimer(after: .seconds(3600)) { _ in _ = (captured, runLoop) }, forMode: "other")
            runLoop.add(FileDescriptorSource(descriptor: readEnd) { _, _ in _ = captured }, forMode: "other")
            let port = Port()
            _ = try! port.readinessDescriptor()
            port.setHandler { _ in _ = captured }
            runLoop.add(port, forMode: .default)
            try! port.send(PortMessage(msgid: 1), timeout: .zero)
            _ = runLoop.run(mode: .default, timeout: .zero)
            runLoop.perform { _ = captured }
          }
          precondition(weakLoop.value.object == nil, "a thread's run loop outlived its thread")
          precondition(token.value.object == nil, "the run loop's items kept their captures after the thread ended")
        }
        close(ends[0])
        close(ends[1])
      }
    }
  }

  @Test(
    "1,000 RunLoopThreads started and stopped leave no descriptor or thread, and their loops are freed", .runsExitTests)
  func runLoopThreadsAreReleased() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        round5CheckBalanced("RunLoopThread", count: round5ThreadRounds) { index in
          let weakLoop: WeakRunLoopReference
          do {
            let worker = try! RunLoopThread.start(name: "round5-res")
            weakLoop = WeakRunLoopReference(worker.runLoop)
            try! worker.runLoop.performAndWait {}
            if index % 2 == 0 { worker.stop() }
            // Odd rounds: dropping the handle stops and joins the thread.
          }
          precondition(weakLoop.object == nil, "a stopped RunLoopThread's loop is still alive")
        }
      }
    }
  }

  @Test(
    "1,000 RunLoopThreads whose handle is dropped on their own thread end and free their loops (detach path)",
    .runsExitTests)
  func runLoopThreadsDroppedOnThemselvesAreReleased() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        round5CheckBalanced("RunLoopThread dropped on itself", count: isRunningUnderSanitizer ? 100 : 1000) { _ in
          let holder = Round5ThreadHolder()
          let weakLoop: WeakRunLoopReference
          do {
            let worker = try! RunLoopThread.start(name: "round5-self")
            weakLoop = WeakRunLoopReference(worker.runLoop)
            let loop = worker.runLoop
            holder.worker = consume worker
            loop.performAndWakeUp { holder.worker = nil }
          }
          // The thread ends once the block returns to its loop; its loop goes with it.
          waitUntil(within: .seconds(60)) { weakLoop.object == nil }
        }
      }
    }
  }

  @Test(
    "1,000 ports with readiness descriptors, scheduled and released or invalidated, leave no descriptor", .runsExitTests
  )
  func portsAreReleased() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let runLoop = RunLoop.current
        runLoop.add(RunLoopSource {}, forMode: .default)
        round5CheckBalanced("Port") { index in
          let weak: Round5WeakPort
          do {
            let port = Port()
            weak = Round5WeakPort(port)
            _ = try! port.readinessDescriptor()
            port.setHandler { _ in _ = port }  // a cycle the invalidation ends
            port.setInvalidationHandler { _ in }
            runLoop.add(port, forMode: .default)
            try! port.send(PortMessage(msgid: 1, replyPort: .port(port)), timeout: .zero)
            if index % 2 == 0 {
              _ = runLoop.run(mode: .default, timeout: .zero)
              port.invalidate()
            } else {
              port.invalidate()
            }
          }
          precondition(weak.port == nil, "an invalidated port is still alive")
        }
        // Released without invalidation (no cycle).
        round5CheckBalanced("Port released") { _ in
          let weak: Round5WeakPort
          do {
            let port = Port()
            weak = Round5WeakPort(port)
            _ = try! port.readinessDescriptor()
            runLoop.add(port, forMode: .default)
            try! port.send(PortMessage(msgid: 1, replyPort: .port(port)), timeout: .zero)
          }
          precondition(weak.port == nil, "a released port is still alive")
        }
        precondition(round5EpollMemberCount(runLoop.pollDescriptor) == 2, "the loop's epoll set kept members")
      }
    }
  }

  @Test(
    "1,000 descriptor sources added and invalidated or released leave the loop's epoll set as it was", .runsExitTests)
  func descriptorSourcesAreReleased() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let runLoop = RunLoop.current
        runLoop.add(RunLoopSource {}, forMode: .default)
        let members = round5EpollMemberCount(runLoop.pollDescriptor)
        round5CheckBalanced("FileDescriptorSource") { index in
          var ends: [Int32] = [0, 0]
          precondition(pipe(&ends) == 0)
          let weak = Box<Round5WeakDescriptorSource>(Round5WeakDescriptorSource(nil))
          do {
            let source = FileDescriptorSource(descriptor: ends[0]) { source, _ in source.invalidate() }
            weak.value = Round5WeakDescriptorSource(source)
            runLoop.add(source, forMode: .default)
            var byte: UInt8 = 1
            precondition(write(ends[1], &byte, 1) == 1)
            if index % 3 == 0 {
              _ = runLoop.run(mode: .default, timeout: .zero)  // the handler invalidates it
            } else if index % 3 == 1 {
              source.invalidate()
            }
            // index % 3 == 2: released while added and ready.
          }
          precondition(weak.value.source == nil, "a descriptor source is still alive")
          close(ends[0])
          close(ends[1])
        }
        precondition(round5EpollMemberCount(runLoop.pollDescriptor) == members, "the loop's epoll set kept members")
      }
    }
  }

  @Test(
    "1,000 named ports served, sent to, scheduled in a run loop and invalidated or released leave nothing behind",
    .runsExitTests)
  func namedPortsAreReleased() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let runLoop = RunLoop.current
        runLoop.add(RunLoopSource {}, forMode: .default)
        let members = round5EpollMemberCount(runLoop.pollDescriptor)
        round5CheckBalanced("MessagePort", count: isRunningUnderSanitizer ? 200 : 1000) { index in
          let name = uniquePortName("round5-res")
          let weakLocal: Round5WeakMessagePort
          let weakRemote: Round5WeakMessagePort
          do {
            let local = try! MessagePort.local(name: name) { message in [UInt8(truncatingIfNeeded: message.msgid)] }
            weakLocal = Round5WeakMessagePort(local)
            runLoop.add(local, forMode: .default)
            let remote = try! MessagePort.remote(name: name)
            weakRemote = Round5WeakMessagePort(remote)
            try! remote.send(msgid: 5, sendTimeout: .seconds(5), receiveTimeout: .zero, replyMode: .oneWay)
            while runLoop.run(mode: .default, timeout: .seconds(5), returnAfterSourceHandled: true) != .handledSource {}
            if index % 2 == 0 {
              remote.invalidate()
              local.invalidate()
            }
          }
          precondition(weakLocal.port == nil, "a local named port is still alive")
          precondition(weakRemote.port == nil, "a remote named port is still alive")
        }
        precondition(round5EpollMemberCount(runLoop.pollDescriptor) == members, "the loop's epoll set kept members")
      }
    }
  }

  @Test(
    "creations refused for lack of descriptors (EMFILE) throw, leave nothing open, and work once descriptors are free",
    .disabled(
      if: isRunningUnderSanitizer,
      "a sanitizer's runtime cannot start threads in a child forked from a multithreaded process: ThreadSanitizer refuses, and AddressSanitizer's thread registry can be copied locked (another thread of the exit test's child starting or ending a thread), which can hang the child"
    ), .runsExitTests)
  func refusedCreationsLeakNothing() async {
    await #expect(processExitsWith: .success) {
      // The windows below lower the descriptor limit for the whole process. In the exit
      // test's child, the test library's and the runtime's own threads open descriptors when
      // they like, and one refused there stops the child with no message. So the scenario
      // runs in a child forked from it, where only this thread exists.
      runScenarioInForkedChild("the EMFILE scenario") {
        blocking {
          // Warm-up: first-use state (registries, the port directory) outside the windows.
          let warmName = uniquePortName("round5-emfile-warm")
          let warm = try! MessagePort.local(name: warmName) { _ in nil }
          _ = try! MessagePort.remote(name: warmName)
          warm.invalidate()
          _ = try! Port().readinessDescriptor()
          // A thread's run loop needs epoll, eventfd and timerfd: each partial failure.
          for free in 0..<3 {
            TestThread.run {
              let before = round5Counts().descriptors
              let refused: String = round5WithFreeDescriptors(free) {
                do throws(SystemCallError) {
                  _ = try RunLoop.currentOrThrow()
                  return "created"
                } catch {
                  return error.code == .tooManyOpenFiles ? "EMFILE" : "\(error)"
                }
              }
              precondition(refused == "EMFILE", "currentOrThrow with \(free) free descriptors: \(refused)")
              precondition(round5Counts().descriptors == before, "a refused run loop left descriptors open")
              // Nothing of the failure is cached: the thread gets its run loop now.
              let runLoop = try! RunLoop.currentOrThrow()
              precondition(runLoop === RunLoop.current)
            }
          }
          // A RunLoopThread whose loop cannot be made: .system, thread ended and joined.
          for free in 0..<3 {
            let before = round5Counts()
            let outcome: String = round5WithFreeDescriptors(free) {
              do throws(ThreadStartError) {
                let worker = try RunLoopThread.start(name: "round5-emfile")
                worker.stop()
                return "started"
              } catch {
                return error.systemError?.code == .tooManyOpenFiles ? "EMFILE" : "\(error)"
              }
            }
            precondition(outcome == "EMFILE", "RunLoopThread.start with \(free) free descriptors: \(outcome)")
            // The refused thread is joined; the runtime's own worker threads may come and go.
            let giveUp = MonotonicInstant.after(.seconds(2))
            var after = round5Counts()
            while (after.descriptors != before.descriptors || after.threads > before.threads) && !giveUp.hasPassed {
              sched_yield()
              after = round5Counts()
            }
            precondition(
              after.descriptors == before.descriptors && after.threads <= before.threads,
              "a refused RunLoopThread left \(before) -> \(after)")
          }
          // A local named port needs a lock file, eventfd, epoll, timerfd and a socket.
          let name = uniquePortName("round5-emfile")
          for free in 0..<5 {
            let before = round5Counts().descriptors
            let status: PortStatus? = round5WithFreeDescriptors(free) {
              do throws(PortError) {
                _ = try MessagePort.local(name: name) { _ in nil }
                return nil
              } catch {
                return error.status
              }
            }
            precondition(
              status == .transportError,
              "MessagePort.local with \(free) free descriptors: \(String(describing: status))")
            precondition(round5Counts().descriptors == before, "a refused local port left descriptors open")
            precondition(MessagePort.registered(name: name) == nil)
          }
          // The name was not kept by the refused attempts.
          let local = try! MessagePort.local(name: name) { message in [UInt8(truncatingIfNeeded: message.msgid)] }
          let server = TestThread.spawn { _ = try? local.serve(timeout: .seconds(20)) }
          let before = round5Counts().descriptors
          let refusedRemote: PortStatus? = round5WithFreeDescriptors(0) {
            do throws(PortError) {
              _ = try MessagePort.remote(name: name)
              return nil
            } catch {
              return error.status
            }
          }
          precondition(
            refusedRemote == .transportError,
            "MessagePort.remote without descriptors: \(String(describing: refusedRemote))")
          precondition(round5Counts().descriptors == before, "a refused remote port left descriptors open")
          let remote = try! MessagePort.remote(name: name)
          precondition(
            try! remote.send(msgid: 4, sendTimeout: .seconds(10), receiveTimeout: .seconds(20), replyMode: .awaitReply)
              == [4])
          remote.invalidate()
          local.invalidate()
          server.join()
          // A port's readiness descriptor.
          let port = Port()
          let refusedReadiness: Bool = round5WithFreeDescriptors(0) {
            do throws(SystemCallError) {
              _ = try port.readinessDescriptor()
              return false
            } catch {
              return error.code == .tooManyOpenFiles
            }
          }
          precondition(refusedReadiness, "readinessDescriptor without descriptors did not throw EMFILE")
          let descriptor = try! port.readinessDescriptor()
          precondition(fcntl(descriptor, F_GETFD) >= 0)
          precondition(try! port.readinessDescriptor() == descriptor)
        }
      }
    }
  }

  @Test(
    "1,000 timers, sources, observers and delayed performs invalidated, removed or cancelled release their captures",
    .runsExitTests)
  func itemsReleaseTheirCaptures() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let runLoop = RunLoop.current
        runLoop.add(RunLoopSource {}, forMode: .default)
        round5CheckBalanced("items") { index in
          let weak: Round5TokenReference
          do {
            let captured = Round5Token()
            weak = Round5TokenReference(captured)
            let timer = RunLoopTimer(after: .seconds(3600), interval: .seconds(1)) { _ in _ = captured }
            let source = RunLoopSource { _ = captured }
            let observer = RunLoopObserver(activities: .allActivities) { _, _ in _ = captured }
            let mode: RunLoopMode = index % 2 == 0 ? .default : .common
            runLoop.add(timer, forMode: mode)
            runLoop.add(source, forMode: mode)
            runLoop.add(observer, forMode: mode)
            let delayed = runLoop.perform(afterDelay: .seconds(3600)) { _ = captured }
            _ = runLoop.run(mode: .default, timeout: .zero)
            if index % 2 == 0 {
              timer.invalidate()
              source.invalidate()
              observer.invalidate()
            } else {
              runLoop.remove(timer, forMode: mode)
              runLoop.remove(source, forMode: mode)
              runLoop.remove(observer, forMode: mode)
            }
            delayed.cancel()
          }
          precondition(weak.object == nil, "an item kept its capture after it left the loop")
        }
      }
    }
  }
}

/// Weak references for the checks above (Sendable boxes of a weak var).
struct WeakRunLoopReference: @unchecked Sendable {
  weak var object: RunLoop?
  init(_ object: RunLoop?) { self.object = object }
}
struct Round5TokenReference: @unchecked Sendable {
  weak var object: Round5Token?
  init(_ object: Round5Token?) { self.object = object }
}
struct Round5WeakPort: @unchecked Sendable {
  weak var port: Port?
  init(_ port: Port?) { self.port = port }
}
struct Round5WeakDescriptorSource: @unchecked Sendable {
  weak var source: FileDescriptorSource?
  init(_ source: FileDescriptorSource?) { self.source = source }
}
struct Round5WeakMessagePort: @unchecked Sendable {
  weak var port: MessagePort?
  init(_ port: MessagePort?) { self.port = port }
}

/// Holds a RunLoopThread handle so a block on that thread can drop it.
final class Round5ThreadHolder: @unchecked Sendable {
  // @unchecked: set by the test thread before the block that clears it is queued, then
  // touched only by that block.
  var worker: RunLoopThread?
}
