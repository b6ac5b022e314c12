// The two names Frame.swift and PortName.swift use from the rest of the RunLoop module,
// reduced to what they need, so the fuzz target compiles those two files on their own
// (no Sync, no C shims): a change that makes them need more fails `scripts/fuzz` at once.

enum PortStatus {
  case invalid
}

struct PortError: Error {
  let status: PortStatus
  let detail: String

  init(_ status: PortStatus, detail: String) {
    self.status = status
    self.detail = detail
  }
}
