import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// How a thread is created: stack, name, priority, scheduling policy, CPU affinity, and
/// whether the process waits for it at exit.
///
/// A plain value: fill it in, then pass it to ``Thread/spawn(name:configuration:_:)``,
/// ``Thread/detach(name:configuration:_:)`` or ``Thread/init(name:configuration:_:)``. Every
/// value is checked before the thread is created (``validate()``); an invalid one makes
/// creation throw ``ThreadStartError/invalidConfiguration(_:)`` with a
/// ``ThreadConfigurationError`` that names the field, the value and what is allowed, before
/// any C call is made. Nothing is clamped silently. Once a thread has started its
/// configuration cannot change.
///
/// ```swift
/// var configuration = ThreadConfiguration()
/// configuration.name = "image-decoder"
/// configuration.stackSize = 256 * 1024
/// configuration.relativePriority = 0.25      // nice 10: yields to interactive work
/// configuration.cpuAffinity = [1]
/// let worker = try Thread.spawn(configuration: configuration) { decode() }
/// ```
public struct ThreadConfiguration: Sendable, Hashable {
  /// The guide's stack size for secondary threads: 512 KiB (Table 2-1). glibc's own default
  /// would be `RLIMIT_STACK` (usually 8 MiB); the toolkit uses the guide's figure.
  public static let defaultStackSize = 512 * 1024

  /// The smallest stack accepted: 16 KiB (the guide's minimum, and glibc's `PTHREAD_STACK_MIN`
  /// on x86-64; where the C library's minimum is larger, that one applies).
  public static let minimumStackSize: Int = {
    let system = sysconf(Int32(_SC_THREAD_STACK_MIN))
    return Swift.max(16 * 1024, system > 0 ? system : 0)
  }()

  /// The size of a memory page (`sysconf(_SC_PAGESIZE)`): stack and guard sizes are rounded
  /// up to a multiple of it.
  public static let pageSize: Int = {
    let size = sysconf(Int32(_SC_PAGESIZE))
    return size > 0 ? size : 4096
  }()

  /// The longest name the Linux kernel keeps for a thread: 15 bytes of UTF-8 (`TASK_COMM_LEN`
  /// is 16 with the terminating NUL).
  public static let kernelNameLimit = 15

  /// The thread's stack size in bytes, reserved (address space) at creation; pages become
  /// resident only when touched. Default ``defaultStackSize`` (512 KiB).
  ///
  /// **Rounded up** to a multiple of ``pageSize`` (the guide requires a 4 KiB multiple; the
  /// toolkit rounds instead of failing). Below ``minimumStackSize`` (0 included) creation
  /// throws ``ThreadConfigurationError/stackSizeTooSmall(_:minimum:)``, where libuv's
  /// `uv_thread_create_ex` raises a small size to the minimum and reads 0 as the default;
  /// a size too large to round up throws
  /// ``ThreadConfigurationError/stackSizeTooLarge(_:maximum:)``. A size the system
  /// cannot map throws ``ThreadStartError/system(_:)`` with `EAGAIN` from `pthread_create`
  /// (glibc reports the failed `mmap`'s `ENOMEM` as `EAGAIN`, as POSIX specifies). The
  /// guard area is allocated in addition to this size. glibc reuses the stacks of ended
  /// threads, and may hand a thread a cached stack up to 4x the requested size (never a
  /// smaller one). Under ThreadSanitizer, its `pthread_create` raises a stack smaller than
  /// its thread-local data plus 128 KiB to exactly that sum, which is not a page multiple.
  public var stackSize: Int = ThreadConfiguration.defaultStackSize

  /// The size of the inaccessible guard area below the stack that turns a stack overflow
  /// into a crash instead of silent corruption; `nil` keeps the system default (one page).
  /// Rounded up to a page multiple; `0` disables the guard. Negative values throw
  /// ``ThreadConfigurationError/guardSizeNegative(_:)``, values too large to round up
  /// ``ThreadConfigurationError/guardSizeTooLarge(_:maximum:)``.
  public var guardSize: Int? = nil

