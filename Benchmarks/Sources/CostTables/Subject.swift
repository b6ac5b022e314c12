// What a row measures: a named subject that is either this toolkit or a peer it is compared
// with. The role is stated where the row is registered, never derived from the name.

/// One measured subject: the name the report prints and whether it is this toolkit.
struct Subject: Hashable, Sendable {
  /// This toolkit ("ours"), or a peer measured beside it (raw pthread, Synchronization,
  /// Foundation, libatomic_ops, the kernel's own mechanism).
  enum Role: String, Hashable, Sendable {
    case toolkit
    case peer
  }

  /// The label in tables, charts and the JSON `subject` field, e.g. "Sync.Lock", "pthread".
  var name: String
  var role: Role

  /// Whether this is this toolkit rather than a peer.
  var isToolkit: Bool { role == .toolkit }

  /// A subject of this toolkit.
  static func toolkit(_ name: String) -> Subject { Subject(name: name, role: .toolkit) }

  /// A peer measured beside this toolkit.
  static func peer(_ name: String) -> Subject { Subject(name: name, role: .peer) }
}
