// Helpers for fault injection with resource limits (RLIMIT_AS, RLIMIT_NOFILE): a scenario
// run in a child forked from an exit test's child, windows with a lowered limit, and the
// process's footprint (threads, descriptors, mappings) to compare before and after. Plain
// Glibc and nothing of the toolkit, like the helpers beside them. A lowered limit binds the
// whole process: use them only in a child process that runs one scenario alone.

#if canImport(Glibc)
  import Glibc
#endif

/// Runs `scenario` in a child forked from the calling (exit-test) process, where only the
/// calling thread exists, so no thread of the test runtime meets a limit the scenario
/// lowers; stops the caller unless the child exits with status 0. Each process arms an alarm.
public func runScenarioInForkedChild(_ what: String, _ scenario: () -> Void) {
  armAlarm(seconds: 150)
  let child = fork()
  precondition(child >= 0, "fork failed: errno \(errno)")
  guard child == 0 else {
    let status = waitForExitStatus(child)
    precondition(status == 0, "\(what): the scenario ended with status \(status)")
    return
  }
  armAlarm(seconds: 150)
  scenario()
  _exit(0)
}

/// How many mappings the process has (lines of /proc/self/maps).
public func mappingCount() -> Int {
  guard let file = fopen("/proc/self/maps", "r") else { preconditionFailure("fopen maps: errno \(errno)") }
  defer { fclose(file) }
  var lines = 0
  while true {
    let character = fgetc(file)
    if character == EOF { break }
    if character == 10 { lines += 1 }
  }
  return lines
}

/// The address space the process maps now, in bytes (`VmSize` of /proc/self/status).
public func addressSpaceInUse() -> Int {
  guard let file = fopen("/proc/self/status", "r") else { preconditionFailure("fopen status: errno \(errno)") }
  defer { fclose(file) }
  var line = [CChar](repeating: 0, count: 256)
  while fgets(&line, Int32(line.count), file) != nil {
    let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    guard text.hasPrefix("VmSize:") else { continue }
    let field = text.dropFirst("VmSize:".count).split(whereSeparator: { $0 == " " || $0 == "\t" }).first
    guard let kibibytes = field.flatMap({ Int($0) }) else { preconditionFailure("unreadable line \(text)") }
    return kibibytes * 1024
  }
  preconditionFailure("no VmSize in /proc/self/status")
}

/// Makes the allocations of a process about to lower its address-space limit come from
/// memory mapped already: malloc maps no chunk of its own and gives no memory back, and 64 MiB
/// are grown and freed in the calling thread's arena. Then empties glibc's cache of ended
/// threads' stacks (a thread whose stack exceeds the cache's 40 MiB ends and takes every
/// cached stack with it), so that a new thread's stack needs a new mapping.
public func prepareForAddressSpaceLimit() {
  // `mallopt` is in malloc.h, which the Glibc module leaves out: M_MMAP_MAX is -4,
  // M_TRIM_THRESHOLD -1.
  typealias MallocOption = @convention(c) (Int32, Int32) -> Int32
  guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { preconditionFailure("no mallopt") }
  let mallopt = unsafeBitCast(symbol, to: MallocOption.self)
  precondition(mallopt(-4, 0) == 1 && mallopt(-1, Int32.max) == 1)
  let reserve = 64 << 20
  guard let block = malloc(reserve) else { preconditionFailure("cannot grow the heap") }
  memset(block, 1, reserve)
  free(block)
  var attributes = pthread_attr_t()
  precondition(pthread_attr_init(&attributes) == 0 && pthread_attr_setstacksize(&attributes, 48 << 20) == 0)
  var flusher = pthread_t()
  precondition(pthread_create(&flusher, &attributes, { _ in nil }, nil) == 0)
  precondition(pthread_join(flusher, nil) == 0 && pthread_attr_destroy(&attributes) == 0)
}

/// Lowers the address-space limit to what the process maps now plus `headroom` bytes, runs
/// `body`, and restores the limit.
public func withAddressSpaceHeadroom<T>(_ headroom: Int, _ body: () -> T) -> T {
  withSoftLimit(__rlimit_resource_t(RLIMIT_AS.rawValue), at: addressSpaceInUse() + headroom, body)
}

/// Lowers the soft descriptor limit so that exactly `free` more descriptors can be opened
/// (new descriptors take the lowest free numbers), runs `body`, and restores the limit.
public func withFreeDescriptorCount<T>(_ free: Int, _ body: () -> T) -> T {
  let open = Set(openDescriptorListing().compactMap { Int($0.split(separator: " ").first ?? "") })
  var limit = 0
  var left = free
  while left > 0 || open.contains(limit) {
    if !open.contains(limit) { left -= 1 }
    limit += 1
  }
  return withSoftLimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), at: limit, body)
}

private func withSoftLimit<T>(_ resource: __rlimit_resource_t, at value: Int, _ body: () -> T) -> T {
  var original = rlimit()
  precondition(getrlimit(resource, &original) == 0)
  var lowered = original
  lowered.rlim_cur = rlim_t(value)
  precondition(setrlimit(resource, &lowered) == 0, "setrlimit: errno \(errno)")
  let result = body()
  precondition(setrlimit(resource, &original) == 0)
  return result
}

/// The process's threads, open descriptors and mappings at one moment.
public struct ProcessFootprint: Equatable, CustomStringConvertible {
  public var threads = procEntryCount("/proc/self/task")
  public var descriptors = openDescriptorListing()
  public var mappings = mappingCount()
  public init() {}
  public var description: String { "threads \(threads), descriptors \(descriptors.sorted()), mappings \(mappings)" }

  /// Waits (up to 5 s: a joined thread's kernel task may linger a moment) until the process
  /// is back to these threads and descriptors, and, when `extraMappings` is given, to at most
  /// that many mappings more (glibc keeps the stacks of ended threads, and the arenas new
  /// threads allocate from, mapped for reuse; a sanitizer's allocator maps memory whenever it
  /// likes, so mappings are only compared without one). Stops the process with `what`
  /// otherwise.
  public func expectBack(extraMappings: Int? = nil, _ what: String) {
    func isBack(_ now: ProcessFootprint) -> Bool {
      now.threads == threads && now.descriptors == descriptors
        && extraMappings.map { now.mappings <= mappings + $0 } != false
    }
    let giveUp = monotonicNanoseconds() + 5_000_000_000
    var now = ProcessFootprint()
    while !isBack(now) && monotonicNanoseconds() < giveUp {
      sched_yield()
      now = ProcessFootprint()
    }
    precondition(isBack(now), "\(what) left something behind: before \(self); after \(now)")
  }
}
