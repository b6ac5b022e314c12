import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// Why a job ended without running its closure.
enum PoolRejection: Sendable {
  /// The submitting task was cancelled before a worker started the closure.
  case cancelled
  /// The pool was shutting down when the job was submitted.
  case shutDown
  /// No worker was running and none could be started.
  case threadStart(ThreadStartError)
}

/// One `ThreadPool.run` call: the one heap allocation a job costs (the continuation lives in
/// the task). The closure and the continuation live in the subclass (generic over the
/// closure's value and error); the pool sees only this base.
///
/// Ownership: every field but the subclass's closure and continuation is guarded by the
/// pool's lock. Exactly one party claims a job, under the lock, and only that party touches
/// the closure and the continuation afterwards: the worker that takes it from a queue (or is
/// handed it), or the party that removes it from a queue to reject it (a cancellation
/// handler, a failed worker start). The continuation is stored before the job is published
/// (under the lock, whose release/acquire makes it visible to the claimer).
@usableFromInline
class PoolJob: @unchecked Sendable {
  /// Where a job is. Guarded by the pool's lock.
  enum Phase {
    /// Created, not yet submitted.
    case new
    /// Submitted while the queue was full: in a waiting list until a slot frees.
    case waiting
    /// In a run queue.
    case queued
    /// Handed to an idle worker that has not woken yet (`worker` is set).
    case assigned
    /// Its closure is running on `worker`.
    case running
    /// Finished, rejected or cancelled; the pool holds it no more.
    case done
  }

  /// Guarded by the pool's lock.
  var phase = Phase.new
  /// The task was cancelled before the job was submitted (its handler ran first).
  var cancelledBeforeSubmission = false
  /// The priority level (0 highest; see `ThreadPool`'s priority rule).
  let level: Int
  /// The worker running (or handed) the job, for a cancellation. Guarded by the lock.
  var worker: PoolWorker?
  /// Links in a run queue or waiting list. Guarded by the lock. The list holds the strong
  /// `next` references; `previous` is unowned (each job is retained by its predecessor or
  /// the list's head).
  var next: PoolJob?
  unowned(unsafe) var previous: PoolJob?

  init(level: Int) {
    self.level = level
  }

  /// Runs the closure, calls `finished`, and resumes the submitter with the closure's
  /// outcome. Called by the worker that claimed the job, without the lock.
  func execute(_ finished: () -> Void) {
    fatalError("PoolJob.execute is provided by the typed job")
  }

  /// Resumes the submitter with `reason` without running the closure. Called by the party
  /// that claimed the job, without the lock.
  func reject(_ reason: PoolRejection) {
    fatalError("PoolJob.reject is provided by the typed job")
  }
}

/// A job whose closure returns `Value` or throws `Failure`.
///
/// Every path drops the closure before the submitter is resumed: `execute()` runs it in a
/// separate function whose locals are gone before the resume, `reject` clears it before
/// resuming. So the closure's captures are released on the pool's side, never after `run`
/// returned.
@usableFromInline
final class TypedPoolJob<Value, Failure: Error>: PoolJob, @unchecked Sendable {
  @usableFromInline
  typealias Outcome = Result<Value, ThreadPoolError<Failure>>

  /// Owned by the claimer (see `PoolJob`).
  private var body: (@Sendable () throws(Failure) -> Value)?
  /// Set by the submitter before the job is published; owned by the claimer.
  var continuation: UnsafeContinuation<Outcome, Never>?
  /// Under ThreadSanitizer only: orders the claimer's `resume` before the task's next
  /// writes (the job is still alive when the claimer marks it: it holds a reference).
  private let fence = ResumerFence()

  /// The pool's state, which the job is submitted to (and cancelled in).
  let core: ThreadPoolCore

  @usableFromInline
  init(core: ThreadPoolCore, level: Int) {
    self.core = core
    super.init(level: level)
  }

  /// Submits the job with `body` and waits for its outcome; a cancellation of the calling
  /// task meanwhile goes to the pool. The closures below are non-escaping and capture only
  /// the job, so their contexts live in the task's async frame (no heap allocation).
  @usableFromInline
  func submit(_ body: @escaping @Sendable () throws(Failure) -> Value) async -> Outcome {
    self.body = body
    let outcome = await withTaskCancellationHandler {
      await withUnsafeContinuation { (continuation: UnsafeContinuation<Outcome, Never>) in
        self.continuation = continuation
        core.submit(self)
      }
    } onCancel: {
      core.cancel(self)
    }
    fence.waitForResumer()
    return outcome
  }

  override func execute(_ finished: () -> Void) {
    let outcome = runBody()
    finished()
    guard let continuation = continuation.take() else { fatalError("ThreadPool internal error: no continuation") }
    continuation.resume(returning: outcome)
    fence.markResumed()
  }

  /// Takes the closure, runs it and returns its outcome; the closure is released when this
  /// returns (before `execute` resumes the submitter).
  @inline(never)
  private func runBody() -> Outcome {
    guard let body = body.take() else { fatalError("ThreadPool internal error: a job ran twice") }
    do throws(Failure) {
      return .success(try body())
    } catch {
      return .failure(.failed(error))
    }
  }

  override func reject(_ reason: PoolRejection) {
    body = nil
    guard let continuation = continuation.take() else { fatalError("ThreadPool internal error: no continuation") }
    switch reason {
    case .cancelled: continuation.resume(returning: .failure(.cancelled))
    case .shutDown: continuation.resume(returning: .failure(.shutDown))
    case .threadStart(let error): continuation.resume(returning: .failure(.threadStartFailed(error)))
    }
    fence.markResumed()
  }
}

/// A first-in first-out list of jobs linked through the jobs themselves (no allocation to
/// queue or dequeue; O(1) removal of a cancelled job). Guarded by the pool's lock.
struct PoolJobList {
  private(set) var head: PoolJob?
  private unowned(unsafe) var tail: PoolJob?

  var isEmpty: Bool { head == nil }

  mutating func append(_ job: PoolJob) {
    job.next = nil
    job.previous = tail
    if let tail { tail.next = job } else { head = job }
    tail = job
  }

  /// Unlinks `job`, which is in this list.
  mutating func remove(_ job: PoolJob) {
    let next = job.next
    let previous = job.previous
    if let previous { previous.next = next } else { head = next }
    if let next { next.previous = previous } else { tail = previous }
    job.next = nil
    job.previous = nil
  }

  mutating func popFirst() -> PoolJob? {
    guard let job = head else { return nil }
    remove(job)
    return job
  }
}
