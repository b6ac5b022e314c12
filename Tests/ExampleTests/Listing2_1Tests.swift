// Listing 2-1: creating a detached POSIX thread with explicit attributes, and reporting a
// creation error instead of asserting.
import Sync
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

@Suite("Listing 2-1: launching a detached thread with attributes", .timeLimit(.minutes(3)))
struct Listing2_1Tests {
  /// The guide's `LaunchThread()`: attributes set explicitly (detached, here also a stack size
  /// and a name), creation errors logged rather than crashing.
  @Test func launchThreadRunsTheMainRoutineDetached() {
    let done = Listing2_1Latch()
    var attributes = ThreadConfiguration()  // pthread_attr_init
    attributes.stackSize = 256 * 1024  // pthread_attr_setstacksize
    attributes.name = "posix-main-routine"
    var log: [String] = []

    @Sendable func posixThreadMainRoutine() {
      // Do some work here.
      done.open(with: Thread.current.name ?? "")
    }

    do {
      try Thread.detach(configuration: attributes) { posixThreadMainRoutine() }  // PTHREAD_CREATE_DETACHED
    } catch {
      log.append("thread creation failed: \(error)")  // "Report an error."
    }
    #expect(log.isEmpty)
    #expect(done.wait() == "posix-main-routine")
  }

  /// The error branch: a creation failure arrives as a typed error naming what to change.
  @Test func launchThreadReportsCreationErrors() {
    var attributes = ThreadConfiguration()
    attributes.stackSize = 1024  // below the 16 KiB minimum
    var log: [String] = []
    do {
      try Thread.detach(configuration: attributes) {}
    } catch {
      log.append("thread creation failed: \(error)")
      #expect(error == .invalidConfiguration(.stackSizeTooSmall(1024, minimum: ThreadConfiguration.minimumStackSize)))
    }
    #expect(log.count == 1)
    #expect(log.first?.contains("stackSize 1024 is below the minimum") == true)
  }
}

/// A one-shot latch carrying a string, on raw pthread primitives.
private final class Listing2_1Latch: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
  private var message: String?  // guarded by `mutex`

  init() {
    precondition(pthread_mutex_init(mutex, nil) == 0 && pthread_cond_init(condition, nil) == 0)
  }

  deinit {
    precondition(pthread_cond_destroy(condition) == 0 && pthread_mutex_destroy(mutex) == 0)
    mutex.deallocate()
    condition.deallocate()
  }

  func open(with text: String) {
    precondition(pthread_mutex_lock(mutex) == 0)
    message = text
    precondition(pthread_cond_broadcast(condition) == 0 && pthread_mutex_unlock(mutex) == 0)
  }

  func wait() -> String {
    precondition(pthread_mutex_lock(mutex) == 0)
    while message == nil { precondition(pthread_cond_wait(condition, mutex) == 0) }
    let text = message!
    precondition(pthread_mutex_unlock(mutex) == 0)
    return text
  }
}
