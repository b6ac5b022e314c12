import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

// Audit round 5: every resource-owning object of Sync is created, used and destroyed a
// thousand times or more; afterwards the process has the descriptors, threads and memory
// mappings it had before, each object's deinit ran (a weak reference is nil) and the
// diagnostics keep no entry for a destroyed lock or an ended thread. Each check runs in an exit test: the counts are process-wide and
// the child runs alone (alarm() armed so a hang fails only its test).

/// The open descriptors, as "number -> target", that are in each of three listings (one
/// held for an instant by the runtime is left out; a leaked one is in all). The event
/// descriptors (`anon_inode:[timerfd]`, `[eventpoll]`, `[eventfd]`) are left out: the
/// Swift runtime's Dispatch creates them lazily in the exit test's child, and Sync never
/// makes one.
private func openDescriptors() -> Set<String> {
  stableOpenDescriptors(listings: 3).filter { entry in
    !["anon_inode:[timerfd]", "anon_inode:[eventpoll]", "anon_inode:[eventfd]"].contains {
      entry.hasSuffix(" -> " + $0)
    }
  }
}

/// The entries of `/proc/self/task`. The checks allow two more than at the start: the
/// Swift runtime may add a worker thread of its own to the exit test's child; a leak per
/// object or per thread would be a thousand.
private func threadCount() -> Int {
  guard let directory = opendir("/proc/self/task") else { return -1 }
  defer { closedir(directory) }
  var count = 0
  while let entry = readdir(directory) {
    if withUnsafeBytes(of: entry.pointee.d_name, { $0.first != UInt8(ascii: ".") }) { count += 1 }
  }
  return count
}

/// The lines of `/proc/self/maps`.
private func mappingCount() -> Int {
  let descriptor = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)
  precondition(descriptor >= 0)
  defer { close(descriptor) }
  var lines = 0
  var buffer = [UInt8](repeating: 0, count: 65536)
  while true {
    let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
    if count <= 0 { break }
    lines += buffer[0..<count].reduce(0) { $0 + ($1 == UInt8(ascii: "\n") ? 1 : 0) }
  }
  return lines
}

/// The entries the diagnostics keep per live lock and per live thread: lock names, nodes
/// of the lock-order graph, registered thread states.
private func diagnosticsEntries() -> (names: Int, orderNodes: Int, threadStates: Int) {
  (LockNames.shared.count, LockDiagnostics.orderGraphSize(), ThreadRegistry.shared.all().count)
}

private func failChild(_ message: String) -> Never {
  let text = Array("FAILED: \(message)\n".utf8)
  _ = text.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
  exit(1)
}

/// Weak references to the objects of one round.
private final class WeakBox {
  weak var object: AnyObject?
  let name: String
  init(_ object: AnyObject, _ name: String) {
    self.object = object
    self.name = name
  }
}

/// A private directory for lock files, removed by the caller.
private func makeDirectory() -> String {
  var template = Array("/tmp/audit5-sync-XXXXXX".utf8CString)
  guard let made = mkdtemp(&template) else { failChild("mkdtemp failed: errno \(errno)") }
  return String(cString: made)
}

