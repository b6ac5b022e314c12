import Glibc
@testable import Sync
import Testing

@Suite("synchronized(obj)", .timeLimit(.minutes(2)))
struct SynchronizedTests {
  final class Account: @unchecked Sendable {
    var balance = 0
  }

  @Test("excludes concurrent sections on the same object: exact count")
  func exclusion() {
    let account = Account()
    runConcurrently(4) { _ in
      for _ in 0..<10_000 {
        synchronized(account) { account.balance += 1 }
      }
    }
    #expect(account.balance == 40_000)
  }

  @Test("is recursive on the same thread")
  func recursive() {
    let account = Account()
    func deposit(_ depth: Int) {
      synchronized(account) {
        account.balance += 1
        if depth > 0 { deposit(depth - 1) }
      }
    }
    deposit(5)
    #expect(account.balance == 6)
  }

  @Test("returns the body's value and releases the lock when the body throws")
  func throwsAndReturns() {
    struct Failure: Error {}
    let account = Account()
    #expect(synchronized(account) { 5 } == 5)
    #expect(throws: Failure.self) {
      try synchronized(account) { () throws(Failure) -> Void in throw Failure() }
    }
    // If the section were still held, another thread could not enter it.
    let entered = GuardedValue(false)
    runConcurrently(1) { _ in
      synchronized(account) { entered.value = true }
    }
    #expect(entered.value)
  }

  @Test("different objects on different stripes do not block each other")
  func differentObjects() {
    // Pick a second object whose stripe differs from the first's (almost any object).
    let first = Account()
    var candidates = [Account()]
    while SynchronizedStripes.stripe(for: first).state == SynchronizedStripes.stripe(for: candidates.last!).state {
      candidates.append(Account())
    }
    let second = candidates.last!
    let entered = Latch(count: 1)
    let sawEntry = GuardedValue(false)
    synchronized(first) {
      runConcurrently(1) { _ in
        synchronized(second) { entered.countDown() }
      }
      sawEntry.value = entered.wait(timeout: .seconds(30))
    }
    #expect(sawEntry.value)
  }

  @Test("objects sharing a stripe serialize each other (the documented trade-off), safely")
  func sharedStripe() {
    let first = Account()
    var candidates = [Account()]
    while SynchronizedStripes.stripe(for: first).state != SynchronizedStripes.stripe(for: candidates.last!).state {
      candidates.append(Account())
    }
    let second = candidates.last!
    // Same thread: nesting two colliding objects is fine (the stripes are recursive).
    let value = synchronized(first) { synchronized(second) { 1 } }
    #expect(value == 1)
    // Other thread: it cannot enter while this thread holds the shared stripe.
    let probe = GuardedValue(true)
    synchronized(first) {
      runConcurrently(1) { _ in
        let stripe = SynchronizedStripes.stripe(for: second)
        probe.value = stripe.tryAcquire()
        if probe.value { stripe.release(checkOwner: false, typeName: "test") }
      }
    }
    #expect(!probe.value)
  }
}
