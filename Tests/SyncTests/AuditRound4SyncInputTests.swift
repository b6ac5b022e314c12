import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

/// The standard error of an exit test's child, or "" when the test did not run.
private func childError(_ result: ExitTest.Result?) -> String {
  result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
}

/// The most negative and the most positive durations.
private let lowestDuration = Duration(attoseconds: .min)
private let highestDuration = Duration(attoseconds: .max)

@Suite("Audit round 4: THREADING_TOOLKIT_DIAGNOSTICS bad values", .timeLimit(.minutes(3)))
struct AuditRound4DiagnosticsGrammarTests {
  private func refusal(_ text: String) -> String? {
    if case .failure(let error) = Diagnostics.parse(text) { return error.message }
    return nil
  }

  @Test("empty items anywhere are refused, and an item without a name is an empty item")
  func emptyItems() {
    for text in [",", "stalls,", ",stalls", "stalls,,metrics", "=stop", "=", ",,"] {
      #expect(refusal(text) != nil, "\(text) was accepted")
    }
    #expect(refusal("stalls,")?.contains("empty item") == true)
    #expect(refusal(",stalls")?.contains("empty item") == true)
  }

  @Test("numbers: zero, negative, past the documented maximum, past Int64 and non-decimal are refused")
  func badNumbers() {
    for option in ["stall-ms", "deadlock-ms", "blocking-ms"] {
      for value in [
        "0", "-1", "-0", "86400001", "9223372036854775807", "9223372036854775808", "99999999999999999999999",
        "", " 5", "5 ", "5ms", "0x10", "1e3", "1.5", "½", "٣",
      ] {
        let message = refusal("\(option)=\(value)")
        #expect(message?.contains(option) == true, "\(option)=\(value): \(message ?? "accepted")" as Comment)
      }
      #expect(refusal(option)?.contains(option) == true, "\(option) without a value")
    }
    for value in ["0", "-1", "1000000001", "9223372036854775808", "", "x"] {
      #expect(refusal("contention-sample=\(value)")?.contains("contention-sample") == true, "\(value)")
    }
    #expect(refusal("contention-sample")?.contains("contention-sample") == true)
  }

  @Test("the largest documented numbers are accepted and taken exactly")
  func largestNumbers() throws {
    let settings = try Diagnostics.parse(
      "stall-ms=86400000,deadlock-ms=86400000,blocking-ms=1,contention-sample=1000000000"
    ).get()
    #expect(settings.stallThreshold == .seconds(86_400))
    #expect(settings.deadlockCheckInterval == .seconds(86_400))
    #expect(settings.blockingInTaskThreshold == .milliseconds(1))
    #expect(settings.lockContentionSampling == 1_000_000_000)
  }

  @Test("flags given a value, even an empty one, and unknown modes are refused")
  func flagValues() {
    #expect(refusal("metrics=")?.contains("metrics takes no value") == true)
    #expect(refusal("contention=")?.contains("contention takes no value") == true)
    #expect(refusal("contention-dump=")?.contains("contention-dump") == true)
    #expect(refusal("contention-dump=xml")?.contains("contention-dump=xml") == true)
    #expect(refusal("stalls=")?.contains("stalls=") == true)
    #expect(refusal("all=")?.contains("all=") == true)
    #expect(refusal("stalls=STOP")?.contains("stalls=STOP") == true)
    #expect(refusal("stalls=stop=now")?.contains("stalls=stop=now") == true)
    #expect(refusal("STALLS")?.contains("unknown item STALLS") == true)
    #expect(refusal("stalls\u{0}")?.contains("unknown item") == true)
    #expect(refusal("all-kinds")?.contains("unknown item") == true)
  }

  @Test("a combining mark after a comma does not hide an item (the value is refused, not half-read)")
  func combiningMark() {
    // ",\u{301}" is one Character: splitting by Character would not see the comma.
    #expect(refusal("stalls,\u{301}metrics") != nil)
  }

  @Test("all never switches blocking-in-task, and later items override earlier ones in both directions")
  func allAndOverrides() throws {
    let all = try Diagnostics.parse("all=stop").get()
    #expect(all.mode(of: .blockingInTask) == .off)
    for kind in Diagnostics.Kind.all { #expect(all.mode(of: kind) == .stop, "\(kind)") }
    let after = try Diagnostics.parse("blocking-in-task=stop,all=off").get()
    #expect(after.mode(of: .blockingInTask) == .stop, "all=off leaves blocking-in-task alone")
    let numbers = try Diagnostics.parse("stall-ms=5,stall-ms=7,contention-dump=json,contention-dump").get()
    #expect(numbers.stallThreshold == .milliseconds(7))
    #expect(numbers.contentionDump == .text)
    #expect(numbers.collectsLockContention)
  }

  @Test("a value too large for Int64 in the environment stops the process naming the variable", .runsExitTests)
  func environmentHugeNumber() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      setenv(Diagnostics.environmentVariable, "stall-ms=99999999999999999999999", 1)
      _ = Diagnostics.isOn(.stalls)
      exit(0)
    }.map { result in
      let text = childError(result)
      #expect(text.contains("THREADING_TOOLKIT_DIAGNOSTICS"))
      #expect(text.contains("stall-ms"))
    }
  }

  @Test("an empty item in the environment stops the process at the first check", .runsExitTests)
  func environmentEmptyItem() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      setenv(Diagnostics.environmentVariable, "stalls,", 1)
      _ = Diagnostics.mode(of: .lockOrder)
      exit(0)
    }.map { result in
      #expect(childError(result).contains("empty item"))
    }
  }
}