/// One round: every resource-owning object, created, used (uncontended) and dropped.
/// Returns weak references to them, to check after the round that each deinit ran.
private func oneRound(directory: String, index: Int) -> [WeakBox] {
  var weak: [WeakBox] = []
  let lock = Lock(name: index.isMultiple(of: 2) ? "audit lock \(index)" : nil)
  lock.withLock {}
  _ = lock.lock(timeout: .zero)
  lock.unlock()
  weak.append(WeakBox(lock, "Lock"))
  let recursive = RecursiveLock(name: "audit recursive \(index)")
  recursive.lock()
  recursive.lock()
  recursive.unlock()
  recursive.unlock()
  weak.append(WeakBox(recursive, "RecursiveLock"))
  let spin = SpinLock()
  spin.withLock {}
  weak.append(WeakBox(spin, "SpinLock"))
  let readWrite = ReadWriteLock(name: "audit rw \(index)")
  readWrite.withReadLock {}
  readWrite.withWriteLock {}
  weak.append(WeakBox(readWrite, "ReadWriteLock"))
  let condition = Condition(name: "audit condition \(index)")
  condition.withLock { _ = condition.wait(timeout: .zero) }
  condition.signal()
  weak.append(WeakBox(condition, "Condition"))
  let variable = ConditionVariable()
  lock.withLock { _ = variable.wait(lock, timeout: .zero) }
  variable.broadcast()
  weak.append(WeakBox(variable, "ConditionVariable"))
  let conditionLock = ConditionLock(condition: 1, name: "audit condition lock \(index)")
  conditionLock.lock(whenCondition: 1)
  conditionLock.unlock(withCondition: 2)
  weak.append(WeakBox(conditionLock, "ConditionLock"))
  let value = LockedValue([index], name: "audit value \(index)")
  value.withLock { $0.append(1) }
  _ = value.withLock(when: { $0.count == 2 }) { $0.count }
  weak.append(WeakBox(value, "LockedValue"))
  let semaphore = Semaphore(value: 1, name: "audit semaphore \(index)")
  semaphore.wait()
  semaphore.signal()
  _ = semaphore.wait(timeout: .zero)
  weak.append(WeakBox(semaphore, "Semaphore"))
  let latch = Latch(count: 1)
  latch.countDown()
  latch.wait()
  weak.append(WeakBox(latch, "Latch"))
  let barrier = ThreadBarrier(parties: 1)
  _ = barrier.arriveAndWait()
  weak.append(WeakBox(barrier, "ThreadBarrier"))
  let once = Once()
  once.run {}
  weak.append(WeakBox(once, "Once"))
  let lazy = Lazy { index }
  _ = lazy.value
  weak.append(WeakBox(lazy, "Lazy"))
  let reference = AtomicReference<Lock>(Lock())
  _ = reference.exchange(Lock())
  weak.append(WeakBox(reference, "AtomicReference"))
  if let pi = try? PriorityInheritanceLock() {
    pi.withLock {}
    _ = pi.lock(timeout: .zero)
    pi.unlock()
    weak.append(WeakBox(pi, "PriorityInheritanceLock"))
  }
  do {
    let region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
    let shared = try SharedMemoryLock.initialize(at: region.address)
    let sharedCondition = SharedMemoryCondition.initialize(at: region.address + SharedMemoryLock.byteCount)
    _ = try shared.lock()
    _ = try sharedCondition.wait(shared, timeout: .zero)
    shared.unlock()
    weak.append(WeakBox(region, "SharedMemoryRegion"))

    let file = "\(directory)/lock"
    let processLock = try ProcessLock(path: file)
    guard try processLock.tryLock() else { failChild("tryLock of a free ProcessLock failed") }
    _ = try processLock.owner()
    try processLock.unlock()
    guard try processLock.tryLockBreakingStaleLock() else { failChild("tryLockBreakingStaleLock failed") }
    let other = try ProcessLock(path: file)
    _ = try other.tryLockBreakingStaleLock()  // busy: a live owner; goes through the breakers' flock
    if let owner = try other.owner() { _ = try? other.breakLock(ifOwnerIs: owner) }  // removes it
    _ = try processLock.breakLock()
    weak.append(WeakBox(processLock, "ProcessLock"))
    weak.append(WeakBox(other, "ProcessLock (second object)"))
  } catch {
    failChild("round \(index) threw \(error)")
  }
  return weak
}