  /// The thread's name, shown in debuggers, crash reports, `top -H` and `/proc`.
  ///
  /// ``Thread/name`` always returns the full name. The kernel keeps at most 15 bytes: the
  /// toolkit gives it the longest prefix of whole characters (extended grapheme clusters)
  /// that fits in ``kernelNameLimit`` UTF-8 bytes (see ``kernelName(for:)``); it never
  /// splits a character and never fails because a name is long. A name containing a NUL
  /// character is cut before it.
  public var name: String? = nil

  /// A tail of ``name`` the kernel name keeps when the name is too long or holds a NUL: the
  /// name's start is cut instead (`"run-loop-group-12"` becomes `"run-loop-gro-12"`,
  /// `"io\0disk-1"` becomes `"io-1"`), so numbered threads of one family stay told apart in
  /// `top -H` and debuggers. Empty (default) cuts the end.
  package var kernelNameKeptSuffix: String = ""

  /// The guide's 0.0...1.0 relative priority (1.0 highest, 0.5 typical); `nil` (default)
  /// inherits the creating thread's nice value.
  ///
  /// Linux honours it for normal threads as the thread's own **nice value**
  /// (`setpriority(PRIO_PROCESS, tid)`, which on Linux applies to one thread):
  /// `nice = round((0.5 - relativePriority) * 40)` clamped to -20...19, so 0.5 is nice 0,
  /// 0.25 is nice 10, 0.0 is nice 19, 1.0 is nice -20. ``Thread/currentRelativePriority()``
  /// reads it back (quantized to steps of 1/40). Values outside 0...1 or NaN throw
  /// ``ThreadConfigurationError/relativePriorityOutOfRange(_:allowed:)``. Raising priority
  /// above the creator's (nice below its current value) needs `CAP_SYS_NICE` or
  /// `RLIMIT_NICE`; without it creation throws ``ThreadStartError/system(_:)`` with `EACCES`
  /// (`setpriority`). Not allowed with a real-time ``schedulingPolicy``
  /// (``ThreadConfigurationError/relativePriorityWithRealTimePolicy(_:)``).
  public var relativePriority: Double? = nil

  /// The scheduling policy; `nil` (default) inherits the creator's policy and priority.
  /// Real-time priorities outside ``ThreadSchedulingPolicy/realTimePriorityRange`` throw
  /// ``ThreadConfigurationError/realTimePriorityOutOfRange(_:allowed:)``; lacking permission
  /// throws ``ThreadStartError/system(_:)`` with `EPERM` (`pthread_create`).
  public var schedulingPolicy: ThreadSchedulingPolicy? = nil

  /// The CPUs (numbered from 0) the thread may run on; `nil` (default) inherits the creator's
  /// affinity. An empty list throws ``ThreadConfigurationError/cpuAffinityEmpty``, a number
  /// outside `0..<1024` ``ThreadConfigurationError/cpuAffinityOutOfRange(cpu:allowed:)``;
  /// CPUs that are not online make `pthread_create` fail (``ThreadStartError/system(_:)``
  /// with `EINVAL`). Applied by the C library before the thread runs its first instruction.
  public var cpuAffinity: [Int]? = nil

  /// Whether the process must wait for this thread at normal exit: critical work (saving
  /// data) that must not be cut off, the guide's reason for joinable threads, made explicit.
  ///
  /// When set, an `atexit` handler registered on first use blocks a normal exit (`exit()`,
  /// returning from `main`) until every such thread has returned from its body and finished
  /// ending (its ``Thread/onExit(_:)`` handlers have run and its thread dictionary has been
  /// emptied), whether it is joinable or detached. `_exit`, `quick_exit`, signals and
  /// crashes do not wait. A critical thread that itself calls `exit()` (from its body, an
  /// exit handler or a value released with its dictionary) is not waited for (it would wait
  /// for itself).
  /// A child process made by `fork()` has none of the parent's other threads, so its
  /// `exit()` waits for none of them (only for the forking thread's own body, when a
  /// critical thread forked and then returns from its body in the child).
  public var finishBeforeExit: Bool = false

