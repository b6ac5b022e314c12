import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

// Operations on the calling thread: sleeping, yielding, and reading or changing what the
// kernel holds for it (name, priority, affinity, stack).
extension Thread {
  /// Blocks the calling thread for `duration` on the monotonic clock (never returns early;
  /// may return late by the scheduler's latency and the default 50 us timer slack). Zero or
  /// negative durations return at once. Signals do not shorten the sleep.
  ///
  /// The corresponding C function is `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`.
  @available(*, noasync, message: "blocks the thread; use Task.sleep in async code")
  public static func sleep(for duration: Duration) {
    sleep(until: .after(duration))
  }

  /// Blocks the calling thread until `deadline` on the monotonic clock has passed (never
  /// returns early). A deadline in the past returns at once; ``/Sync/MonotonicInstant/distantFuture``
  /// sleeps for good. Signals do not shorten the sleep (`EINTR` is resumed with the same
  /// absolute deadline).
  ///
  /// The corresponding C function is `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`.
  @available(*, noasync, message: "blocks the thread; use Task.sleep in async code")
  public static func sleep(until deadline: MonotonicInstant) {
    // Only EINVAL/EFAULT remain, impossible with a valid timespec on CLOCK_MONOTONIC.
    shimCallOrDie("clock_nanosleep") { tk_sleep_until_monotonic(deadline.nanoseconds) }
  }

  /// Offers the processor to another runnable thread of the same priority; returns at once if
  /// there is none. The corresponding C function is `sched_yield`.
  public static func yield() {
    // sched_yield always succeeds on Linux.
    _ = mustSucceed("Threads") { () throws(SystemCallError) in try systemCall("sched_yield") { sched_yield() } }
  }

  /// The calling thread's name as the kernel holds it (at most 15 bytes): what debuggers and
  /// `top -H` show. The corresponding C function is `pthread_getname_np`, whose failure is
  /// thrown as a ``/Sync/SystemCallError``.
  public static func currentKernelName() throws(SystemCallError) -> String {
    var buffer = [CChar](repeating: 0, count: 32)
    _ = try shimCall("pthread_getname_np") {
      buffer.withUnsafeMutableBufferPointer { tk_thread_get_name($0.baseAddress, $0.count) }
    }
    return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
  }

  /// The calling thread's nice value (-20 highest priority ... 19 lowest), read from the
  /// kernel. The corresponding C function is `getpriority(PRIO_PROCESS, 0)`, which Linux
  /// applies to the calling thread; its failure is thrown as a ``/Sync/SystemCallError``.
  public static func currentNiceValue() throws(SystemCallError) -> Int32 {
    var nice: Int32 = 0
    _ = try shimCall("getpriority") { tk_thread_get_nice(&nice) }
    return nice
  }

  /// The calling thread's relative priority (0.0...1.0, 0.5 typical) read back from its nice
  /// value, with the mapping ``ThreadConfiguration/relativePriority`` documents (steps of 1/40).
  /// Throws what ``currentNiceValue()`` throws.
  public static func currentRelativePriority() throws(SystemCallError) -> Double {
    ThreadConfiguration.relativePriority(forNiceValue: try currentNiceValue())
  }

  /// Sets the calling thread's relative priority (0.0...1.0) as its nice value, with the
  /// mapping ``ThreadConfiguration/relativePriority`` documents.
  ///
  /// - Throws: ``ThreadSettingError/invalidValue(_:)`` with
  ///   ``ThreadConfigurationError/relativePriorityOutOfRange(_:allowed:)`` outside 0...1 or
  ///   NaN (no C call is made); ``ThreadSettingError/system(_:)`` with `EACCES`
  ///   (`setpriority`) when raising priority needs `CAP_SYS_NICE`/`RLIMIT_NICE` the process
  ///   lacks. The corresponding C function is `setpriority(PRIO_PROCESS, 0)`.
  public static func setCurrentRelativePriority(_ priority: Double) throws(ThreadSettingError) {
    do throws(ThreadConfigurationError) {
      try ThreadConfiguration.checkRelativePriority(priority)
    } catch {
      throw .invalidValue(error)
    }
    do throws(SystemCallError) {
      let nice = ThreadConfiguration.niceValue(forRelativePriority: priority)
      _ = try shimCall("setpriority") { tk_thread_set_nice(nice) }
    } catch {
      throw .system(error)
    }
  }

  /// The CPUs the calling thread may run on, ascending. The corresponding C function is
  /// `pthread_getaffinity_np`, whose failure is thrown as a ``/Sync/SystemCallError``.
  public static func currentCPUAffinity() throws(SystemCallError) -> [Int] {
    var cpus = [Int32](repeating: 0, count: Int(tk_cpu_set_capacity()))
    var count: Int32 = 0
    _ = try shimCall("pthread_getaffinity_np") {
      cpus.withUnsafeMutableBufferPointer { tk_thread_get_affinity($0.baseAddress, Int32($0.count), &count) }
    }
    return cpus.prefix(Int(count)).map { Int($0) }
  }

  /// Restricts the calling thread to `cpus`.
  ///
  /// - Throws: ``ThreadSettingError/invalidValue(_:)`` with
  ///   ``ThreadConfigurationError/cpuAffinityEmpty`` for an empty list, or
  ///   ``ThreadConfigurationError/cpuAffinityOutOfRange(cpu:allowed:)`` for a number outside
  ///   0..<1024 (no C call is made); ``ThreadSettingError/system(_:)`` with `EINVAL` when no
  ///   CPU in the list is online. The corresponding C function is `pthread_setaffinity_np`.
  public static func setCurrentCPUAffinity(_ cpus: [Int]) throws(ThreadSettingError) {
    do throws(ThreadConfigurationError) {
      try ThreadConfiguration.checkCPUAffinity(cpus)
    } catch {
      throw .invalidValue(error)
    }
    let values = cpus.map { Int32($0) }
    do throws(SystemCallError) {
      _ = try shimCall("pthread_setaffinity_np") {
        values.withUnsafeBufferPointer { tk_thread_set_affinity($0.baseAddress, Int32($0.count)) }
      }
    } catch {
      throw .system(error)
    }
  }

  /// The calling thread's stack size and guard size in bytes, as the C library reports them
  /// (for the main thread, the size is derived from `RLIMIT_STACK`). The corresponding C
  /// function is `pthread_getattr_np`, whose failure is thrown as a ``/Sync/SystemCallError``.
  public static func currentStackSize() throws(SystemCallError) -> (stackSize: Int, guardSize: Int) {
    var stack = 0
    var guardSize = 0
    _ = try shimCall("pthread_getattr_np") { tk_thread_get_stack(&stack, &guardSize) }
    return (stack, guardSize)
  }
}
