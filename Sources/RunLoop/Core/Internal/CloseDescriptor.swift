import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// Closes a descriptor the toolkit owns. EINTR still closes it on Linux (and must not be
/// retried); EBADF means the toolkit closed it twice, a bug.
func closeDescriptor(_ descriptor: Int32) {
  do throws(SystemCallError) {
    _ = try systemCall("close(\(descriptor))") { close(descriptor) }
  } catch  where error.code == .badFileDescriptor {
    fatalError("\(error): closed twice")
  } catch {
    // EINTR / EIO: the descriptor is released anyway on Linux; nothing to retry.
  }
}