@Suite("Audit round 4: diagnostics option setters at the extremes", .timeLimit(.minutes(3)))
struct AuditRound4DiagnosticsSetterTests {
  @Test("zero, negative and extreme durations are raised to 1 ms or saturate, never trap", .runsExitTests)
  func durationExtremes() async {
    await #expect(processExitsWith: .success) {
      unsetenv(Diagnostics.environmentVariable)
      for value in [Duration.zero, .nanoseconds(-1), lowestDuration, .nanoseconds(999_999)] {
        Diagnostics.stallThreshold = value
        Diagnostics.deadlockCheckInterval = value
        Diagnostics.blockingInTaskThreshold = value
        guard Diagnostics.stallThreshold == .milliseconds(1), Diagnostics.deadlockCheckInterval == .milliseconds(1),
          Diagnostics.blockingInTaskThreshold == .milliseconds(1)
        else { exit(1) }
      }
      for value in [highestDuration, Duration.seconds(UInt64.max), Duration.seconds(Int64.max)] {
        Diagnostics.stallThreshold = value
        Diagnostics.deadlockCheckInterval = value
        Diagnostics.blockingInTaskThreshold = value
        let saturated = Duration.nanoseconds(Int64.max)
        guard Diagnostics.stallThreshold == saturated, Diagnostics.deadlockCheckInterval == saturated,
          Diagnostics.blockingInTaskThreshold == saturated
        else { exit(2) }
      }
      exit(0)
    }
  }

  @Test("contention sampling below 1 is raised to 1 and above a billion lowered to a billion", .runsExitTests)
  func samplingExtremes() async {
    await #expect(processExitsWith: .success) {
      unsetenv(Diagnostics.environmentVariable)
      Diagnostics.lockContentionSampling = Int.min
      guard Diagnostics.lockContentionSampling == 1 else { exit(1) }
      Diagnostics.lockContentionSampling = 0
      guard Diagnostics.lockContentionSampling == 1 else { exit(2) }
      Diagnostics.lockContentionSampling = Int.max
      guard Diagnostics.lockContentionSampling == 1_000_000_000 else { exit(3) }
      // Measured locks with the largest interval do not overflow (gap up to 2N - 1).
      Diagnostics.collectsLockContention = true
      let lock = Lock(name: "audit4-sampling")
      blocking { for _ in 0..<1000 { lock.withLock {} } }
      _ = Diagnostics.lockContention()
      exit(0)
    }
  }
}

@Suite("Audit round 4: count arguments", .timeLimit(.minutes(3)))
struct AuditRound4CountTests {
  @Test("Semaphore(value: Int.max) stops the process naming the value", .runsExitTests)
  func semaphoreHugeValue() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = Semaphore(value: Int.max)
    }.map { result in
      #expect(childError(result).contains("Semaphore misuse"))
    }
  }

  @Test("Semaphore(value: Int.min) stops the process naming the value", .runsExitTests)
  func semaphoreMostNegative() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = Semaphore(value: Int.min)
    }.map { result in
      #expect(childError(result).contains("Semaphore misuse"))
    }
  }

  @Test("Latch(count: Int.max) stops the process", .runsExitTests)
  func latchHugeCount() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = Latch(count: Int.max)
    }.map { result in
      #expect(childError(result).contains("Latch misuse"))
    }
  }

  @Test("countDown(by: Int.min) stops the process", .runsExitTests)
  func latchMostNegativeAmount() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Latch(count: 3).countDown(by: Int.min)
    }.map { result in
      #expect(childError(result).contains("Latch misuse"))
    }
  }

  @Test("countDown(by: Int.max) stops the process", .runsExitTests)
  func latchHugeAmount() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Latch(count: 3).countDown(by: Int.max)
    }.map { result in
      #expect(childError(result).contains("Latch misuse"))
    }
  }

  @Test("countDown on an open latch stops the process", .runsExitTests)
  func latchCountDownWhenOpen() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Latch(count: 0).countDown()
    }.map { result in
      #expect(childError(result).contains("Latch misuse"))
    }
  }

  @Test("the largest latch count works, and a count-down by the whole count opens it at once")
  func latchLargestCount() {
    let latch = Latch(count: Int(UInt32.max))
    #expect(latch.count == Int(UInt32.max))
    #expect(!latch.isOpen)
    #expect(!latch.wait(timeout: .zero))
    latch.countDown(by: Int(UInt32.max) - 1)
    #expect(latch.count == 1)
    latch.countDown(by: 0)
    #expect(latch.count == 1)
    latch.countDown()
    #expect(latch.isOpen)
    latch.countDown(by: 0)
    #expect(latch.isOpen)
    blocking { latch.wait() }
  }

  @Test("ThreadBarrier(parties: Int.min) stops the process", .runsExitTests)
  func barrierMostNegative() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = ThreadBarrier(parties: Int.min)
    }.map { result in
      #expect(childError(result).contains("ThreadBarrier misuse"))
    }
  }

  @Test("a one-party barrier returns true at once, every time")
  func barrierOneParty() {
    let barrier = ThreadBarrier(parties: 1)
    blocking {
      for _ in 0..<100 { #expect(barrier.arriveAndWait()) }
    }
  }

  @Test("wake(count: Int.min) on an atomic stops the process", .runsExitTests)
  func wakeMostNegative() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = AtomicInteger<UInt32>(0).wake(count: Int.min)
    }.map { result in
      #expect(childError(result).contains("wake(count:"))
    }
  }

  @Test("wake(count: Int.max) is clamped: it wakes every waiter and reports how many")
  func wakeHuge() {
    let atomic = AtomicInteger<Int32>(-1)
    #expect(atomic.wake(count: Int.max) == 0)
    let ready = AtomicInteger<Int>(0)
    let woken = AtomicInteger<Int>(0)
    runConcurrently(3) { index in
      if index < 2 {
        ready.increment(ordering: .relaxed)
        while atomic.load(ordering: .acquiring) == -1 {
          atomic.wait(whileEqualTo: -1)
        }
      } else {
        while ready.load(ordering: .relaxed) < 2 { sched_yield() }
        atomic.store(5, ordering: .releasing)
        woken.add(atomic.wake(count: Int.max), ordering: .relaxed)
      }
    }
    #expect(woken.load(ordering: .relaxed) <= 2)
    #expect(atomic.load(ordering: .relaxed) == 5)
  }

  @Test("a negative Int32 is waited on by its bit pattern")
  func waitNegativeValue() {
    let atomic = AtomicInteger<Int32>(Int32.min)
    blocking {
      #expect(!atomic.wait(whileEqualTo: Int32.min, timeout: .milliseconds(1)))
      #expect(atomic.wait(whileEqualTo: Int32.max, timeout: .seconds(10)), "a different value returns at once")
    }
  }
}

@Suite("Audit round 4: timeouts at the Duration extremes", .timeLimit(.minutes(3)))
struct AuditRound4DurationExtremeTests {
  /// Runs `body` on a second thread while the calling thread holds nothing else; checks it
  /// returns within 5 s.
  private func returnsPromptly(_ label: String, _ body: @escaping @Sendable () -> Bool, expect expected: Bool) {
    let start = MonotonicInstant.now
    let result = GuardedValue(!expected)
    runConcurrently(1) { _ in result.value = body() }
    #expect(result.value == expected, "\(label)")
    #expect(start.duration(to: .now) < .seconds(5), "\(label) blocked")
  }

