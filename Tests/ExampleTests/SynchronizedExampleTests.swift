import Sync
import TestSupport
import Testing

/// The guide's `@synchronized(anObj) { ... }`: any object is the lock key; everything in
/// the braces is protected; different objects do not block each other; the block is left
/// safely when it throws.
@Suite("@synchronized: object-keyed critical sections", .timeLimit(.minutes(3)))
struct SynchronizedExampleTests {
  final class Inventory: @unchecked Sendable {
    var items: [String: Int] = [:]  // protected by synchronized(self)

    func myMethod(adding name: String) {
      synchronized(self) {
        // Everything between the braces is protected by synchronized(self).
        items[name, default: 0] += 1
      }
    }

    struct OutOfStock: Error {}

    func take(_ name: String) throws(OutOfStock) {
      try synchronized(self) { () throws(OutOfStock) in
        guard let count = items[name], count > 0 else { throw OutOfStock() }
        items[name] = count - 1
      }
    }
  }

  @Test("concurrent updates keyed on the same object are never lost")
  func listing() {
    let inventory = Inventory()
    runThreads(4) { index in
      for _ in 0..<1_000 { inventory.myMethod(adding: index % 2 == 0 ? "apple" : "pear") }
    }
    #expect(inventory.items == ["apple": 2_000, "pear": 2_000])
  }

  @Test("an error thrown in the block leaves the section, so the next caller gets in")
  func errorsLeaveTheSection() {
    let inventory = Inventory()
    #expect(throws: Inventory.OutOfStock.self) { try inventory.take("plum") }
    inventory.myMethod(adding: "plum")
    runThreads(1) { _ in
      try? inventory.take("plum")
    }
    #expect(inventory.items["plum"] == 0)
  }
}
