extension FutexLock {
  // The diagnosed paths of the lock operations, for the lock types that carry a
  // `LockIdentity`: each runs only when `LockDiagnostics`' inlined check says so, out of line, so the
  // plain path keeps its inlined fast path behind one relaxed load and a branch.

  /// ``acquire(before:spins:typeName:)`` through ``LockDiagnostics/acquire(_:before:holder:tryAcquire:acquire:)``.
  @usableFromInline
  @inline(never)
  func acquireDiagnosed(
    _ identity: LockIdentity, before deadline: MonotonicInstant, spins: Int, typeName: String
  ) -> Bool {
    LockDiagnostics.acquire(
      identity, before: deadline, holder: { ownerTag }, tryAcquire: { tryAcquire() },
      acquire: { acquire(before: deadline, spins: spins, typeName: typeName) })
  }

  /// ``tryAcquireFree()`` (the `tryLock()` attempt) through
  /// ``LockDiagnostics/tryAcquire(_:tryAcquire:)``.
  @usableFromInline
  @inline(never)
  func tryAcquireDiagnosed(_ identity: LockIdentity) -> Bool {
    LockDiagnostics.tryAcquire(identity) { tryAcquireFree() }
  }

  /// ``release(checkOwner:typeName:)`` through ``LockDiagnostics/release(_:release:)``.
  @usableFromInline
  @inline(never)
  func releaseDiagnosed(_ identity: LockIdentity, checkOwner: Bool, typeName: String) {
    LockDiagnostics.release(identity) { release(checkOwner: checkOwner, typeName: typeName) }
  }
}