  @Test("the most negative timeout makes one attempt that fails at once on every unavailable primitive")
  func lowestTimeoutFails() {
    let semaphore = Semaphore()
    let latch = Latch(count: 1)
    let atomic = AtomicInteger<UInt32>(7)
    returnsPromptly("semaphore", { semaphore.wait(timeout: lowestDuration) }, expect: false)
    returnsPromptly("latch", { latch.wait(timeout: lowestDuration) }, expect: false)
    returnsPromptly("atomic", { atomic.wait(whileEqualTo: 7, timeout: lowestDuration) }, expect: false)

    let lock = Lock()
    let recursive = RecursiveLock()
    let spin = SpinLock()
    let readWrite = ReadWriteLock()
    let condition = Condition()
    let conditionLock = ConditionLock(condition: 0)
    let locked = LockedValue(0)
    let held = Latch(count: 1)
    let release = Latch(count: 1)
    runConcurrently(2) { index in
      if index == 0 {
        lock.lock()
        recursive.lock()
        spin.lock()
        readWrite.writeLock()
        condition.lock()
        conditionLock.lock()
        locked.withLock { _ in
          held.countDown()
          release.wait()
        }
        conditionLock.unlock()
        condition.unlock()
        readWrite.unlock()
        spin.unlock()
        recursive.unlock()
        lock.unlock()
      } else {
        held.wait()
        let start = MonotonicInstant.now
        #expect(!lock.lock(timeout: lowestDuration))
        #expect(!recursive.lock(timeout: lowestDuration))
        #expect(!spin.lock(timeout: lowestDuration))
        #expect(!readWrite.readLock(timeout: lowestDuration))
        #expect(!readWrite.writeLock(timeout: lowestDuration))
        #expect(!condition.lock(timeout: lowestDuration))
        #expect(!conditionLock.lock(timeout: lowestDuration))
        #expect(!conditionLock.lock(whenCondition: 0, timeout: lowestDuration))
        #expect(locked.withLock(timeout: lowestDuration) { _ in 1 } == nil)
        #expect(start.duration(to: .now) < .seconds(5))
        release.countDown()
      }
    }
  }

  @Test("the most negative timeout on a condition wait returns false at once, holding the lock")
  func lowestTimeoutConditionWaits() {
    let condition = Condition()
    let mutex = Lock()
    let variable = ConditionVariable()
    blocking {
      condition.lock()
      #expect(!condition.wait(timeout: lowestDuration))
      #expect(condition.isHeldByCurrentThread)
      condition.unlock()
      mutex.lock()
      #expect(!variable.wait(mutex, timeout: lowestDuration))
      #expect(mutex.isHeldByCurrentThread)
      mutex.unlock()
    }
  }

  @Test("the largest timeout succeeds at once on every available primitive")
  func highestTimeoutSucceeds() {
    let semaphore = Semaphore(value: 1)
    let latch = Latch(count: 0)
    let atomic = AtomicInteger<UInt32>(7)
    returnsPromptly("semaphore", { semaphore.wait(timeout: highestDuration) }, expect: true)
    returnsPromptly("latch", { latch.wait(timeout: highestDuration) }, expect: true)
    returnsPromptly("atomic", { atomic.wait(whileEqualTo: 8, timeout: highestDuration) }, expect: true)
    let lock = Lock()
    returnsPromptly(
      "lock",
      {
        guard lock.lock(timeout: highestDuration) else { return false }
        lock.unlock()
        return true
      }, expect: true)
    let readWrite = ReadWriteLock()
    returnsPromptly(
      "read lock",
      {
        guard readWrite.readLock(timeout: highestDuration) else { return false }
        readWrite.unlock()
        return true
      }, expect: true)
    let conditionLock = ConditionLock(condition: 3)
    returnsPromptly(
      "condition lock",
      {
        guard conditionLock.lock(whenCondition: 3, timeout: highestDuration) else { return false }
        conditionLock.unlock()
        return true
      }, expect: true)
  }

  @Test("a priority-inheritance lock held elsewhere: the most negative timeout fails at once")
  func priorityInheritanceLowest() throws {
    let lock: PriorityInheritanceLock
    do {
      lock = try PriorityInheritanceLock()
    } catch {
      return  // a kernel without PI futexes
    }
    let held = Latch(count: 1)
    let release = Latch(count: 1)
    runConcurrently(2) { index in
      if index == 0 {
        lock.lock()
        held.countDown()
        release.wait()
        lock.unlock()
      } else {
        held.wait()
        let start = MonotonicInstant.now
        #expect(!lock.lock(timeout: lowestDuration))
        #expect(!lock.lock(before: .distantPast))
        #expect(start.duration(to: .now) < .seconds(5))
        release.countDown()
      }
    }
  }
}

@Suite("Audit round 4: ProcessLock paths", .timeLimit(.minutes(3)))
struct AuditRound4ProcessLockPathTests {
  @Test("a path with a NUL byte is refused, never cut short to another lock's file")
  func nulInPath() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let real = scratch.path + "/app.lock"
    let owner = try ProcessLock(path: real)
    #expect(try owner.tryLock())
    defer { if owner.isHeldByThisObject { try? owner.unlock() } }
    // The C library sees "…/app.lock": the object must not act on that file.
    let hostile: ProcessLock
    do {
      hostile = try ProcessLock(path: real + "\u{0}.other")
    } catch {
      #expect(error.code == .invalidArgument)
      return
    }
    _ = try? hostile.breakLock()
    var info = stat()
    #expect(stat(real, &info) == 0, "breakLock of a path with a NUL removed \(real)")
    #expect(try owner.owner() != nil)
  }

  @Test("a NUL byte in the directory part is refused too")
  func nulInDirectory() {
    #expect(throws: SystemCallError.self) { _ = try ProcessLock(path: "/tmp\u{0}/x/app.lock") }
  }

  @Test("an empty path never takes a lock silently: it throws")
  func emptyPath() {
    #expect(throws: SystemCallError.self) {
      let lock = try ProcessLock(path: "")
      _ = try lock.tryLock()
    }
  }

  @Test("a lock file with an extreme or garbage record: owner() reads it without trapping")
  func extremeRecord() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/app.lock"
    let records = [
      "pid=2147483647\nhost=h\nseconds=9223372036854775807\nnanoseconds=9223372036854775807\ntoken=t\n",
      "pid=-2147483648\nhost=h\nseconds=-9223372036854775808\nnanoseconds=-9223372036854775808\ntoken=t\n",
      "pid=1\nhost=\nseconds=0\nnanoseconds=0\ntoken=\n",
      "\u{0}\u{FF}garbage",
      "",
    ]
    let lock = try ProcessLock(path: path)
    for record in records {
      unlink(path)
      let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
      try #require(fd >= 0)
      let bytes = Array(record.utf8)
      #expect(bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == bytes.count)
      close(fd)
      let owner = try #require(try lock.owner())
      #expect(!owner.description.isEmpty)
      _ = try lock.lockDate()
      #expect(!(try lock.tryLock()), "a planted record is a held lock")
    }
  }
}

