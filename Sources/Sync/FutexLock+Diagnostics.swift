extension FutexLock {
  // The hooked and diagnosed paths of the lock operations, for the lock types that carry a
  // `LockIdentity`. A lock type's inlined operation checks `LockDiagnostics.hooksMayRun`
  // (one relaxed load, a test, a branch) and, when it is true, calls its own outlined
  // method, which calls one of the `...Hooked` functions here: they decide whether this
  // operation is diagnosed (reading the environment first if nobody has) and run either
  // the plain operation or the diagnosed one.

  /// The hooked path of a blocking acquisition: ``acquireDiagnosed(_:before:spinRounds:quickPolls:typeName:)``
  /// when ``LockDiagnostics/diagnosesAcquisition`` says so, else the plain acquisition.
  @inline(__always)
  func acquireHooked(
    _ identity: LockIdentity, before deadline: MonotonicInstant, spinRounds: Int, quickPolls: Int = 0,
    typeName: String
  ) -> Bool {
    if LockDiagnostics.diagnosesAcquisition {
      return acquireDiagnosed(
        identity, before: deadline, spinRounds: spinRounds, quickPolls: quickPolls, typeName: typeName)
    }
    return acquire(before: deadline, spinRounds: spinRounds, quickPolls: quickPolls, typeName: typeName)
  }

  /// The hooked path of `tryLock()`'s attempt (``tryAcquireFree()``): diagnosed while a
  /// lock detector is on (contention statistics do not count `tryLock`).
  @inline(__always)
  func tryAcquireHooked(_ identity: LockIdentity) -> Bool {
    LockDiagnostics.tracksHeldLocks ? tryAcquireDiagnosed(identity) : tryAcquireFree()
  }

  /// The hooked path of a release: ``releaseDiagnosed(_:checkOwner:typeName:)`` when
  /// ``LockDiagnostics/diagnosesRelease`` says so, else the plain release.
  @inline(__always)
  func releaseHooked(_ identity: LockIdentity, checkOwner: Bool, typeName: String) {
    if LockDiagnostics.diagnosesRelease {
      releaseDiagnosed(identity, checkOwner: checkOwner, typeName: typeName)
    } else {
      release(checkOwner: checkOwner, typeName: typeName)
    }
  }

  /// ``acquire(before:spinRounds:quickPolls:typeName:)`` through ``LockDiagnostics/acquire(_:before:access:holder:tryAcquire:acquire:)``.
  @usableFromInline
  @inline(never)
  func acquireDiagnosed(
    _ identity: LockIdentity, before deadline: MonotonicInstant, spinRounds: Int, quickPolls: Int = 0,
    typeName: String
  ) -> Bool {
    LockDiagnostics.acquire(
      identity, before: deadline, holder: { ownerTag }, tryAcquire: { tryAcquire() },
      acquire: { acquire(before: deadline, spinRounds: spinRounds, quickPolls: quickPolls, typeName: typeName) })
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
