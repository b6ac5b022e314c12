#if canImport(Glibc)
  import Glibc
#endif

/// ThreadSanitizer's happens-before annotations, looked up once at run time: present only in
/// a process running with its runtime (`--sanitize=thread`), `nil` otherwise, so a normal
/// build pays one load and a branch per use and links nothing.
///
/// Needed where an ordering goes through code ThreadSanitizer does not see: a continuation
/// resumed on a pool thread wakes its task through the concurrency runtime's own atomics,
/// and when the task had not suspended yet it goes on without the runtime's enqueue/run
/// annotations. The resuming thread (a pool thread, a run loop's thread) releases the
/// request's address after resuming; the task acquires it when its wait returns.
package enum SanitizerAnnotations {
  private typealias Annotation = @convention(c) (UnsafeRawPointer?) -> Void

  private static let acquireFunction: Annotation? = lookUp("__tsan_acquire")
  private static let releaseFunction: Annotation? = lookUp("__tsan_release")

  private static func lookUp(_ name: String) -> Annotation? {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
    return unsafeBitCast(symbol, to: Annotation.self)
  }

  /// Marks everything the calling thread did so far as happening before a later `acquire`
  /// of the same address.
  @inline(__always)
  package static func release(_ object: AnyObject) {
    if let releaseFunction { releaseFunction(UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque())) }
  }

  /// Whether the process runs with ThreadSanitizer's runtime.
  package static var isActive: Bool { releaseFunction != nil }

  /// Orders the calling thread after every `release` of the same address.
  @inline(__always)
  package static func acquire(_ object: AnyObject) {
    if let acquireFunction { acquireFunction(UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque())) }
  }
}