@Suite("Audit round 4: shared memory bad input", .timeLimit(.minutes(3)))
struct AuditRound4SharedMemoryInputTests {
  @Test("an anonymous region of Int.max bytes throws noMemory")
  func hugeAnonymous() {
    do {
      _ = try SharedMemoryRegion(sharedAnonymousByteCount: Int.max)
      Issue.record("mapped Int.max bytes")
    } catch {
      #expect(error.code == .noMemory)
    }
  }

  @Test("mapping a closed descriptor throws badFileDescriptor")
  func closedDescriptor() throws {
    var ends: [Int32] = [0, 0]
    try #require(pipe(&ends) == 0)
    close(ends[0])
    close(ends[1])
    do {
      _ = try SharedMemoryRegion(mapping: ends[0], byteCount: 4096)
      Issue.record("mapped a closed descriptor")
    } catch {
      #expect(error.code == .badFileDescriptor)
    }
  }

  @Test("mapping Int32.min throws badFileDescriptor")
  func mostNegativeDescriptor() {
    #expect(throws: SystemCallError.self) { _ = try SharedMemoryRegion(mapping: Int32.min, byteCount: 4096) }
  }

  @Test("a lock at a misaligned address stops the process naming the type", .runsExitTests)
  func misalignedLock() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let region = try! SharedMemoryRegion(sharedAnonymousByteCount: 4096)
      _ = try? SharedMemoryLock.initialize(at: region.address + 4)
    }.map { result in
      #expect(childError(result).contains("SharedMemoryLock"))
    }
  }

  @Test("a condition at a misaligned address stops the process naming the type", .runsExitTests)
  func misalignedCondition() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let region = try! SharedMemoryRegion(sharedAnonymousByteCount: 4096)
      _ = SharedMemoryCondition(existingAt: region.address + 1)
    }.map { result in
      #expect(childError(result).contains("SharedMemoryCondition"))
    }
  }
}

@Suite("Audit round 4: read-lock limit", .timeLimit(.minutes(3)))
struct AuditRound4ReadLimitTests {
  @Test("at the read-lock limit tryReadLock fails and readLock(timeout: .zero) stops the process", .runsExitTests)
  func readLimit() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking {
        let lock = ReadWriteLock()
        var taken = 0
        while lock.tryReadLock() { taken += 1 }
        guard taken == 2_097_150 else { exit(3) }
        _ = lock.readLock(timeout: .zero)
        exit(0)
      }
    }.map { result in
      #expect(childError(result).contains("too many read locks"))
    }
  }
}

@Suite("Audit round 4: seeded model checks", .timeLimit(.minutes(3)))
struct AuditRound4ModelTests {
  @Test(
    "semaphore, recursive lock, read-write lock, condition lock and latch follow a simple model", arguments: [1, 2, 3])
  func singleThreadModel(seed: UInt64) {
    var random = SeededGenerator(seed: seed)
    let semaphore = Semaphore(value: 2)
    var permits = 2
    let recursive = RecursiveLock()
    var levels = 0
    let readWrite = ReadWriteLock()
    var readers = 0
    var writer = false
    let conditionLock = ConditionLock(condition: 0)
    var condition = 0
    let latch = Latch(count: 1000)
    var remaining = 1000
    blocking {
      for step in 0..<20_000 {
        switch Int.random(in: 0..<12, using: &random) {
        case 0:
          semaphore.signal()
          permits += 1
        case 1:
          #expect(semaphore.tryWait() == (permits > 0), "step \(step)")
          if permits > 0 { permits -= 1 }
        case 2:
          #expect(semaphore.wait(timeout: permits > 0 ? .seconds(5) : .zero) == (permits > 0), "step \(step)")
          if permits > 0 { permits -= 1 }
        case 3:
          if Bool.random(using: &random) {
            recursive.lock()
          } else {
            #expect(recursive.tryLock())
          }
          levels += 1
        case 4:
          if levels > 0 {
            recursive.unlock()
            levels -= 1
          }
        case 5:
          // A read lock by the write holder is misuse: only tried without it.
          if !writer {
            #expect(readWrite.tryReadLock(), "step \(step)")
            readers += 1
          }
        case 6:
          if readers > 0 || writer {
            readWrite.unlock()
            if writer { writer = false } else { readers -= 1 }
          }
        case 7:
          if !writer {
            let free = readers == 0
            #expect(readWrite.tryWriteLock() == free, "step \(step)")
            if free { writer = true }
          }
        case 8:
          let wanted = Int.random(in: -2...2, using: &random)
          let got = conditionLock.tryLock(whenCondition: wanted)
          #expect(got == (wanted == condition), "step \(step)")
          if got {
            let next = [Int.min, -1, 0, 1, Int.max].randomElement(using: &random)!
            conditionLock.unlock(withCondition: next)
            condition = next
          }
        case 9:
          #expect(conditionLock.lock(whenCondition: condition, timeout: .zero))
          conditionLock.unlock()
        case 10:
          if remaining > 0 {
            let amount = Int.random(in: 0...min(remaining, 3), using: &random)
            latch.countDown(by: amount)
            remaining -= amount
          }
          #expect(latch.count == remaining)
          #expect(latch.isOpen == (remaining == 0))
        default:
          #expect(semaphore.value == permits)
          #expect(recursive.levelsHeldByCurrentThread == levels)
          #expect(readWrite.isWriteLockedByCurrentThread == writer)
          #expect(conditionLock.condition == condition)
        }
      }
      while levels > 0 {
        recursive.unlock()
        levels -= 1
      }
      while readers > 0 {
        readWrite.unlock()
        readers -= 1
      }
      if writer { readWrite.unlock() }
    }
    #expect(!recursive.isHeldByCurrentThread)
    #expect(readWrite.tryWriteLock())
    readWrite.unlock()
  }

