import ProcessTestSupport
import Sync
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Counts its deinitializations into a shared counter.
final class ReleaseProbe: Sendable {
  let released: AtomicInteger<Int>
  init(_ released: AtomicInteger<Int>) { self.released = released }
  deinit { _ = released.increment(ordering: .full) }
}

@Suite("Thread dictionary", .timeLimit(.minutes(3)))
struct ThreadDictionaryTests {
  @Test func eachThreadHasItsOwnDictionary() throws {
    Thread.current.threadDictionary["owner"] = "test"
    let results = try spawnAll(0..<3) { index -> (String?, Int?) in
      let before = Thread.current.threadDictionary["owner", as: String.self]
      Thread.current.threadDictionary["index"] = index
      return (before, Thread.current.threadDictionary["index", as: Int.self])
    }
    #expect(results.map(\.0) == [nil, nil, nil])
    #expect(results.map(\.1) == [0, 1, 2])
    #expect(Thread.current.threadDictionary["owner", as: String.self] == "test")
    #expect(Thread.current.threadDictionary["index"] == nil)
    Thread.current.threadDictionary["owner"] = nil
    #expect(Thread.current.threadDictionary["owner"] == nil)
  }

  @Test func valuesAreReleasedWhenTheThreadEnds() throws {
    let released = AtomicInteger<Int>(0)
    let worker = try Thread.spawn { () -> Int in
      Thread.current.threadDictionary["probe"] = ReleaseProbe(released)
      return Thread.current.threadDictionary.count
    }
    let thread = worker.thread
    #expect(worker.join() == 1)
    #expect(released.load(ordering: .full) == 1)
    #expect(thread.threadDictionary.count == 0)
  }

  @Test("a value added by a value's deinitializer while the dictionary is emptied at thread end goes too")
  func valueAddedWhileEmptyingAtThreadEndIsReleased() throws {
    let released = AtomicInteger<Int>(0)
    let worker = try Thread.spawn {
      Thread.current.threadDictionary["chain"] = AddsAValueWhenReleased(depth: 2, released: released)
    }
    let thread = worker.thread
    worker.join()
    #expect(released.load(ordering: .full) == 2, "the value added while emptying outlived the thread")
    #expect(thread.threadDictionary.count == 0)
  }

  @Test("the dictionary is emptied at thread end in at most four rounds; what the last one adds stays")
  func emptyingAtThreadEndIsBounded() throws {
    let released = AtomicInteger<Int>(0)
    let worker = try Thread.spawn {
      Thread.current.threadDictionary["chain"] = AddsAValueWhenReleased(depth: 10, released: released)
    }
    let thread = worker.thread
    worker.join()
    // Four rounds (POSIX's PTHREAD_DESTRUCTOR_ITERATIONS), as ThreadDictionary documents.
    #expect(released.load(ordering: .full) == 4)
    #expect(thread.threadDictionary.count == 1)
    thread.threadDictionary.removeAll()
  }

  @Test func anotherThreadCanWriteThroughTheThreadObject() throws {
    let started = TestLatch()
    let worker = try Thread.spawn { () -> Bool in
      Thread.current.threadDictionary["stop"] = false
      started.open()
      while !(Thread.current.threadDictionary["stop", as: Bool.self] ?? false) { Thread.yield() }
      return true
    }
    started.wait()
    worker.thread.threadDictionary["stop"] = true
    let stopped = worker.join()
    #expect(stopped)
  }

  @Test func updateIsAtomic() throws {
    Thread.current.threadDictionary["counter"] = 0
    let target = Thread.current
    _ = try spawnAll(0..<4) { _ in
      for _ in 0..<1000 {
        target.threadDictionary.update { $0["counter"] = (($0["counter"] as? Int) ?? 0) + 1 }
      }
    }
    #expect(Thread.current.threadDictionary["counter", as: Int.self] == 4000)
    #expect(Thread.current.threadDictionary.keys.contains("counter"))
    Thread.current.threadDictionary.removeAll()
  }

  @Test(.runsExitTests) func aValueRemovedInUpdateIsReleasedAfterTheDictionarysLock() async {
    // An exit test: released under the lock, the value's deinitializer reading the same
    // dictionary stops the process as a self-deadlock.
    await #expect(processExitsWith: .success) {
      let dictionary = Thread.current.threadDictionary
      dictionary["value"] = ReadsTheDictionaryWhenReleased()
      dictionary.update { $0["value"] = nil }
      exit(0)
    }
  }
}

/// Counts its release and, while `depth` is above 1, adds a value of `depth - 1` to its
/// thread's dictionary as it goes (a value whose deinitializer registers another one).
final class AddsAValueWhenReleased: Sendable {
  let depth: Int
  let released: AtomicInteger<Int>
  init(depth: Int, released: AtomicInteger<Int>) {
    self.depth = depth
    self.released = released
  }
  deinit {
    _ = released.increment(ordering: .full)
    if depth > 1 {
      Thread.current.threadDictionary["chain-\(depth - 1)"] = AddsAValueWhenReleased(
        depth: depth - 1, released: released)
    }
  }
}

