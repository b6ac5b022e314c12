import ProcessTestSupport
import Sync
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// RLIMIT_NPROC and RLIMIT_RTPRIO (glibc declares them as a GNU enum Swift does not import).
let rlimitProcesses = __rlimit_resource_t(6)
let rlimitRealTimePriority = __rlimit_resource_t(14)

/// Runs `body` on a thread created with `configuration` and returns what it returns.
func onThread<Value: Sendable>(
  _ configuration: ThreadConfiguration, _ body: @escaping @Sendable () throws -> Value
) throws -> Value {
  try Thread.spawn(configuration: configuration, body).join()
}

/// Expects `validate()` to throw `expected`, and spawn, detach and start to throw it wrapped
/// in `ThreadStartError.invalidConfiguration`.
func expectInvalid(
  _ expected: ThreadConfigurationError, _ edit: (inout ThreadConfiguration) -> Void,
  sourceLocation: SourceLocation = #_sourceLocation
) {
  var configuration = ThreadConfiguration()
  edit(&configuration)
  #expect(throws: expected, sourceLocation: sourceLocation) {
    try configuration.validate()
  }
  #expect(throws: ThreadStartError.invalidConfiguration(expected), sourceLocation: sourceLocation) {
    try Thread.spawn(configuration: configuration) {}.join()
  }
  #expect(throws: ThreadStartError.invalidConfiguration(expected), sourceLocation: sourceLocation) {
    try Thread.detach(configuration: configuration) {}
  }
  #expect(throws: ThreadStartError.invalidConfiguration(expected), sourceLocation: sourceLocation) {
    try Thread(configuration: configuration) {}.start()
  }
}

@Suite("Configuration: stack", .timeLimit(.minutes(3)))
struct StackConfigurationTests {
  @Test func defaultIsTheGuides512KiB() throws {
    #expect(ThreadConfiguration().stackSize == 512 * 1024)
    #expect(ThreadConfiguration.defaultStackSize == 512 * 1024)
    let size = try onThread(ThreadConfiguration()) { try Thread.currentStackSize().stackSize }
    // glibc may reuse a cached, larger stack; TSan adds some.
    #expect(size >= 512 * 1024 && size <= 4 * (512 + 64) * 1024)
  }

  @Test func configuredSizeIsRoundedUpToAPage() throws {
    var configuration = ThreadConfiguration()
    configuration.stackSize = 3 * 1024 * 1024 + 100
    let size = try onThread(configuration) { try Thread.currentStackSize().stackSize }
    let page = ThreadConfiguration.pageSize
    let expected = (3 * 1024 * 1024 + 100 + page - 1) / page * page
    #expect(try configuration.resolved().stackSize == expected)
    // What the thread gets: at least that (glibc may reuse a larger cached stack, and
    // ThreadSanitizer enlarges stacks by an amount that is not a page multiple).
    #expect(size >= expected && size <= 4 * (expected + 64 * 1024))
  }

  @Test func minimumIsAccepted() throws {
    var configuration = ThreadConfiguration()
    configuration.stackSize = ThreadConfiguration.minimumStackSize
    #expect(ThreadConfiguration.minimumStackSize >= 16 * 1024)
    #expect(try onThread(configuration) { 42 } == 42)
  }

  @Test func belowMinimumIsStackSizeTooSmall() {
    let minimum = ThreadConfiguration.minimumStackSize
    expectInvalid(.stackSizeTooSmall(16 * 1024 - 1, minimum: minimum)) { $0.stackSize = 16 * 1024 - 1 }
    expectInvalid(.stackSizeTooSmall(0, minimum: minimum)) { $0.stackSize = 0 }
    expectInvalid(.stackSizeTooSmall(-4096, minimum: minimum)) { $0.stackSize = -4096 }
  }