  @Test("racing threads: every permit signalled is taken once or still there", arguments: [11, 12])
  func semaphoreConservation(seed: UInt64) {
    let semaphore = Semaphore(value: 3)
    let signals = AtomicInteger<Int>(0)
    let takes = AtomicInteger<Int>(0)
    let deadline = MonotonicInstant.now + .milliseconds(300)
    runConcurrently(4) { index in
      var random = SeededGenerator(seed: seed &* 31 &+ UInt64(index))
      while !deadline.hasPassed {
        switch Int.random(in: 0..<4, using: &random) {
        case 0:
          semaphore.signal()
          signals.increment(ordering: .relaxed)
        case 1:
          if semaphore.tryWait() { takes.increment(ordering: .relaxed) }
        case 2:
          if semaphore.wait(timeout: .microseconds(Int64.random(in: -50...200, using: &random))) {
            takes.increment(ordering: .relaxed)
          }
        default:
          if semaphore.wait(before: .distantPast) { takes.increment(ordering: .relaxed) }
        }
      }
    }
    #expect(semaphore.value == 3 + signals.load(ordering: .relaxed) - takes.load(ordering: .relaxed))
  }

  @Test("racing threads: a latch counted down by random amounts opens exactly at zero, waking every waiter")
  func latchRace() {
    let latch = Latch(count: 4 * 500)
    let opened = AtomicInteger<Int>(0)
    runConcurrently(6) { index in
      if index < 4 {
        var random = SeededGenerator(seed: UInt64(index) + 100)
        var left = 500
        while left > 0 {
          let amount = Int.random(in: 0...min(left, 7), using: &random)
          latch.countDown(by: amount)
          left -= amount
        }
      } else {
        latch.wait()
        if latch.isOpen { opened.increment(ordering: .relaxed) }
      }
    }
    #expect(latch.count == 0)
    #expect(opened.load(ordering: .relaxed) == 2)
  }
}

@Suite("Audit round 4: re-entry from callbacks", .timeLimit(.minutes(3)))
struct AuditRound4ReentryTests {
  @Test("a LockedValue predicate that takes the same lock is reported as a self-deadlock, not a hang", .runsExitTests)
  func predicateTakesLock() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      blocking {
        let locked = LockedValue(0)
        _ = locked.withLock(when: { _ in locked.withLock { $0 } == 0 }, timeout: .seconds(5)) { $0 }
      }
      exit(0)
    }.map { result in
      #expect(childError(result).contains("misuse"))
    }
  }

  @Test("a Lazy initializer that reads another Lazy whose initializer reads the first is reported", .runsExitTests)
  func lazyCycle() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      final class Cell: @unchecked Sendable { var lazy: Lazy<Int>? }
      let cell = Cell()
      let second = Lazy<Int> { cell.lazy!.value + 1 }
      cell.lazy = Lazy<Int> { second.value + 1 }
      _ = cell.lazy!.value
      exit(0)
    }.map { result in
      #expect(childError(result).contains("Once misuse"))
    }
  }

  @Test("an object whose deinit uses the AtomicReference that released it does not deadlock", .runsExitTests)
  func deinitUsesReference() async {
    await #expect(processExitsWith: .success) {
      alarm(20)
      final class Node: @unchecked Sendable {
        let owner: AtomicReference<Node>
        let depth: Int
        init(_ owner: AtomicReference<Node>, _ depth: Int) {
          self.owner = owner
          self.depth = depth
        }
        deinit {
          _ = owner.load()
          if depth < 3 { owner.store(Node(owner, depth + 1)) }
          _ = owner.compareExchange(expected: nil, desired: nil)
        }
      }
      let reference = AtomicReference<Node>()
      reference.store(Node(reference, 0))
      reference.store(nil)  // releases node 0, whose deinit stores node 1, ...
      _ = reference.exchange(nil)
      reference.store(nil)
      guard reference.load() == nil || reference.load()!.depth >= 1 else { exit(1) }
      reference.store(nil)
      exit(0)
    }
  }

  @Test("a Once body that throws, re-run from the catch on the same thread, runs again")
  func onceRetryFromCatch() {
    struct Failure: Error {}
    let once = Once()
    var runs = 0
    do {
      try once.run { () throws(Failure) in
        runs += 1
        throw Failure()
      }
    } catch {
      once.run { runs += 1 }
    }
    #expect(runs == 2)
    #expect(once.isCompleted)
    once.run { runs += 1 }
    #expect(runs == 2)
  }

  @Test("synchronized: racing threads on a few objects never overlap inside one object's section")
  func synchronizedModel() {
    final class Key: @unchecked Sendable {
      var inside = 0
      var total = 0
    }
    let keys = [Key(), Key(), Key()]
    let overlaps = AtomicInteger<Int>(0)
    let deadline = MonotonicInstant.now + .milliseconds(300)
    runConcurrently(4) { index in
      var random = SeededGenerator(seed: UInt64(index) + 7)
      while !deadline.hasPassed {
        let first = keys[Int.random(in: 0..<3, using: &random)]
        let nested = Bool.random(using: &random)
        synchronized(first) {
          first.inside += 1
          if first.inside != 1 { overlaps.increment(ordering: .relaxed) }
          if nested {
            // The same object again (recursive), never a second one (no lock order).
            synchronized(first) { first.total += 1 }
          }
          first.total += 1
          first.inside -= 1
        }
      }
    }
    #expect(overlaps.load(ordering: .relaxed) == 0)
    for key in keys { #expect(key.inside == 0) }
  }
}

@Suite("Audit round 4: error text for unnamed codes", .timeLimit(.minutes(3)))
struct AuditRound4ErrorTextTests {
  @Test("a code without a name prints as its doc says: errno N (Unknown error N)")
  func unnamedCode() {
    #expect(SystemErrorCode(rawValue: 9999).description == "errno 9999 (Unknown error 9999)")
    #expect(SystemErrorCode(rawValue: -1).description == "errno -1 (Unknown error -1)")
    #expect(SystemErrorCode(rawValue: Int32.min).name == nil)
    #expect(!SystemErrorCode(rawValue: Int32.min).message.isEmpty)
    #expect(SystemErrorCode(rawValue: 0).name == nil)
    #expect(SystemErrorCode(rawValue: 0).message == "Success")
  }
}

/// A flag two threads of an exit-test child hand each other (spinning with `sched_yield`,
/// independent of the primitives under test).
private final class Flag: @unchecked Sendable {
  private let word = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
  init() { word.initialize(to: 0) }
  func raise() { UInt32.atomicStore(1, at: word, ordering: .releasing) }
  var isRaised: Bool { UInt32.atomicLoad(at: word, ordering: .acquiring) == 1 }
  func wait() { while !isRaised { sched_yield() } }
}

