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

/// The hand-over between a thread that resumes a continuation and the task it resumes, made
/// visible to ThreadSanitizer (see ``SanitizerAnnotations``): the resumer calls
/// ``markResumed()`` once it has returned from `resume`, the task calls ``waitForResumer()``
/// once its wait returned, and the resumer's reads of the task's frame are then ordered
/// before the task's next writes to it. The fence's own word (allocated under
/// ThreadSanitizer only) is the address both annotate. Outside ThreadSanitizer both are a
/// test of a nil field: nothing is allocated and nobody waits (the runtime orders them with
/// its own atomics). Create one per request and let the resumer keep a copy until it has
/// called ``markResumed()`` (the copy keeps the word alive).
package struct ResumerFence: Sendable {
  private let done: FutexWord? = SanitizerAnnotations.isActive ? FutexWord(0) : nil

  /// An open fence (a closed one under ThreadSanitizer).
  package init() {}

  /// The resuming thread has returned from `resume`.
  package func markResumed() {
    guard let done else { return }
    SanitizerAnnotations.release(done)
    done.store(1)
  }

  /// Waits (briefly, yielding) until the resumer has called ``markResumed()``.
  package func waitForResumer() {
    guard let done else { return }
    while done.load() == 0 { sched_yield() }
    SanitizerAnnotations.acquire(done)
  }
}
