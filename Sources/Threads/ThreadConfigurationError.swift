/// A thread setting the toolkit refuses before any C call is made: a
/// ``ThreadConfiguration`` field, or a value passed to one of the calling thread's setters
/// (``Thread/setCurrentRelativePriority(_:)``, ``Thread/setCurrentCPUAffinity(_:)``), that is
/// out of range.
///
/// Each case names the field, carries the offending value and what is allowed, and its
/// ``description`` says what to change. Thrown by ``ThreadConfiguration/validate()``, and
/// wrapped in ``ThreadStartError/invalidConfiguration(_:)`` by the calls that start a thread,
/// and in ``ThreadSettingError/invalidValue(_:)`` by the calling thread's setters. Nothing is
/// clamped silently: a value that would be changed to fit is refused instead (only the
/// documented rounding to a page multiple is applied).
///
/// ```swift
/// var configuration = ThreadConfiguration()
/// configuration.stackSize = 8 * 1024
/// do throws(ThreadConfigurationError) {
///     try configuration.validate()
/// } catch .stackSizeTooSmall(_, let minimum) {
///     configuration.stackSize = minimum
/// } catch {
///     print(error)    // says which field to change, and how
/// }
/// ```
public enum ThreadConfigurationError: Error, Hashable, Sendable, CustomStringConvertible {
  /// ``ThreadConfiguration/stackSize`` is below `minimum`
  /// (``ThreadConfiguration/minimumStackSize``). The C library would refuse it too
  /// (`pthread_attr_setstacksize`'s `EINVAL`).
  case stackSizeTooSmall(Int, minimum: Int)

  /// ``ThreadConfiguration/stackSize`` is above `maximum`, the largest page multiple an `Int`
  /// holds: rounding it up to a page would overflow.
  case stackSizeTooLarge(Int, maximum: Int)

  /// ``ThreadConfiguration/guardSize`` is negative; `0` disables the guard, `nil` keeps the
  /// system's.
  case guardSizeNegative(Int)

  /// ``ThreadConfiguration/guardSize`` is above `maximum`, the largest page multiple an `Int`
  /// holds: rounding it up to a page would overflow.
  case guardSizeTooLarge(Int, maximum: Int)

  /// A relative priority (``ThreadConfiguration/relativePriority`` or the value passed to
  /// ``Thread/setCurrentRelativePriority(_:)``) is outside `allowed` (`0...1`), or is NaN.
  case relativePriorityOutOfRange(Double, allowed: ClosedRange<Double>)

  /// ``ThreadConfiguration/relativePriority`` is set together with a real-time
  /// ``ThreadConfiguration/schedulingPolicy`` (the policy carried here): a nice value means
  /// nothing to a real-time thread, whose priority is the policy's own.
  case relativePriorityWithRealTimePolicy(ThreadSchedulingPolicy)

  /// The priority of a real-time ``ThreadConfiguration/schedulingPolicy`` is outside
  /// `allowed` (``ThreadSchedulingPolicy/realTimePriorityRange``, 1...99 on Linux).
  case realTimePriorityOutOfRange(Int, allowed: ClosedRange<Int>)

  /// A CPU affinity (``ThreadConfiguration/cpuAffinity`` or the list passed to
  /// ``Thread/setCurrentCPUAffinity(_:)``) is empty: a thread must be allowed at least one
  /// CPU. Use `nil` in a configuration to inherit the creator's affinity.
  case cpuAffinityEmpty

  /// A CPU affinity names `cpu`, a number outside `allowed` (`0..<1024`, the CPU numbers a
  /// `cpu_set_t` holds). A number inside the range whose CPU is not online is not this error:
  /// the kernel refuses it (`EINVAL`, a ``/Sync/SystemCallError``).
  case cpuAffinityOutOfRange(cpu: Int, allowed: Range<Int>)

  /// What is wrong and what to change, for example
  /// `"stackSize 8192 is below the minimum 16384: use at least 16384 bytes"`.
  public var description: String {
    switch self {
    case .stackSizeTooSmall(let size, let minimum):
      return "stackSize \(size) is below the minimum \(minimum): use at least \(minimum) bytes"
    case .stackSizeTooLarge(let size, let maximum):
      return "stackSize \(size) is above \(maximum), the largest page-rounded size: use a smaller stack"
    case .guardSizeNegative(let size):
      return "guardSize \(size) is negative: use 0 to disable the guard, or nil for the system's"
    case .guardSizeTooLarge(let size, let maximum):
      return "guardSize \(size) is above \(maximum), the largest page-rounded size: use a smaller guard"
    case .relativePriorityOutOfRange(let priority, let allowed):
      return
        "relativePriority \(priority) is outside \(allowed.lowerBound)...\(allowed.upperBound): use a value in that range"
    case .relativePriorityWithRealTimePolicy(let policy):
      return
        "relativePriority is set with the real-time policy \(policy): remove relativePriority (the policy's priority applies)"
    case .realTimePriorityOutOfRange(let priority, let allowed):
      return
        "real-time priority \(priority) is outside \(allowed.lowerBound)...\(allowed.upperBound): use a priority in that range"
    case .cpuAffinityEmpty:
      return "cpuAffinity is empty: name at least one CPU, or use nil to inherit the creator's affinity"
    case .cpuAffinityOutOfRange(let cpu, let allowed):
      return
        "cpuAffinity names CPU \(cpu), outside \(allowed.lowerBound)..<\(allowed.upperBound): use CPU numbers in that range"
    }
  }
}