@Suite("Audit round 4: a predicate that releases the lock", .timeLimit(.minutes(3)))
struct AuditRound4PredicateReleaseTests {
  // The predicate of `wait(until:)` runs with the lock held; one that releases it (and
  // returns false) lets another thread take the lock before the wait's own release. That
  // release must not free the other thread's lock (two threads in the critical section):
  // it must stop the process naming the misuse. In the child, the second thread exits with
  // status 3 (no message) when it finds its lock freed under it.

  @Test("Condition.wait(until:) after its predicate released the lock stops the process", .runsExitTests)
  func condition() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      blocking {
        let condition = Condition()
        let released = Flag()
        let taken = Flag()
        runConcurrently(2) { index in
          if index == 0 {
            condition.lock()
            var first = true
            condition.wait(until: {
              guard first else { return true }
              first = false
              condition.unlock()
              released.raise()
              taken.wait()
              return false
            })
            exit(0)
          } else {
            released.wait()
            condition.lock()
            taken.raise()
            let giveUp = MonotonicInstant.now + .seconds(5)
            while !giveUp.hasPassed {
              if !condition.isHeldByCurrentThread { exit(3) }  // freed by the other thread's wait
              sched_yield()
            }
            exit(4)
          }
        }
      }
    }.map { result in
      #expect(childError(result).contains("Condition misuse"), "exit status \(result.exitStatus)")
    }
  }

  @Test(
    "ConditionVariable.wait(_:until:before:) after its predicate released the mutex stops the process", .runsExitTests)
  func conditionVariable() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      blocking {
        let mutex = Lock()
        let variable = ConditionVariable()
        let released = Flag()
        let taken = Flag()
        runConcurrently(2) { index in
          if index == 0 {
            mutex.lock()
            var first = true
            _ = variable.wait(
              mutex,
              until: {
                guard first else { return true }
                first = false
                mutex.unlock()
                released.raise()
                taken.wait()
                return false
              }, before: .distantFuture - .nanoseconds(1))
            exit(0)
          } else {
            released.wait()
            mutex.lock()
            taken.raise()
            let giveUp = MonotonicInstant.now + .seconds(5)
            while !giveUp.hasPassed {
              if !mutex.isHeldByCurrentThread { exit(3) }
              sched_yield()
            }
            exit(4)
          }
        }
      }
    }.map { result in
      #expect(childError(result).contains("misuse"), "exit status \(result.exitStatus)")
    }
  }

  @Test("a predicate that releases the lock alone is reported as waiting without the lock", .runsExitTests)
  func aloneReleased() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      blocking {
        let condition = Condition()
        condition.lock()
        _ = condition.wait(
          until: {
            condition.unlock()
            return false
          }, timeout: .seconds(5))
      }
      exit(0)
    }.map { result in
      #expect(childError(result).contains("Condition misuse"))
    }
  }
}

@Suite("Audit round 4: a scoped body that releases the lock itself", .timeLimit(.minutes(3)))
struct AuditRound4ScopedReleaseTests {
  @Test("withWriteLock whose body unlocked, while another thread took a read lock, stops the process", .runsExitTests)
  func writeScopeBodyUnlocked() async {
    // The scope's own release must not drop the other thread's read lock (read locks are
    // not tagged, but the scope knows it took the write lock).
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      scopeReleasedByBody { lock, body in lock.withWriteLock(body) }
    }.map { result in
      #expect(childError(result).contains("ReadWriteLock misuse"), "exit status \(result.exitStatus)")
    }
  }

  @Test(
    "generic withLock on a ReadWriteLock whose body unlocked, while another thread took a read lock, stops the process",
    .runsExitTests)
  func genericScopeBodyUnlocked() async {
    // The same hole through `Locking`'s scoped forms, which generic code uses: the scope took
    // the write side, so it must not release another thread's read lock.
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      scopeReleasedByBody { lock, body in scopedIfAvailable(lock, body) }
    }.map { result in
      #expect(childError(result).contains("ReadWriteLock misuse"), "exit status \(result.exitStatus)")
    }
  }

  @Test("generic withLock on each lock type takes and releases it, and a ReadWriteLock's write side")
  func genericScopesStillWork() {
    func cycle(_ lock: some Locking) -> Int {
      var count = 0
      lock.withLock { count += 1 }
      _ = lock.withLockIfAvailable { count += 1 }
      _ = lock.withLock(timeout: .milliseconds(10)) { count += 1 }
      #expect(lock.tryLock(), "the scopes left \(type(of: lock)) locked")
      lock.unlock()
      return count
    }
    let readWrite = ReadWriteLock()
    #expect(cycle(Lock()) == 3)
    #expect(cycle(RecursiveLock()) == 3)
    #expect(cycle(SpinLock()) == 3)
    #expect(cycle(readWrite) == 3)
    readWrite.withLock { #expect(!readWrite.tryReadLock(), "withLock took the write side") }
  }
}

@Suite("Audit round 4: SharedMemoryLock.markConsistent from the wrong thread", .timeLimit(.minutes(3)))
struct AuditRound4MarkConsistentTests {
  @Test("markConsistent() by a thread that does not hold the recovered lock stops the process", .runsExitTests)
  func wrongThread() async {
    // glibc's pthread_mutex_consistent does not check the caller holds the mutex: it makes
    // the caller the recorded owner. The documented misuse stop must come from the toolkit.
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      blocking {
        let region = try! SharedMemoryRegion(sharedAnonymousByteCount: 4096)
        let lock = try! SharedMemoryLock.initialize(at: region.address)
        runConcurrently(1) { _ in _ = try? lock.lock() }  // ends holding it
        guard (try? lock.lock()) == .previousOwnerDied else { exit(2) }
        runConcurrently(1) { _ in lock.markConsistent() }
        exit(3)  // accepted from a thread that does not hold the lock
      }
    }.map { result in
      #expect(childError(result).contains("does not hold"), "exit status \(result.exitStatus)")
    }
  }

  @Test("markConsistent() by the holder after an owner died recovers the lock for good")
  func holder() throws {
    let region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
    let lock = try SharedMemoryLock.initialize(at: region.address)
    blocking {
      runConcurrently(1) { _ in _ = try? lock.lock() }
      #expect((try? lock.lock()) == .previousOwnerDied)
      lock.markConsistent()
      lock.unlock()
      #expect((try? lock.tryLock()) == .acquired)
      lock.unlock()
    }
  }
}

