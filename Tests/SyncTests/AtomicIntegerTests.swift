import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("AtomicInteger", .timeLimit(.minutes(3)))
struct AtomicIntegerTests {
  @Test("returned values: fetch forms return the old value, the guide's forms the new one")
  func returnedValues() {
    let value = AtomicInteger<Int32>(10)
    #expect(value.fetchAdd(5, ordering: .full) == 10)
    #expect(value.add(5, ordering: .full) == 20)
    #expect(value.increment(ordering: .full) == 21)
    #expect(value.decrement(ordering: .full) == 20)
    #expect(value.fetchSubtract(4, ordering: .relaxed) == 20)
    #expect(value.subtract(6, ordering: .relaxed) == 10)
    #expect(value.fetchOr(0b0101, ordering: .acquiring) == 10)  // 0b1010 | 0b0101
    #expect(value.load(ordering: .relaxed) == 0b1111)
    #expect(value.and(0b0110, ordering: .releasing) == 0b0110)
    #expect(value.xor(0b0011, ordering: .full) == 0b0101)
    #expect(value.fetchXor(0b0101, ordering: .full) == 0b0101)
    #expect(value.fetchAnd(0, ordering: .full) == 0)
    #expect(value.or(7, ordering: .full) == 7)
  }

  @Test("compare-and-swap swaps only on a match and reports it")
  func compareAndSwap() {
    let value = AtomicInteger<Int64>(256)
    #expect(value.compareAndSwap(expected: 256, desired: 512, ordering: .full))
    #expect(!value.compareAndSwap(expected: 256, desired: 1024, ordering: .full))
    #expect(value.load(ordering: .acquiring) == 512)
    let (exchanged, original) = value.compareExchange(expected: 1, desired: 2, ordering: .full)
    #expect(!exchanged)
    #expect(original == 512)
    let second = value.compareExchange(expected: 512, desired: -3, ordering: .acquiring)
    #expect(second.exchanged && second.original == 512)
    #expect(value.exchange(9, ordering: .full) == -3)
    #expect(value.load(ordering: .full) == 9)
  }

  @Test("arithmetic wraps around like the C operations")
  func wrapping() {
    let unsigned = AtomicInteger<UInt32>(UInt32.max)
    #expect(unsigned.increment(ordering: .full) == 0)
    #expect(unsigned.decrement(ordering: .full) == UInt32.max)
    let signed = AtomicInteger<Int>(Int.max)
    #expect(signed.add(1, ordering: .full) == Int.min)
    let word = AtomicInteger<UInt>(0)
    #expect(word.subtract(1, ordering: .full) == UInt.max)
    let wide = AtomicInteger<UInt64>(1 << 63)
    #expect(wide.fetchOr(1, ordering: .relaxed) == 1 << 63)
    #expect(wide.load(ordering: .relaxed) == (UInt64(1) << 63) | 1)
  }

  @Test("stores are seen by loads of every ordering")
  func storeAndLoad() {
    let value = AtomicInteger<UInt64>(0)
    for ordering in [MemoryOrder.Store.relaxed, .releasing, .full] {
      value.store(42, ordering: ordering)
      #expect(value.load(ordering: .relaxed) == 42)
      #expect(value.load(ordering: .acquiring) == 42)
      #expect(value.load(ordering: .full) == 42)
      value.store(0, ordering: .relaxed)
    }
  }

  @Test("guide bit numbering: bit n is 0x80 >> (n & 7) in byte n >> 3")
  func guideBitNumbering() {
    #expect(AtomicInteger<Int32>.guideBitMask(0) == 128)
    #expect(AtomicInteger<Int32>.guideBitMask(7) == 1)
    #expect(AtomicInteger<Int32>.guideBitMask(8) == 1 << 15)
    #expect(AtomicInteger<Int32>.guideBitMask(15) == 256)
    #expect(AtomicInteger<Int32>.guideBitMask(24) == Int32(bitPattern: 0x8000_0000))
    #expect(AtomicInteger<UInt64>.guideBitMask(63) == 1 << 56)
  }

  @Test("test-and-set and test-and-clear return the bit's previous state")
  func testAndSetClear() {
    let value = AtomicInteger<UInt32>(0)
    #expect(value.testAndSet(bit: 3, ordering: .full) == false)
    #expect(value.load(ordering: .relaxed) == 0x10)
    #expect(value.testAndSet(bit: 3, ordering: .full) == true)
    #expect(value.testAndClear(bit: 3, ordering: .full) == true)
    #expect(value.testAndClear(bit: 3, ordering: .full) == false)
    #expect(value.load(ordering: .relaxed) == 0)
  }