  /// A configuration with the defaults: 512 KiB stack, system guard, no name, inherited
  /// priority, policy and affinity, not waited for at exit.
  public init() {}

  /// The part of `name` the kernel keeps: the longest prefix of whole characters whose UTF-8
  /// form fits in ``kernelNameLimit`` (15) bytes, cut before any NUL.
  ///
  /// ```swift
  /// ThreadConfiguration.kernelName(for: "com.example.downloader")  // "com.example.dow"
  /// ThreadConfiguration.kernelName(for: "downloaders-grösse")     // "downloaders-gr" (14 bytes: "ö" needs 2 more)
  /// ```
  public static func kernelName(for name: String) -> String {
    wholeCharacters(of: name[...], fitting: kernelNameLimit)
  }

  /// The longest prefix of whole characters of `text` whose UTF-8 form fits in `limit`
  /// bytes, cut before any NUL.
  private static func wholeCharacters(of text: Substring, fitting limit: Int) -> String {
    var result = ""
    var bytes = 0
    for character in text {
      if character.unicodeScalars.contains(where: { $0.value == 0 }) { break }
      let length = character.utf8.count
      if bytes + length > limit { break }
      result.append(character)
      bytes += length
    }
    return result
  }

  /// ``kernelName(for:)`` that keeps `suffix` whole when `name` ends with it and is too long
  /// or holds a NUL: the rest of the name is cut (to fit, and before any NUL) to make room, so
  /// a NUL in the rest does not take the suffix with it.
  package static func kernelName(for name: String, keeping suffix: String) -> String {
    let whole = kernelName(for: name)
    guard !suffix.isEmpty, whole.utf8.count < name.utf8.count, name.hasSuffix(suffix),
      !suffix.utf8.contains(0), suffix.utf8.count < kernelNameLimit
    else { return whole }
    return wholeCharacters(of: name.dropLast(suffix.count), fitting: kernelNameLimit - suffix.utf8.count) + suffix
  }

  /// The nice value ``relativePriority`` maps to: `round((0.5 - p) * 40)` clamped to -20...19
  /// (values beyond 0...1, the infinities included, clamp to an end). NaN stands for no
  /// priority and stops the process (misuse) instead of mapping to an arbitrary end.
  public static func niceValue(forRelativePriority priority: Double) -> Int32 {
    // NaN compares false with everything: the clamps below would turn it into -20, the
    // highest priority.
    if priority.isNaN {
      reportMisuse("ThreadConfiguration", "niceValue(forRelativePriority:) called with NaN (use a value in 0...1)")
    }
    let nice = ((0.5 - priority) * 40).rounded()
    return Int32(Swift.min(19, Swift.max(-20, nice)))
  }

  /// The relative priority a nice value stands for: `0.5 - nice / 40`, within 0...1.
  public static func relativePriority(forNiceValue nice: Int32) -> Double {
    Swift.min(1, Swift.max(0, 0.5 - Double(nice) / 40))
  }

  /// Checks every value without creating a thread.
  ///
  /// - Throws: ``ThreadConfigurationError`` naming the first field that is out of range, with
  ///   the value and what is allowed; the thread-starting calls throw the same error wrapped
  ///   in ``ThreadStartError/invalidConfiguration(_:)``. Values only the kernel can judge (a
  ///   CPU that is not online, a priority the process lacks permission for) pass here and
  ///   fail when the thread is created.
  public func validate() throws(ThreadConfigurationError) {
    _ = try resolved()
  }

  /// The checked values, rounded as documented.
  struct Resolved {
    var stackSize: Int
    var guardSize: Int?
    var kernelName: String?
    var niceValue: Int32?
    var schedulingPolicy: ThreadSchedulingPolicy?
    var cpuAffinity: [Int32]?
  }

  /// The largest size that rounds up to a page multiple without overflowing `Int`: the
  /// largest page multiple an `Int` holds (`Int.max` is one less than a power of two, so
  /// adding `pageSize - 1` to it still fits).
  static var maximumRoundableSize: Int { Int.max / pageSize * pageSize }

  /// The allowed ``relativePriority`` values.
  static let relativePriorityRange: ClosedRange<Double> = 0...1

  /// The CPU numbers a CPU affinity may name (those a `cpu_set_t` holds).
  static var cpuNumberRange: Range<Int> { 0..<Int(tk_cpu_set_capacity()) }

  /// Checks a relative priority (``relativePriority`` or the calling thread's setter).
  static func checkRelativePriority(_ priority: Double) throws(ThreadConfigurationError) {
    // `contains` is false for NaN too.
    guard relativePriorityRange.contains(priority) else {
      throw .relativePriorityOutOfRange(priority, allowed: relativePriorityRange)
    }
  }

  /// Checks a CPU affinity list (``cpuAffinity`` or the calling thread's setter).
  static func checkCPUAffinity(_ cpus: [Int]) throws(ThreadConfigurationError) {
    guard !cpus.isEmpty else { throw .cpuAffinityEmpty }
    let allowed = cpuNumberRange
    if let cpu = cpus.first(where: { !allowed.contains($0) }) {
      throw .cpuAffinityOutOfRange(cpu: cpu, allowed: allowed)
    }
  }

  /// Validates and rounds.
  func resolved() throws(ThreadConfigurationError) -> Resolved {
    let page = ThreadConfiguration.pageSize
    let maximum = ThreadConfiguration.maximumRoundableSize
    func roundedUp(_ value: Int) -> Int { (value + (page - 1)) / page * page }  // value <= maximum: no overflow
    guard stackSize >= ThreadConfiguration.minimumStackSize else {
      throw .stackSizeTooSmall(stackSize, minimum: ThreadConfiguration.minimumStackSize)
    }
    guard stackSize <= maximum else { throw .stackSizeTooLarge(stackSize, maximum: maximum) }
    let stack = roundedUp(stackSize)
    var guardBytes: Int? = nil
    if let guardSize {
      guard guardSize >= 0 else { throw .guardSizeNegative(guardSize) }
      guard guardSize <= maximum else { throw .guardSizeTooLarge(guardSize, maximum: maximum) }
      guardBytes = roundedUp(guardSize)
    }
    var nice: Int32? = nil
    if let relativePriority {
      try ThreadConfiguration.checkRelativePriority(relativePriority)
      if let policy = schedulingPolicy, policy != .normal { throw .relativePriorityWithRealTimePolicy(policy) }
      nice = ThreadConfiguration.niceValue(forRelativePriority: relativePriority)
    }
    switch schedulingPolicy {
    case .fifo(let priority), .roundRobin(let priority):
      let allowed = ThreadSchedulingPolicy.realTimePriorityRange
      guard allowed.contains(priority) else { throw .realTimePriorityOutOfRange(priority, allowed: allowed) }
    case .normal, nil: break
    }
    var cpus: [Int32]? = nil
    if let cpuAffinity {
      try ThreadConfiguration.checkCPUAffinity(cpuAffinity)
      cpus = cpuAffinity.map { Int32($0) }
    }
    let suffix = kernelNameKeptSuffix
    return Resolved(
      stackSize: stack, guardSize: guardBytes,
      kernelName: name.map { ThreadConfiguration.kernelName(for: $0, keeping: suffix) },
      niceValue: nice, schedulingPolicy: schedulingPolicy, cpuAffinity: cpus)
  }
}