@Suite("Audit round 4: SharedMemoryLock on memory never initialized", .timeLimit(.minutes(3)))
struct AuditRound4UninitializedSharedLockTests {
  // A fresh SharedMemoryRegion is zero-filled, and zero bytes are a valid *default*
  // pthread mutex for glibc (not robust, not process-shared, not error-checking): without
  // a check, every promise of the type silently fails on it.

  @Test("unlock() of a lock at zeroed memory (initialize(at:) forgotten) stops the process", .runsExitTests)
  func unlockUninitialized() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(20)
      let region = try! SharedMemoryRegion(sharedAnonymousByteCount: 4096)
      SharedMemoryLock(existingAt: region.address).unlock()
      exit(3)  // a lock nobody holds was "unlocked" without a word
    }.map { result in
      #expect(childError(result).contains("SharedMemoryLock misuse"), "exit status \(result.exitStatus)")
    }
  }

  @Test("relocking a lock at zeroed memory stops the process instead of hanging", .runsExitTests)
  func relockUninitialized() async {
    await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      alarm(5)
      blocking {
        let region = try! SharedMemoryRegion(sharedAnonymousByteCount: 4096)
        let lock = SharedMemoryLock(existingAt: region.address)
        _ = try? lock.lock()
        _ = try? lock.lock()
      }
      exit(3)
    }.map { result in
      #expect(childError(result).contains("SharedMemoryLock misuse"), "exit status \(result.exitStatus)")
    }
  }
}

@Suite("Audit round 4: seeded races with random timeouts", .timeLimit(.minutes(3)))
struct AuditRound4RandomTimeoutRaceTests {
  /// A timeout drawn from the extremes and the small values: negative, zero, tiny, huge.
  private static func timeout(_ random: inout SeededGenerator) -> Duration {
    switch Int.random(in: 0..<6, using: &random) {
    case 0: return lowestDuration
    case 1: return .zero
    case 2: return .nanoseconds(-Int64.random(in: 1...1_000_000, using: &random))
    case 3: return .microseconds(Int64.random(in: 1...300, using: &random))
    case 4: return highestDuration
    default: return .nanoseconds(1)
    }
  }

  @Test("read-write lock: writers alone, readers together, whatever the timeouts", arguments: [21, 22])
  func readWrite(seed: UInt64) {
    let lock = ReadWriteLock()
    let readers = AtomicInteger<Int>(0)
    let writers = AtomicInteger<Int>(0)
    let violations = AtomicInteger<Int>(0)
    let deadline = MonotonicInstant.now + .milliseconds(300)
    runConcurrently(4) { index in
      var random = SeededGenerator(seed: seed &* 131 &+ UInt64(index))
      while !deadline.hasPassed {
        let limit = Self.timeout(&random)
        if Int.random(in: 0..<3, using: &random) == 0 {
          guard lock.writeLock(timeout: limit) else { continue }
          if writers.add(1, ordering: .relaxed) != 1 || readers.load(ordering: .relaxed) != 0 {
            violations.increment(ordering: .relaxed)
          }
          _ = writers.subtract(1, ordering: .relaxed)
          lock.unlock()
        } else {
          guard lock.readLock(timeout: limit) else { continue }
          _ = readers.add(1, ordering: .relaxed)
          if writers.load(ordering: .relaxed) != 0 { violations.increment(ordering: .relaxed) }
          _ = readers.subtract(1, ordering: .relaxed)
          lock.unlock()
        }
      }
    }
    #expect(violations.load(ordering: .relaxed) == 0)
    #expect(lock.tryWriteLock())
    lock.unlock()
  }

  @Test(
    "lock, recursive lock, spin lock and condition lock: one holder at a time, whatever the timeouts",
    arguments: [31, 32])
  func exclusive(seed: UInt64) {
    let locks: [any Locking] = [Lock(), RecursiveLock(), SpinLock(), ConditionLock(condition: 0), Condition()]
    // One object per lock: each is touched only under its own lock.
    final class Counters: @unchecked Sendable {
      var inside = 0
      var taken = 0
    }
    let counters = locks.map { _ in Counters() }
    let violations = AtomicInteger<Int>(0)
    let deadline = MonotonicInstant.now + .milliseconds(300)
    runConcurrently(4) { index in
      var random = SeededGenerator(seed: seed &* 977 &+ UInt64(index))
      while !deadline.hasPassed {
        let which = Int.random(in: 0..<locks.count, using: &random)
        let lock = locks[which]
        let got: Bool
        switch Int.random(in: 0..<3, using: &random) {
        case 0: got = lock.tryLock()
        case 1: got = lock.lock(timeout: Self.timeout(&random))
        default: got = lock.lock(before: .now + Self.timeout(&random))
        }
        guard got else { continue }
        counters[which].inside += 1
        if counters[which].inside != 1 { violations.increment(ordering: .relaxed) }
        counters[which].taken += 1
        counters[which].inside -= 1
        lock.unlock()
      }
    }
    #expect(violations.load(ordering: .relaxed) == 0)
    #expect(counters.allSatisfy { $0.inside == 0 })
    for lock in locks {
      #expect(lock.tryLock())
      lock.unlock()
    }
  }
}

@Suite("Audit round 4: predicates that throw", .timeLimit(.minutes(3)))
struct AuditRound4ThrowingPredicateTests {
  struct Refused: Error, Equatable {}

  @Test("an error from a wait predicate after a wake-up propagates with the lock held")
  func conditionAfterWakeUp() {
    let condition = Condition()
    let mutex = Lock()
    let variable = ConditionVariable()
    let stage = GuardedValue(-1)
    runConcurrently(2) { index in
      if index == 0 {
        condition.lock()
        stage.value = 0  // seen by the other thread only once the wait released the lock
        #expect(throws: Refused.self) {
          _ = try condition.wait(
            until: { () throws(Refused) -> Bool in
              if stage.value == 1 { throw Refused() }
              return false
            }, before: .distantFuture - .nanoseconds(1))
        }
        #expect(condition.isHeldByCurrentThread)
        condition.unlock()
        mutex.lock()
        stage.value = 2
        #expect(throws: Refused.self) {
          try variable.wait(
            mutex,
            until: { () throws(Refused) -> Bool in
              if stage.value == 3 { throw Refused() }
              return false
            })
        }
        #expect(mutex.isHeldByCurrentThread)
        mutex.unlock()
      } else {
        while condition.withLock({ stage.value }) != 0 { sched_yield() }
        condition.lock()
        stage.value = 1
        condition.broadcast()
        condition.unlock()
        while mutex.withLock({ stage.value }) != 2 { sched_yield() }
        mutex.withLock {
          stage.value = 3
          variable.broadcast()
        }
      }
    }
  }

  @Test("a predicate that throws at the deadline's last check propagates with the lock held")
  func lastCheck() {
    let condition = Condition()
    condition.lock()
    var calls = 0
    #expect(throws: Refused.self) {
      _ = try condition.wait(
        until: { () throws(Refused) -> Bool in
          calls += 1
          if calls == 2 { throw Refused() }
          return false
        }, timeout: .milliseconds(1))
    }
    #expect(calls == 2)
    #expect(condition.isHeldByCurrentThread)
    condition.unlock()
  }
}