  @Test("8- and 16-bit values wrap at their own width, signed ones through their bit pattern")
  func smallWidths() {
    let byte = AtomicInteger<UInt8>(255)
    #expect(byte.increment(ordering: .full) == 0)
    #expect(byte.fetchSubtract(1, ordering: .relaxed) == 0)
    #expect(byte.load(ordering: .acquiring) == 255)
    #expect(byte.and(0x0F, ordering: .releasing) == 0x0F)
    #expect(byte.fetchXor(0xFF, ordering: .full) == 0x0F)
    #expect(byte.load(ordering: .relaxed) == 0xF0)
    let signedByte = AtomicInteger<Int8>(127)
    #expect(signedByte.add(1, ordering: .full) == -128)
    #expect(signedByte.compareExchange(expected: -128, desired: -1, ordering: .acquiring) == (true, -128))
    #expect(signedByte.compareExchange(expected: 0, desired: 5, ordering: .relaxed) == (false, -1))
    #expect(signedByte.exchange(-7, ordering: .full) == -1)
    #expect(signedByte.compareAndSwap(expected: -7, desired: 3, ordering: .full))
    let half = AtomicInteger<UInt16>(0xFFFF)
    #expect(half.add(2, ordering: .full) == 1)
    #expect(half.fetchOr(0x8000, ordering: .relaxed) == 1)
    half.store(0x1234, ordering: .releasing)
    #expect(half.load(ordering: .full) == 0x1234)
    let signedHalf = AtomicInteger<Int16>(Int16.min)
    #expect(signedHalf.decrement(ordering: .full) == Int16.max)
    #expect(signedHalf.testAndSet(bit: 8, ordering: .full) == false)  // bit 8 is 0x8000, the sign
    #expect(signedHalf.load(ordering: .relaxed) == -1)
    #expect(AtomicInteger<Int16>.guideBitMask(8) == Int16(bitPattern: 0x8000))
    #expect(AtomicInteger<UInt8>.guideBitMask(0) == 0x80)
  }

  @Test("concurrent increments of 8- and 16-bit counters lose nothing")
  func concurrentSmallIncrements() {
    let byte = AtomicInteger<UInt8>(0)
    let half = AtomicInteger<Int16>(0)
    runConcurrently(4) { _ in
      for _ in 0..<5_000 {
        byte.increment(ordering: .relaxed)
        half.fetchAdd(1, ordering: .full)
      }
    }
    #expect(byte.load(ordering: .acquiring) == UInt8(truncatingIfNeeded: 20_000))
    #expect(half.load(ordering: .acquiring) == 20_000)
  }

  @Test("a conformance wider than 64 bits is reported when the atomic is created", .runsExitTests)
  func widerThan64Bits() async {
    await #expect(processExitsWith: .failure) {
      _ = AtomicInteger<UInt128>(0)
    }
  }

  @Test("a bit number outside the value is reported", .runsExitTests)
  func bitOutOfRange() async {
    await #expect(processExitsWith: .failure) {
      _ = AtomicInteger<UInt32>(0).testAndSet(bit: 32, ordering: .full)
    }
    await #expect(processExitsWith: .failure) {
      _ = AtomicInteger<Int64>(0).testAndClear(bit: -1, ordering: .full)
    }
  }

  @Test("concurrent increments from 4 threads lose nothing")
  func concurrentIncrements() {
    let counter = AtomicInteger<Int>(0)
    let bits = AtomicInteger<UInt64>(0)
    runConcurrently(4) { index in
      for _ in 0..<25_000 { counter.increment(ordering: .relaxed) }
      bits.testAndSet(bit: index, ordering: .full)
    }
    #expect(counter.load(ordering: .acquiring) == 100_000)
    #expect(bits.load(ordering: .relaxed) == 0x80 | 0x40 | 0x20 | 0x10)
  }

  @Test("compare-and-swap loops from 4 threads add up exactly")
  func concurrentCompareAndSwap() {
    let counter = AtomicInteger<UInt32>(0)
    runConcurrently(4) { _ in
      for _ in 0..<10_000 {
        var current = counter.load(ordering: .relaxed)
        while true {
          let (exchanged, seen) = counter.compareExchange(expected: current, desired: current &+ 1, ordering: .full)
          if exchanged { break }
          current = seen
        }
      }
    }
    #expect(counter.load(ordering: .acquiring) == 40_000)
  }

  @Test("release/acquire publishes plain writes, with standalone barriers too")
  func publication() {
    final class Payload: @unchecked Sendable { var value = 0 }
    let payload = Payload()
    let ready = AtomicInteger<UInt32>(0)
    let seen = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      if index == 0 {
        payload.value = 7
        MemoryBarrier.release()
        ready.store(1, ordering: .releasing)
      } else {
        while ready.load(ordering: .acquiring) == 0 { sched_yield() }
        MemoryBarrier.acquire()
        MemoryBarrier.full()
        seen.store(payload.value, ordering: .relaxed)
      }
    }
    #expect(seen.load(ordering: .relaxed) == 7)
  }
}

extension UInt128: AtomicIntegerValue {}
