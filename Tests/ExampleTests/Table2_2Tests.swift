// Table 2-2: setting a thread's stack size before it starts, both ways the guide lists:
// on the thread object before `start` (NSThread `setStackSize:`), and in the attributes
// passed at creation (`pthread_attr_setstacksize`).
import Sync
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

@Suite("Table 2-2: setting the stack size", .timeLimit(.minutes(3)))
struct Table2_2Tests {
  static let requested = 1024 * 1024

  /// The thread-object way: create, set the stack size, then start.
  @Test func onTheThreadObjectBeforeStart() throws {
    let measured = AtomicInteger<Int>(0)
    let finished = AtomicInteger<Int>(0)
    let thread = Thread(name: "table-2-2-object") {
      measured.store(try Thread.currentStackSize().stackSize, ordering: .relaxed)
      finished.store(1, ordering: .releasing)
    }
    thread.configuration.stackSize = Table2_2Tests.requested  // [thread setStackSize:]
    try thread.start()
    while finished.load(ordering: .acquiring) == 0 { Thread.yield() }
    // glibc may reuse a cached stack up to 4x the request, never a smaller one (a sanitizer
    // may enlarge the request a little).
    #expect(measured.load(ordering: .relaxed) >= Table2_2Tests.requested)
    #expect(measured.load(ordering: .relaxed) <= 4 * (Table2_2Tests.requested + 64 * 1024))
  }

  /// The attributes way: a configuration passed to the creating call.
  @Test func inTheAttributesAtCreation() throws {
    var attributes = ThreadConfiguration()
    attributes.stackSize = Table2_2Tests.requested  // pthread_attr_setstacksize
    let size = try Thread.spawn(name: "table-2-2-attributes", configuration: attributes) {
      try Thread.currentStackSize().stackSize
    }.join()
    #expect(size >= Table2_2Tests.requested && size <= 4 * (Table2_2Tests.requested + 64 * 1024))
  }

  /// The guide's rules: at least 16 KiB (a smaller size is refused, not clamped), and a page
  /// multiple (the toolkit rounds up).
  @Test func sizeRules() throws {
    var attributes = ThreadConfiguration()
    attributes.stackSize = 8 * 1024
    let minimum = ThreadConfiguration.minimumStackSize
    #expect(throws: ThreadConfigurationError.stackSizeTooSmall(8 * 1024, minimum: minimum)) {
      try attributes.validate()
    }
    attributes.stackSize = 64 * 1024 + 1
    let size = try Thread.spawn(configuration: attributes) { try Thread.currentStackSize().stackSize }.join()
    // Rounded up to the next page, never down (a sanitizer may add more on its own).
    #expect(size >= 64 * 1024 + ThreadConfiguration.pageSize)
  }
}