  @Test func sizeThatCannotBeRoundedIsStackSizeTooLarge() {
    let maximum = Int.max / ThreadConfiguration.pageSize * ThreadConfiguration.pageSize
    expectInvalid(.stackSizeTooLarge(.max, maximum: maximum)) { $0.stackSize = .max }
    expectInvalid(.stackSizeTooLarge(maximum + 1, maximum: maximum)) { $0.stackSize = maximum + 1 }
    var largest = ThreadConfiguration()
    largest.stackSize = maximum
    #expect(throws: Never.self) { try largest.validate() }
  }

  @Test func guardSizeIsAppliedAndRounded() throws {
    var configuration = ThreadConfiguration()
    configuration.guardSize = 3 * ThreadConfiguration.pageSize - 1
    let guardSize = try onThread(configuration) { try Thread.currentStackSize().guardSize }
    #expect(guardSize == 3 * ThreadConfiguration.pageSize)
    configuration.guardSize = 0
    #expect(try onThread(configuration) { try Thread.currentStackSize().guardSize } == 0)
  }

  @Test func negativeGuardSizeIsGuardSizeNegative() {
    expectInvalid(.guardSizeNegative(-1)) { $0.guardSize = -1 }
  }

  @Test func guardThatCannotBeRoundedIsGuardSizeTooLarge() {
    let maximum = Int.max / ThreadConfiguration.pageSize * ThreadConfiguration.pageSize
    expectInvalid(.guardSizeTooLarge(.max, maximum: maximum)) { $0.guardSize = .max }
  }
}

@Suite("Configuration: name", .timeLimit(.minutes(3)))
struct NameConfigurationTests {
  @Test func shortNameReadsBackEverywhere() throws {
    let worker = try Thread.spawn(name: "io-worker") { (Thread.current.name, try Thread.currentKernelName()) }
    let thread = worker.thread
    let (name, kernelName) = try worker.join()
    #expect(name == "io-worker")
    #expect(kernelName == "io-worker")
    #expect(thread.name == "io-worker")  // read from another thread: the thread's name, not ours
  }

  @Test func longNameIsKeptWholeAndTruncatedForTheKernel() throws {
    let long = "com.example.background-downloader"
    let worker = try Thread.spawn(name: long) { (Thread.current.name, try Thread.currentKernelName()) }
    let (name, kernelName) = try worker.join()
    #expect(name == long)
    #expect(kernelName == "com.example.bac")
    #expect(kernelName.utf8.count == 15)
  }

  @Test func truncationNeverSplitsACharacter() throws {
    #expect(ThreadConfiguration.kernelName(for: "downloaders-grösse") == "downloaders-gr")
    #expect(ThreadConfiguration.kernelName(for: "日本語のスレッド名") == "日本語のス")  // 5 x 3 bytes
    #expect(ThreadConfiguration.kernelName(for: "abc\u{0}def") == "abc")
    #expect(ThreadConfiguration.kernelName(for: "") == "")
    let worker = try Thread.spawn(name: "downloaders-grösse") { try Thread.currentKernelName() }
    #expect(try worker.join() == "downloaders-gr")
  }

  @Test func threadCanRenameItself() throws {
    let worker = try Thread.spawn(name: "before") { () -> (String?, String) in
      Thread.current.name = "after"
      return (Thread.current.name, try Thread.currentKernelName())
    }
    let thread = worker.thread
    let (name, kernelName) = try worker.join()
    #expect(name == "after" && kernelName == "after")
    #expect(thread.name == "after")
  }

  @Test func spawnNameOverridesConfigurationName() throws {
    var configuration = ThreadConfiguration()
    configuration.name = "from-configuration"
    let worker = try Thread.spawn(name: "from-argument", configuration: configuration) { Thread.current.name }
    let thread = worker.thread
    #expect(worker.join() == "from-argument")
    #expect(thread.configuration.name == "from-argument")
  }
}

@Suite("Configuration: priority and scheduling", .timeLimit(.minutes(3)))
struct PriorityConfigurationTests {
  @Test func niceMappingFollowsTheDocumentedFormula() {
    #expect(ThreadConfiguration.niceValue(forRelativePriority: 0.5) == 0)
    #expect(ThreadConfiguration.niceValue(forRelativePriority: 0.25) == 10)
    #expect(ThreadConfiguration.niceValue(forRelativePriority: 0.0) == 19)
    #expect(ThreadConfiguration.niceValue(forRelativePriority: 1.0) == -20)
    #expect(ThreadConfiguration.relativePriority(forNiceValue: 10) == 0.25)
    #expect(ThreadConfiguration.relativePriority(forNiceValue: 0) == 0.5)
  }

