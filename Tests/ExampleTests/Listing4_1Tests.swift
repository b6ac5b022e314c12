import Sync
import Testing

/// Listing 4-1: atomic test-and-set and compare-and-swap on a 32-bit value, with the guide's
/// bit numbering (bit 0 is the high bit of the first byte).
@Suite("Listing 4-1: atomic operations", .timeLimit(.minutes(3)))
struct Listing4_1Tests {
  @Test("test-and-set gives 128, 1, 256; compare-and-swap gives 512, then still 512")
  func listing() {
    let theValue = AtomicInteger<Int32>(0)
    theValue.testAndSet(bit: 0, ordering: .full)
    // theValue is now 128.
    #expect(theValue.load(ordering: .acquiring) == 128)

    theValue.store(0, ordering: .releasing)
    theValue.testAndSet(bit: 7, ordering: .full)
    // theValue is now 1.
    #expect(theValue.load(ordering: .acquiring) == 1)

    theValue.store(0, ordering: .releasing)
    theValue.testAndSet(bit: 15, ordering: .full)
    // theValue is now 256.
    #expect(theValue.load(ordering: .acquiring) == 256)

    theValue.compareAndSwap(expected: 256, desired: 512, ordering: .full)
    // theValue is now 512.
    #expect(theValue.load(ordering: .acquiring) == 512)

    theValue.compareAndSwap(expected: 256, desired: 1024, ordering: .full)
    // theValue is still 512.
    #expect(theValue.load(ordering: .acquiring) == 512)
  }
}
