/// Memory shared between processes, mapped for you: the place to put a
/// ``SharedMemoryLock``, a ``SharedMemoryCondition`` and the data they protect.
///
/// Two kinds:
/// - ``init(sharedAnonymousByteCount:)``: fresh zero-filled memory that every child process
///   forked after it shares (`mmap` with `MAP_SHARED | MAP_ANONYMOUS`). The simplest choice
///   for a parent and its workers.
/// - ``init(mapping:byteCount:)``: the start of a file or a `memfd` you opened read-write
///   (size it with `ftruncate` first), shared with every process that maps the same file or
///   receives the `memfd` (over a Unix socket, or by inheritance).
///
/// The mapping is removed when the region is deinitialized. Keep the region alive while
/// any thread of this process holds or waits on a lock in it (see ``SharedMemoryLock`` for
/// what an unmapping under a held lock does). A `fork()` child keeps the mapping even after
/// the parent's region object is gone.
///
/// Lay the memory out yourself, putting each lock and condition at an offset that is a
/// multiple of its ``SharedMemoryLock/alignment`` (every process must agree on the layout):
///
/// ```swift
/// let region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
/// let lock = try SharedMemoryLock.initialize(at: region.address)
/// let condition = SharedMemoryCondition.initialize(at: region.address + SharedMemoryLock.byteCount)
/// let data = region.address + SharedMemoryLock.byteCount + SharedMemoryCondition.byteCount
/// ```
///
/// The corresponding C calls are `mmap` and `munmap`.
public final class SharedMemoryRegion: @unchecked Sendable {
  // @unchecked: the object only holds the mapping's address and size, both immutable.

  /// The start of the mapping (page-aligned).
  public let address: UnsafeMutableRawPointer

  /// The mapping's size in bytes.
  public let byteCount: Int

  /// Maps `byteCount` bytes of zero-filled memory shared with every child process forked
  /// after this call.
  ///
  /// Stops the process if `byteCount` is not positive.
  ///
  /// - Throws: ``SystemCallError`` for `mmap` (`.noMemory`: no memory or too many
  ///   mappings).
  public init(sharedAnonymousByteCount byteCount: Int) throws(SystemCallError) {
    if byteCount <= 0 { reportMisuse("SharedMemoryRegion", "a byte count of \(byteCount) (it must be positive)") }
    self.address = try SharedMapping.map(byteCount: byteCount, descriptor: nil)
    self.byteCount = byteCount
  }

  /// Maps the first `byteCount` bytes of the file or `memfd` open read-write as
  /// `descriptor`, shared with every process that maps it. The descriptor may be closed
  /// afterwards; the mapping stays. Touching bytes beyond the file's end raises `SIGBUS`,
  /// so size the file first (`ftruncate`).
  ///
  /// Stops the process if `byteCount` is not positive.
  ///
  /// - Throws: ``SystemCallError`` for `mmap` (`.badFileDescriptor`, `.permissionDenied`
  ///   when the descriptor is not open for reading and writing, `.noMemory`).
  public init(mapping descriptor: Int32, byteCount: Int) throws(SystemCallError) {
    if byteCount <= 0 { reportMisuse("SharedMemoryRegion", "a byte count of \(byteCount) (it must be positive)") }
    self.address = try SharedMapping.map(byteCount: byteCount, descriptor: descriptor)
    self.byteCount = byteCount
  }

  deinit {
    SharedMapping.unmap(address, byteCount: byteCount)
  }
}