  @Test func lowerPriorityIsAppliedAndReadsBack() throws {
    var configuration = ThreadConfiguration()
    configuration.relativePriority = 0.25
    let (nice, priority) = try onThread(configuration) {
      (try Thread.currentNiceValue(), try Thread.currentRelativePriority())
    }
    #expect(nice == 10)
    #expect(priority == 0.25)
  }

  @Test func detachedThreadAppliesItsPriorityBeforeTheBody() throws {
    let latch = TestLatch()
    let nice = TestBox<Int32?>(nil)
    var configuration = ThreadConfiguration()
    configuration.relativePriority = 0.0
    try Thread.detach(configuration: configuration) {
      nice.value = try Thread.currentNiceValue()
      latch.open()
    }
    latch.wait()
    #expect(nice.value == 19)
  }

  @Test func threadCanChangeItsOwnPriority() throws {
    let readBack = try onThread(ThreadConfiguration()) { () -> Double in
      try Thread.setCurrentRelativePriority(0.125)
      return try Thread.currentRelativePriority()
    }
    #expect(readBack == 0.125)
  }

  @Test func relativePriorityOutsideZeroToOneIsRelativePriorityOutOfRange() {
    expectInvalid(.relativePriorityOutOfRange(1.5, allowed: 0...1)) { $0.relativePriority = 1.5 }
    expectInvalid(.relativePriorityOutOfRange(-0.1, allowed: 0...1)) { $0.relativePriority = -0.1 }
    #expect(throws: ThreadSettingError.invalidValue(.relativePriorityOutOfRange(2, allowed: 0...1))) {
      try Thread.setCurrentRelativePriority(2)
    }
  }

  @Test func nanRelativePriorityIsRelativePriorityOutOfRange() throws {
    // NaN is not equal to itself, so the case is matched instead of compared.
    var configuration = ThreadConfiguration()
    configuration.relativePriority = .nan
    let error = try #require(throws: ThreadConfigurationError.self) { try configuration.validate() }
    guard case .relativePriorityOutOfRange(let value, let allowed) = error else {
      Issue.record("unexpected \(error)")
      return
    }
    #expect(value.isNaN && allowed == 0...1)
    let setterError = try #require(throws: ThreadSettingError.self) { try Thread.setCurrentRelativePriority(.nan) }
    guard case .invalidValue(.relativePriorityOutOfRange(let setterValue, _)) = setterError else {
      Issue.record("unexpected \(setterError)")
      return
    }
    #expect(setterValue.isNaN)
  }

  @Test func relativePriorityWithARealTimePolicyIsRefused() {
    expectInvalid(.relativePriorityWithRealTimePolicy(.fifo(priority: 1))) {
      $0.relativePriority = 0.5
      $0.schedulingPolicy = .fifo(priority: 1)
    }
    expectInvalid(.relativePriorityWithRealTimePolicy(.roundRobin(priority: 5))) {
      $0.relativePriority = 0.5
      $0.schedulingPolicy = .roundRobin(priority: 5)
    }
  }

  @Test func realTimePriorityRangeIsLinuxs() {
    #expect(ThreadSchedulingPolicy.realTimePriorityRange == 1...99)
  }

  @Test func realTimePriorityOutsideTheRangeIsRealTimePriorityOutOfRange() {
    expectInvalid(.realTimePriorityOutOfRange(0, allowed: 1...99)) { $0.schedulingPolicy = .fifo(priority: 0) }
    expectInvalid(.realTimePriorityOutOfRange(100, allowed: 1...99)) {
      $0.schedulingPolicy = .roundRobin(priority: 100)
    }
  }

  @Test func realTimePolicyIsAppliedOrRefusedWithEPERM() throws {
    for policy in [ThreadSchedulingPolicy.fifo(priority: 1), .roundRobin(priority: 2)] {
      var configuration = ThreadConfiguration()
      configuration.schedulingPolicy = policy
      do {
        let applied = try onThread(configuration) { try ThreadSchedulingPolicy.ofCurrentThread() }
        #expect(applied == policy)
      } catch let error as ThreadStartError {
        #expect(error == .system(SystemCallError(call: "pthread_create", code: .operationNotPermitted)))
      }
    }
  }

  @Test func normalPolicyReadsBack() throws {
    var configuration = ThreadConfiguration()
    configuration.schedulingPolicy = .normal
    #expect(try onThread(configuration) { try ThreadSchedulingPolicy.ofCurrentThread() } == .normal)
  }

  @Test(.runsExitTests) func withoutPermissionRealTimeIsEPERMAndRaisingNiceIsEACCES() async {
    // In a child process that gives up root (or never had it) and RLIMIT_RTPRIO.
    await #expect(processExitsWith: .success) {
      exit(childWithoutSchedulingPermission())
    }
  }
}

@Suite("Configuration: CPU affinity", .timeLimit(.minutes(3)))
struct AffinityConfigurationTests {
  @Test func affinityIsAppliedAndReadsBack() throws {
    var configuration = ThreadConfiguration()
    configuration.cpuAffinity = [0]
    #expect(try onThread(configuration) { try Thread.currentCPUAffinity() } == [0])
  }

  @Test func threadCanChangeItsOwnAffinity() throws {
    let all = try Thread.currentCPUAffinity()
    let last = try #require(all.last)
    let readBack = try onThread(ThreadConfiguration()) { () -> [Int] in
      try Thread.setCurrentCPUAffinity([last])
      return try Thread.currentCPUAffinity()
    }
    #expect(readBack == [last])
  }

  @Test func emptyAffinityIsCPUAffinityEmpty() {
    expectInvalid(.cpuAffinityEmpty) { $0.cpuAffinity = [] }
    #expect(throws: ThreadSettingError.invalidValue(.cpuAffinityEmpty)) { try Thread.setCurrentCPUAffinity([]) }
  }

  @Test func cpuNumberOutsideTheSetIsCPUAffinityOutOfRange() {
    expectInvalid(.cpuAffinityOutOfRange(cpu: -1, allowed: 0..<1024)) { $0.cpuAffinity = [-1] }
    expectInvalid(.cpuAffinityOutOfRange(cpu: 1024, allowed: 0..<1024)) { $0.cpuAffinity = [0, 1024] }
    #expect(throws: ThreadSettingError.invalidValue(.cpuAffinityOutOfRange(cpu: 1024, allowed: 0..<1024))) {
      try Thread.setCurrentCPUAffinity([1024])
    }
  }

  @Test func offlineCPUIsRefusedByTheKernel() {
    var configuration = ThreadConfiguration()
    configuration.cpuAffinity = [1000]  // valid number, no such CPU online here
    #expect(throws: ThreadStartError.system(SystemCallError(call: "pthread_create", code: .invalidArgument))) {
      try Thread.spawn(configuration: configuration) {}.join()
    }
  }

  @Test func offlineCPUForTheCurrentThreadIsATypedError() throws {
    // The error comes back from the C shim as a negated errno; a shim returning the pthread
    // convention (a positive errno) would read as success here.
    let outcome = try onThread(ThreadConfiguration()) { () -> ThreadSettingError? in
      do throws(ThreadSettingError) {
        try Thread.setCurrentCPUAffinity([1000])  // valid number, no such CPU online here
        return nil
      } catch {
        return error
      }
    }
    #expect(outcome == .system(SystemCallError(call: "pthread_setaffinity_np", code: .invalidArgument)))
  }
}

