import Sync

/// Why one of the calling thread's setters (``Thread/setCurrentRelativePriority(_:)``,
/// ``Thread/setCurrentCPUAffinity(_:)``) failed: the value was refused before any C call, or
/// the kernel refused the call.
public enum ThreadSettingError: Error, Hashable, Sendable, CustomStringConvertible {
  /// The value is out of range (``ThreadConfigurationError/relativePriorityOutOfRange(_:allowed:)``,
  /// ``ThreadConfigurationError/cpuAffinityEmpty``,
  /// ``ThreadConfigurationError/cpuAffinityOutOfRange(cpu:allowed:)``); no C call was made.
  case invalidValue(ThreadConfigurationError)

  /// The call failed: `setpriority` (`EACCES`: raising the priority needs `CAP_SYS_NICE` or
  /// `RLIMIT_NICE`) or `pthread_setaffinity_np` (`EINVAL`: no CPU in the list is online).
  case system(SystemCallError)

  /// The failed call for ``system(_:)``, `nil` for ``invalidValue(_:)``.
  public var systemError: SystemCallError? {
    if case .system(let error) = self { return error }
    return nil
  }

  /// `"invalid thread setting: <what to change>"`, or the failed call's description.
  public var description: String {
    switch self {
    case .invalidValue(let problem): return "invalid thread setting: \(problem)"
    case .system(let error): return error.description
    }
  }
}