@Suite("Audit round 5: resources come back after a thousand objects", .timeLimit(.minutes(3)))
struct AuditRound5SyncResourceTests {
  @Test(
    "descriptors, threads, mappings and diagnostics entries return to their start; every deinit runs", .runsExitTests)
  func everyObject() async {
    await #expect(processExitsWith: .success) {
      alarm(50)
      let directory = makeDirectory()
      // A first round, so process-wide tables and caches exist before counting.
      for index in 0..<3 { _ = oneRound(directory: directory, index: index) }
      let descriptors = openDescriptors()
      let threads = threadCount()
      let mappings = mappingCount()
      let entries = diagnosticsEntries()
      let rounds = 1_000
      for index in 0..<rounds {
        let weak = oneRound(directory: directory, index: index)
        for box in weak where box.object != nil { failChild("round \(index): \(box.name) was not deinitialized") }
      }
      let leakedDescriptors = openDescriptors().subtracting(descriptors)
      if !leakedDescriptors.isEmpty { failChild("descriptors left open: \(leakedDescriptors.sorted())") }
      if threadCount() > threads + 2 { failChild("threads: \(threads) before, \(threadCount()) after") }
      let mappingsAfter = mappingCount()
      // Allow the allocator's own arenas a little movement; a leaked region is 1,000 more.
      if mappingsAfter > mappings + 20 { failChild("mappings: \(mappings) before, \(mappingsAfter) after") }
      if diagnosticsEntries() != entries {
        failChild("diagnostics entries: \(entries) before, \(diagnosticsEntries()) after")
      }
      _ = unlink("\(directory)/lock.break")
      _ = rmdir(directory)
      exit(0)
    }
  }

  @Test("with every lock detector and contention statistics on, the diagnostics tables do not grow", .runsExitTests)
  func withDiagnostics() async {
    await #expect(processExitsWith: .success) {
      alarm(50)
      for kind in Diagnostics.Kind.all { Diagnostics.setMode(.report, for: kind) }
      Diagnostics.collectsLockContention = true
      Diagnostics.lockContentionSampling = 1
      let directory = makeDirectory()
      for index in 0..<3 { _ = oneRound(directory: directory, index: index) }
      // Orders between named and unnamed locks, so the order graph has entries to forget.
      let descriptors = openDescriptors()
      let threads = threadCount()
      let entries = diagnosticsEntries()
      let rounds = 1_000
      for index in 0..<rounds {
        let outer = Lock(name: "outer \(index)")
        let inner = Lock()
        outer.withLock { inner.withLock {} }
        let weak = oneRound(directory: directory, index: index)
        for box in weak where box.object != nil { failChild("round \(index): \(box.name) was not deinitialized") }
      }
      let leakedDescriptors = openDescriptors().subtracting(descriptors)
      if !leakedDescriptors.isEmpty { failChild("descriptors left open: \(leakedDescriptors.sorted())") }
      // The deadlock watchdog's thread may have started during the first rounds; no more.
      if threadCount() > threads + 2 { failChild("threads: \(threads) before, \(threadCount()) after") }
      if diagnosticsEntries() != entries {
        failChild("diagnostics entries: \(entries) before, \(diagnosticsEntries()) after")
      }
      _ = unlink("\(directory)/lock.break")
      _ = rmdir(directory)
      exit(0)
    }
  }

  @Test(
    "a thousand threads each taking every kind of lock leave no thread, descriptor or diagnostics state behind",
    .runsExitTests)
  func threadStates() async {
    await #expect(processExitsWith: .success) {
      alarm(50)
      for kind in Diagnostics.Kind.all { Diagnostics.setMode(.report, for: kind) }
      let lock = Lock(name: "shared")
      let readWrite = ReadWriteLock()
      let condition = Condition()
      let semaphore = Semaphore(value: 1)
      let priorityInheritance = try? PriorityInheritanceLock()
      guard let region = try? SharedMemoryRegion(sharedAnonymousByteCount: 4096),
        let shared = try? SharedMemoryLock.initialize(at: region.address)
      else { failChild("shared memory setup failed") }
      @Sendable func work() {
        lock.withLock {}
        readWrite.withReadLock {}
        condition.withLock { _ = condition.wait(timeout: .zero) }
        semaphore.wait()
        semaphore.signal()
        // The thread-end check of priority-inheritance locks and glibc's robust list.
        priorityInheritance?.withLock {}
        guard (try? shared.lock()) == .acquired else { failChild("shared lock not acquired cleanly") }
        shared.unlock()
      }
      work()
      for _ in 0..<3 { runConcurrently(1) { _ in work() } }
      let threads = threadCount()
      let entries = diagnosticsEntries()
      let descriptors = openDescriptors()
      for _ in 0..<1_000 { runConcurrently(1) { _ in work() } }
      if threadCount() > threads + 2 { failChild("threads: \(threads) before, \(threadCount()) after") }
      let leakedDescriptors = openDescriptors().subtracting(descriptors)
      if !leakedDescriptors.isEmpty { failChild("descriptors left open: \(leakedDescriptors.sorted())") }
      if diagnosticsEntries() != entries {
        failChild("diagnostics entries: \(entries) before, \(diagnosticsEntries()) after")
      }
      withExtendedLifetime(region) {}
      exit(0)
    }
  }
}