@Suite("Creation failures", .timeLimit(.minutes(3)))
struct CreationFailureTests {
  @Test func impossibleStackIsATypedError() {
    // 64 TiB of stack: the mmap in pthread_create fails at once; nothing is touched.
    var configuration = ThreadConfiguration()
    configuration.stackSize = 1 << 46
    do {
      try Thread.spawn(configuration: configuration) {}.join()
      Issue.record("a 64 TiB stack was created")
    } catch {
      #expect(error.systemError?.call == "pthread_create")
      // glibc maps the failed stack mmap (ENOMEM) to EAGAIN, as POSIX specifies.
      #expect(error.systemError?.code == .tryAgain, "\(error)")
    }
  }

  @Test(.runsExitTests) func refusedThreadIsEAGAIN() async {
    // RLIMIT_NPROC in a child process that is not root: the kernel refuses the clone.
    await #expect(processExitsWith: .success) {
      exit(childWithoutThreadAllowance())
    }
  }

  @Test func failedStartCanBeRetriedAfterFixingTheConfiguration() throws {
    let latch = TestLatch()
    var configuration = ThreadConfiguration()
    configuration.stackSize = 1
    let thread = Thread(configuration: configuration) { latch.open() }
    let minimum = ThreadConfiguration.minimumStackSize
    #expect(throws: ThreadStartError.invalidConfiguration(.stackSizeTooSmall(1, minimum: minimum))) {
      try thread.start()
    }
    configuration.stackSize = 64 * 1024
    thread.configuration = configuration
    try thread.start()
    latch.wait()
    #expect(thread.configuration.stackSize == 64 * 1024)
  }
}

/// Gives up root (if the process has it), so limits and capabilities apply.
func dropRoot() {
  if getuid() == 0 { precondition(setgid(65534) == 0 && setuid(65534) == 0) }
}

/// Child-process body: without RLIMIT_RTPRIO or root, a real-time thread is EPERM and a
/// raised nice value is EACCES. Returns the exit status (0 = as documented).
func childWithoutSchedulingPermission() -> Int32 {
  dropRoot()
  var limit = rlimit(rlim_cur: 0, rlim_max: 0)
  precondition(setrlimit(rlimitRealTimePriority, &limit) == 0)
  var configuration = ThreadConfiguration()
  configuration.schedulingPolicy = .fifo(priority: 10)
  do throws(ThreadStartError) {
    try Thread.spawn(configuration: configuration) {}.join()
    return 1
  } catch {
    if error != .system(SystemCallError(call: "pthread_create", code: .operationNotPermitted)) { return 2 }
  }
  var raised = ThreadConfiguration()
  raised.relativePriority = 1.0
  do throws(ThreadStartError) {
    try Thread.spawn(configuration: raised) {}.join()
    return 3
  } catch {
    if error != .system(SystemCallError(call: "setpriority", code: .permissionDenied)) { return 4 }
  }
  do throws(ThreadStartError) {
    try Thread.detach(configuration: raised) {}
    return 5
  } catch {
    if error != .system(SystemCallError(call: "setpriority", code: .permissionDenied)) { return 6 }
  }
  do throws(ThreadSettingError) {
    try Thread.setCurrentRelativePriority(1.0)
    return 7
  } catch {
    if error != .system(SystemCallError(call: "setpriority", code: .permissionDenied)) { return 8 }
  }
  return 0
}

/// Child-process body: with RLIMIT_NPROC at 0 and no root, pthread_create is EAGAIN.
func childWithoutThreadAllowance() -> Int32 {
  dropRoot()
  // Only the soft limit drops to 0, and it is restored before returning: the hard limit
  // stays, so the process may raise it again, and exit-time work that needs a thread
  // (LeakSanitizer's check under AddressSanitizer clones a tracer) still can.
  var saved = rlimit()
  precondition(getrlimit(rlimitProcesses, &saved) == 0)
  var limit = rlimit(rlim_cur: 0, rlim_max: saved.rlim_max)
  precondition(setrlimit(rlimitProcesses, &limit) == 0)
  defer { precondition(setrlimit(rlimitProcesses, &saved) == 0) }
  do throws(ThreadStartError) {
    try Thread.spawn {}.join()
    return 1
  } catch {
    return error == .system(SystemCallError(call: "pthread_create", code: .tryAgain)) ? 0 : 2
  }
}
