// Listing 2-3: a long job that periodically checks an exit flag kept in its thread
// dictionary. This is the variant without a run loop: the flag is set by another thread
// through an exit-request handler (the role the guide's custom input source plays).
import Sync
import Testing
import Threads

@Suite("Listing 2-3: checking for an exit condition during a long job", .timeLimit(.minutes(3)))
struct Listing2_3Tests {
  enum Ending: Equatable {
    case workFinished
    case exitRequested(afterChunks: Int)
  }

  /// The guide's `threadMainRoutine`, with the zero-time run-loop pass replaced by reading
  /// the dictionary the handler writes to.
  static func threadMainRoutine(ready: AtomicInteger<Int>, chunksOfWork: Int) -> Ending {
    var moreWorkToDo = true
    var exitNow = false
    var chunks = 0

    // Add the exitNow BOOL to the thread dictionary.
    let threadDictionary = Thread.current.threadDictionary
    threadDictionary["ThreadShouldExitNow"] = exitNow

    // Install the "input source": whoever requests the exit flips the flag.
    let worker = Thread.current
    worker.addExitRequestHandler { worker.threadDictionary["ThreadShouldExitNow"] = true }
    _ = ready.increment(ordering: .releasing)

    while moreWorkToDo && !exitNow {
      // Do one chunk of work here.
      chunks += 1
      Thread.yield()
      if chunks == chunksOfWork { moreWorkToDo = false }

      // Check to see if an input source handler changed the exitNow value.
      exitNow = threadDictionary["ThreadShouldExitNow", as: Bool.self] ?? false
    }
    return exitNow ? .exitRequested(afterChunks: chunks) : .workFinished
  }

  @Test func longJobStopsWhenAnotherThreadSetsTheExitFlag() throws {
    let ready = AtomicInteger<Int>(0)
    let job = try Thread.spawn(name: "long-job") {
      Listing2_3Tests.threadMainRoutine(ready: ready, chunksOfWork: .max)  // would never finish
    }
    while ready.load(ordering: .acquiring) == 0 { Thread.yield() }  // handler installed
    let jobThread = job.thread
    jobThread.requestExit()
    guard case .exitRequested(let chunks) = job.join() else {
      Issue.record("the job ignored the exit flag")
      return
    }
    #expect(chunks >= 1)
    #expect(jobThread.isExitRequested)
  }

  @Test func longJobFinishesItsWorkWhenNobodyAsksItToStop() throws {
    let ready = AtomicInteger<Int>(0)
    let job = try Thread.spawn(name: "short-job") {
      Listing2_3Tests.threadMainRoutine(ready: ready, chunksOfWork: 100)
    }
    #expect(job.join() == .workFinished)
    #expect(ready.load(ordering: .acquiring) == 1)
  }
}
