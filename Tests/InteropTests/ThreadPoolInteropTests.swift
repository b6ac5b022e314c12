// Threads' pool beside Foundation, Dispatch and Synchronization: every public ThreadPool
// name resolves in a file where Foundation's `Thread` is visible too.
import Dispatch
import Foundation
import Sync
import Synchronization
import Testing
import Threads

@Suite("ThreadPool beside Foundation", .timeLimit(.minutes(3)))
struct ThreadPoolInteropTests {
  @Test("every ThreadPool public API is usable with Foundation imported")
  func poolTypes() async throws {
    var configuration = ThreadPool.Configuration()
    configuration.maximumThreads = 2
    configuration.threadConfiguration = ThreadConfiguration()
    let pool = ThreadPool(name: "interop-pool", configuration: configuration)
    let name = try await pool.run { Threads::Thread.current.name }
    #expect(name == "interop-pool-0")
    let statistics: ThreadPool.Statistics = pool.statistics
    #expect(statistics.threads <= 2)
    await pool.shutDown()
    do throws(ThreadPoolError<Never>) {
      _ = try await pool.run { 1 }
    } catch {
      #expect(error.cancellationError == nil)
      #expect(error.failure == nil)
    }
    #expect(ThreadPool.usableProcessorCount >= 1)
    #expect(ThreadPool.defaultMaximumThreads >= 16)
    #expect(try await ThreadPool.shared.run { 2 } == 2)
  }
}
