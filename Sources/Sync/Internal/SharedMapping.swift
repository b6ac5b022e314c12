#if canImport(Glibc)
  import Glibc
#endif

/// The `mmap`/`munmap` calls behind ``SharedMemoryRegion``.
enum SharedMapping {
  /// Maps `byteCount` bytes read-write and shared (`MAP_SHARED`): of `descriptor` from
  /// offset 0, or anonymous memory when `descriptor` is nil.
  static func map(byteCount: Int, descriptor: Int32?) throws(SystemCallError) -> UnsafeMutableRawPointer {
    let flags = descriptor == nil ? MAP_SHARED | MAP_ANONYMOUS : MAP_SHARED
    let address = mmap(nil, byteCount, PROT_READ | PROT_WRITE, flags, descriptor ?? -1, 0)
    guard let address, address != MAP_FAILED else {
      throw SystemCallError(call: "mmap", code: SystemErrorCode(rawValue: errno))
    }
    return address
  }

  /// Unmaps what `map` returned; a failure means the address or size is wrong (a bug).
  static func unmap(_ address: UnsafeMutableRawPointer, byteCount: Int) {
    mustSucceed("SharedMemoryRegion") { () throws(SystemCallError) in
      _ = try systemCall("munmap") { munmap(address, byteCount) }
    }
  }
}