/// Reads its thread's dictionary when released (a value that unregisters itself).
final class ReadsTheDictionaryWhenReleased: Sendable {
  deinit { _ = Thread.current.threadDictionary["other"] }
}

@Suite("ThreadLocal", .timeLimit(.minutes(3)))
struct ThreadLocalTests {
  @Test func aFirstWriteSetsTheCopyWithoutCallingInitialValue() throws {
    let made = AtomicInteger<Int>(0)
    let local = ThreadLocal<Int>(initialValue: {
      _ = made.increment(ordering: .relaxed)
      return 10
    })
    let results = try spawnAll(0..<2) { index -> Int in
      if index == 0 { local.value = 5 }
      return local.value
    }
    #expect(results.sorted() == [5, 10])
    #expect(made.load(ordering: .relaxed) == 1, "initialValue ran for a copy a write replaced at once")
  }

  @Test func eachThreadStartsFromTheInitialValue() throws {
    let local = ThreadLocal<Int>(initialValue: { 10 })
    local.value = 99
    let results = try spawnAll(0..<3) { index -> (Bool, Int, Int) in
      let had = local.hasValue
      let initial = local.value
      local.value += index
      return (had, initial, local.value)
    }
    #expect(results.map(\.0) == [false, false, false])
    #expect(results.map(\.1) == [10, 10, 10])
    #expect(results.map(\.2) == [10, 11, 12])
    #expect(local.value == 99)
  }

  @Test func destructorRunsAtThreadExitWithTheFinalValue() throws {
    let finals = TestBox<[Int]>([])
    let local = ThreadLocal<Int>(initialValue: { 0 }, destructor: { value in finals.update { $0.append(value) } })
    let worker = try Thread.spawn {
      local.withValue { $0 += 5 }
      local.value *= 2
    }
    worker.join()
    #expect(finals.value == [10])
  }

  @Test func destructorDoesNotRunForAThreadThatNeverTouchedIt() throws {
    let count = AtomicInteger<Int>(0)
    let local = ThreadLocal<Int>(initialValue: { 0 }, destructor: { _ in _ = count.increment(ordering: .full) })
    try Thread.spawn {}.join()
    try Thread.spawn { _ = local.value }.join()
    #expect(count.load(ordering: .full) == 1)
  }

  @Test func removeValueStartsOverWithoutTheDestructor() throws {
    let count = AtomicInteger<Int>(0)
    let local = ThreadLocal<Int>(initialValue: { 1 }, destructor: { _ in _ = count.increment(ordering: .full) })
    let worker = try Thread.spawn { () -> Int in
      local.value = 7
      local.removeValue()
      return local.value
    }
    #expect(worker.join() == 1)
    #expect(count.load(ordering: .full) == 1)  // only the second copy, at exit
  }

  @Test func anInitialValueThatAssignsItsOwnThreadLocalLeaksNothing() throws {
    // The assigned copy is replaced by the returned one (as a later assignment would), and
    // released; the returned one reaches the destructor at thread exit.
    let released = AtomicInteger<Int>(0)
    let destroyed = TestBox<[Int]>([])
    final class Holder: @unchecked Sendable { var local: ThreadLocal<(Int, ReleaseProbe)>? }
    let holder = Holder()
    // The initial value's closure holds the holder, which holds the thread-local.
    defer { holder.local = nil }
    holder.local = ThreadLocal<(Int, ReleaseProbe)>(
      initialValue: {
        holder.local!.value = (1, ReleaseProbe(released))
        return (2, ReleaseProbe(released))
      },
      destructor: { value in destroyed.update { $0.append(value.0) } })
    let worker = try Thread.spawn { holder.local!.value.0 }
    #expect(worker.join() == 2)
    #expect(destroyed.value == [2])
    #expect(released.load(ordering: .full) == 2)
  }

  @Test func nonSendableValuesStayOnTheirThread() throws {
    final class Counter { var value = 0 }
    let local = ThreadLocal<Counter>(initialValue: { Counter() })
    let worker = try Thread.spawn { () -> Int in
      local.value.value += 3
      return local.value.value
    }
    #expect(worker.join() == 3)
    #expect(local.value.value == 0)
  }

  @Test("using the thread-local again inside withValue stops the process (exclusive access)", .runsExitTests)
  func reentrantWithValueStops() async {
    await #expect(processExitsWith: .failure) {
      let local = ThreadLocal<Int>(initialValue: { 1 })
      local.withValue { value in value += local.value }
    }
  }

  @Test("a value replaced through value is released after the new one is in place, so its deinit may read it")
  func replacedValueDeinitReadsTheNewValue() {
    final class Probe {
      let onDeinit: () -> Void
      init(_ onDeinit: @escaping () -> Void) { self.onDeinit = onDeinit }
      deinit { onDeinit() }
    }
    let local = ThreadLocal<Probe?>(initialValue: { nil })
    var seen: Bool? = nil
    local.value = Probe { seen = local.value == nil }
    local.value = nil
    #expect(seen == true)
  }
}
