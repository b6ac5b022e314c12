// Which sanitizer runtime the test process runs with, for every test target (TestSupport
// re-exports these). Plain Glibc, like the helpers beside them.

#if canImport(Glibc)
  import Glibc
#endif

/// Whether the test process runs with ThreadSanitizer's runtime (stress loops scale down:
/// it slows every thread hand-off about tenfold).
public let isRunningUnderThreadSanitizer = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_init") != nil

/// Whether the test process runs with AddressSanitizer's runtime (stress loops scale down;
/// glibc's allocation statistics do not see ASan's allocator).
public let isRunningUnderAddressSanitizer = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__asan_init") != nil

/// Whether a sanitizer slows the process down (ThreadSanitizer or AddressSanitizer).
public var isRunningUnderSanitizer: Bool { isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer }
