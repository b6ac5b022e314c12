import Sync

/// Why a thread did not start: its configuration was refused before any C call, or the
/// system refused a call.
///
/// Thrown by ``Thread/spawn(name:configuration:_:)``, ``Thread/detach(name:configuration:_:)``
/// and ``Thread/start()``. After either case no thread runs the body, and nothing is left to
/// join or release.
///
/// ```swift
/// do throws(ThreadStartError) {
///     let worker = try Thread.spawn(configuration: configuration) { work() }
///     worker.join()
/// } catch .invalidConfiguration(let problem) {
///     print("fix the configuration: \(problem)")
/// } catch let error where error.systemError?.code == .tryAgain {
///     // the system refused another thread or could not map its stack; retry later
/// } catch {
///     print(error)
/// }
/// ```
public enum ThreadStartError: Error, Hashable, Sendable, CustomStringConvertible {
  /// A field of the ``ThreadConfiguration`` is out of range (what
  /// ``ThreadConfiguration/validate()`` throws); no C call was made.
  case invalidConfiguration(ThreadConfigurationError)

  /// A call failed: `pthread_create` (`EAGAIN`: no thread or stack available; `EPERM`: no
  /// permission for a real-time policy; `EINVAL`: a CPU affinity with no online CPU), a
  /// `pthread_attr_*` call, or `setpriority` on the new thread (`EACCES`: raising the
  /// priority needs a permission the process lacks).
  case system(SystemCallError)

  /// The failed call for ``system(_:)``, `nil` for ``invalidConfiguration(_:)``: lets
  /// `catch let error where error.systemError?.code == .tryAgain` match one code.
  public var systemError: SystemCallError? {
    if case .system(let error) = self { return error }
    return nil
  }

  /// `"invalid thread configuration: <what to change>"`, or the failed call's description
  /// (`"pthread_create failed: EAGAIN (Resource temporarily unavailable)"`).
  public var description: String {
    switch self {
    case .invalidConfiguration(let problem): return "invalid thread configuration: \(problem)"
    case .system(let error): return error.description
    }
  }
}