@Suite("Audit round 4: barrier rounds with more threads than parties", .timeLimit(.minutes(3)))
struct AuditRound4BarrierRoundsTests {
  // Each thread arrives once: with several arrivals per thread, a thread lagging behind
  // can be left without partners once the others have finished theirs.
  @Test(
    "threads beyond the party count form the next rounds: exactly one true per round",
    arguments: [(6, 2), (6, 3), (4, 4), (5, 1)])
  func rounds(threads: Int, parties: Int) {
    let barrier = ThreadBarrier(parties: parties)
    let trues = AtomicInteger<Int>(0)
    runConcurrently(threads) { _ in
      if barrier.arriveAndWait() { trues.increment(ordering: .relaxed) }
    }
    #expect(trues.load(ordering: .relaxed) == threads / parties)
  }
}

@Suite("Audit round 4: a passed deadline on a free lock still takes it", .timeLimit(.minutes(3)))
struct AuditRound4PassedDeadlineFreeTests {
  @Test("the one attempt of a passed deadline or the most negative timeout succeeds on every free lock")
  func freeLocks() throws {
    var locks: [any Locking] = [Lock(), RecursiveLock(), SpinLock(), ReadWriteLock(), Condition(), ConditionLock()]
    if let priority = try? PriorityInheritanceLock() { locks.append(priority) }
    blocking {
      for lock in locks {
        #expect(lock.lock(before: .distantPast), "\(type(of: lock))")
        lock.unlock()
        #expect(lock.lock(timeout: lowestDuration), "\(type(of: lock))")
        lock.unlock()
        #expect(lock.withLock(before: MonotonicInstant(nanoseconds: -1)) { 7 } == 7, "\(type(of: lock))")
      }
      let readWrite = ReadWriteLock()
      #expect(readWrite.readLock(before: .distantPast))
      #expect(readWrite.readLock(timeout: lowestDuration))
      readWrite.unlock()
      readWrite.unlock()
      let locked = LockedValue(1)
      #expect(
        locked.withLock(when: { $0 == 1 }, before: .distantPast) {
          $0 += 1
          return $0
        } == 2)
      #expect(locked.withLock(when: { $0 == 1 }, timeout: lowestDuration) { $0 } == nil)
      let conditionLock = ConditionLock(condition: Int.min)
      #expect(conditionLock.lock(whenCondition: Int.min, before: .distantPast))
      conditionLock.unlock()
    }
  }

  @Test("a shared-memory lock: the most negative timeout on a free lock takes it")
  func sharedFree() throws {
    let region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
    let lock = try SharedMemoryLock.initialize(at: region.address)
    blocking {
      #expect((try? lock.lock(timeout: lowestDuration)) == .acquired)
      lock.unlock()
      #expect((try? lock.lock(before: .distantPast)) == .acquired)
      lock.unlock()
    }
  }
}

@Suite("Audit round 4: ProcessLock objects racing", .timeLimit(.minutes(3)))
struct AuditRound4ProcessLockRaceTests {
  @Test("objects for one path on racing threads: at most one holds it, and a live owner is never broken")
  func racingObjects() throws {
    let scratch = ScratchDirectory()
    defer { scratch.remove() }
    let path = scratch.path + "/race.lock"
    let locks = try (0..<4).map { _ in try ProcessLock(path: path) }
    let holders = AtomicInteger<Int>(0)
    let violations = AtomicInteger<Int>(0)
    let failures = AtomicInteger<Int>(0)
    let deadline = MonotonicInstant.now + .milliseconds(300)
    runConcurrently(4) { index in
      let lock = locks[index]
      var random = SeededGenerator(seed: UInt64(index) + 41)
      while !deadline.hasPassed {
        do {
          let got = Bool.random(using: &random) ? try lock.tryLock() : try lock.tryLockBreakingStaleLock()
          guard got else { continue }
          if holders.add(1, ordering: .relaxed) != 1 { violations.increment(ordering: .relaxed) }
          _ = holders.subtract(1, ordering: .relaxed)
          try lock.unlock()
        } catch {
          failures.increment(ordering: .relaxed)
        }
      }
    }
    #expect(violations.load(ordering: .relaxed) == 0)
    #expect(failures.load(ordering: .relaxed) == 0)
    #expect(try locks[0].owner() == nil)
  }

}

/// `Locking`'s generic scoped form, as generic code reaches it (never the concrete overloads).
private func scopedIfAvailable(_ lock: some Locking, _ body: () -> Void) {
  if lock.withLockIfAvailable(body) == nil { exit(5) }
}

/// In an exit test's child: one thread's `scope` takes a `ReadWriteLock`'s write side and its
/// body releases it; another thread then takes a read lock. The child exits with status 3 if
/// the scope's end released that read lock (the write lock became free under it), 0 or 4 if
/// nothing stopped the process, and fails with the misuse message if the scope caught it.
private func scopeReleasedByBody(_ scope: @escaping @Sendable (ReadWriteLock, () -> Void) -> Void) -> Never {
  alarm(20)
  blocking {
    let lock = ReadWriteLock()
    let released = Flag()
    let taken = Flag()
    runConcurrently(2) { index in
      if index == 0 {
        scope(lock) {
          lock.unlock()
          released.raise()
          taken.wait()
        }
        let giveUp = MonotonicInstant.now + .seconds(5)
        while !giveUp.hasPassed { sched_yield() }
        exit(0)
      } else {
        released.wait()
        lock.readLock()
        taken.raise()
        let giveUp = MonotonicInstant.now + .seconds(5)
        while !giveUp.hasPassed {
          if lock.tryWriteLock() { exit(3) }  // our read lock was released by the other thread
          sched_yield()
        }
        exit(4)
      }
    }
  }
  exit(0)
}
