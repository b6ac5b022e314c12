/// Identifies a handler added with ``Thread/addExitRequestHandler(_:)``, for removing it with
/// ``Thread/removeExitRequestHandler(_:)``.
public struct ExitRequestHandlerToken: Hashable, Sendable {
  let value: UInt64
}
