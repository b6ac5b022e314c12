import RunLoop
import Sync
import TestSupport
import Testing
import Threads

/// Listing 2-3: a long job that, after each chunk of work, runs its run loop for zero time and
/// reads an exit flag from its thread dictionary; another thread sets the flag through a custom
/// input source installed on the worker's run loop.
@Suite(.timeLimit(.minutes(3))) struct Listing2_3RunLoopTests {
  @Test func exitFlagSetThroughACustomInputSource() {
    let installed = Box<(RunLoop, RunLoopSource)?>(nil)
    let chunks = Box(0)
    let maximumChunks = 100_000_000
    let worker = runLoopExampleSpawn {
      // threadMainRoutine
      var moreWorkToDo = true
      var exitNow = false
      let runLoop = RunLoop.current

      // Add the exitNow flag to the thread dictionary.
      let threadDictionary = Thread.current.threadDictionary
      threadDictionary["ThreadShouldExitNow"] = exitNow

      // Install an input source: its perform routine runs on this thread and sets the flag.
      let source = RunLoopSource(perform: {
        Thread.current.threadDictionary["ThreadShouldExitNow"] = true
      })
      runLoop.add(source, forMode: .default)
      installed.value = (runLoop, source)

      var done = 0
      while moreWorkToDo && !exitNow {
        // Do one chunk of a larger body of work here.
        done += 1
        chunks.value = done
        // Change the value of the moreWorkToDo Boolean when done.
        if done == maximumChunks { moreWorkToDo = false }

        // Run the run loop but timeout immediately if the input source isn't waiting to fire.
        runLoop.run(before: .now)

        // Check to see if an input source handler changed the exitNow value.
        exitNow = threadDictionary["ThreadShouldExitNow", as: Bool.self] ?? false
      }
      #expect(exitNow)
      #expect(moreWorkToDo)
    }

    waitUntil { installed.value != nil && chunks.value >= 100 }
    let (runLoop, source) = installed.value!
    source.signal()
    runLoop.wakeUp()
    worker.join()
    #expect(chunks.value < maximumChunks)
  }

  @Test func exitRequestThroughTheThreadsModule() {
    let chunks = Box(0)
    let worker = runLoopExampleSpawn {
      let runLoop = RunLoop.current
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      var done = 0
      while !Thread.current.isExitRequested {
        done += 1
        chunks.value = done
        runLoop.run(before: .now)
      }
      // A run after the request ends at once: the request ends the thread's runs, those in
      // progress and those it starts later.
      #expect(runLoop.run(mode: .default, timeout: .zero) == .stopped)
    }
    waitUntil { chunks.value >= 100 }
    worker.thread.requestExit()
    worker.join()
    #expect(chunks.value >= 100)
  }
}
