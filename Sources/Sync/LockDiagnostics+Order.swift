/// An order between two diagnosed locks: `from` was held when `to` was acquired.
struct EdgeKey: Hashable {
  let from: UInt64
  let to: UInt64
}

/// The process's acquired-before graph for ``Diagnostics/Kind/lockOrder``: a node per
/// diagnosed lock that was ever held while another was acquired (by identity, never
/// reused), an edge per order seen, with the thread that first showed it.
///
/// A new order `A -> B` is added only if no path `B -> ... -> A` exists (a breadth-first
/// search from `B`); otherwise it closes a cycle, which is reported once and not added, so
/// the graph stays acyclic and each later check stays a search of what is reachable. Each
/// thread caches the orders it has checked (a direct-mapped table in its ``ThreadState``,
/// stamped with the graph's generation), so a steady state takes no lock here at all. Protected by `word`, a word lock: the detector never
/// watches its own locks, and no user code runs under it.
final class OrderGraph: @unchecked Sendable {
  // @unchecked: `nodes` and `reported` are protected by `word`.
  private let word: UnsafeMutablePointer<UInt32>

  private struct Node {
    let label: String
    /// Orders from this lock: the later lock's id, and the thread that first showed it.
    var out: [UInt64: String] = [:]
    /// Locks with an order to this one (for forgetting).
    var into: Set<UInt64> = []
  }

  private var nodes: [UInt64: Node] = [:]
  /// Orders already reported as closing a cycle (never added to the graph).
  private var reported = Set<EdgeKey>()

  private init() {
    word = .allocate(capacity: 1)
    word.initialize(to: 0)
  }

  /// Never freed: the process's one graph.
  static let shared = OrderGraph()

  /// The most locks a cycle report names.
  static let reportedLocksLimit = 10

  /// Adds the orders "each held lock before `lock`" that `state`'s thread shows, and returns
  /// a finding for the first one that closes a cycle (nil if none does). Called before the
  /// thread blocks on `lock`; reports nothing itself (the caller reports, with no toolkit
  /// lock held).
  func check(acquiring lock: LockIdentity, on state: ThreadState) -> Diagnostics.Finding? {
    // The cache's generation: the graph's plus one, so a slot never filled (generation 0)
    // never matches.
    let generation =
      UInt64.atomicLoad(at: Diagnostics.OptionSlot.graphGeneration.pointer, ordering: .relaxed) &+ 1
    // The steady state: every held lock's order before `lock` is in the thread's cache.
    var firstUnchecked = -1
    for index in 0..<state.heldCount {
      let earlier = state.heldLock(at: index).id
      if earlier != lock.id && !state.hasChecked(from: earlier, to: lock.id, generation: generation) {
        firstUnchecked = index
        break
      }
    }
    if firstUnchecked < 0 { return nil }
    var finding: Diagnostics.Finding? = nil
    WordLock.withLock(word) {
      UInt64.atomicStore(1, at: Diagnostics.OptionSlot.graphUsed.pointer, ordering: .relaxed)
      for index in firstUnchecked..<state.heldCount {
        let earlier = state.heldLock(at: index)
        if earlier.id == lock.id { continue }
        let key = EdgeKey(from: earlier.id, to: lock.id)
        defer { state.markChecked(from: earlier.id, to: lock.id, generation: generation) }
        if nodes[earlier.id]?.out[lock.id] != nil || reported.contains(key) { continue }
        if let path = path(from: lock.id, to: earlier.id) {
          reported.insert(key)
          if finding == nil { finding = cycleFinding(earlier: earlier, lock: lock, path: path, thread: state) }
          continue
        }
        if nodes[earlier.id] == nil { nodes[earlier.id] = Node(label: earlier.label) }
        if nodes[lock.id] == nil { nodes[lock.id] = Node(label: lock.label) }
        nodes[earlier.id]!.out[lock.id] = state.description
        nodes[lock.id]!.into.insert(earlier.id)
      }
    }
    return finding
  }

  /// Forgets a destroyed lock: its node and every order to or from it.
  func forget(_ id: UInt64) {
    WordLock.withLock(word) {
      if !reported.isEmpty { reported = reported.filter { $0.from != id && $0.to != id } }
      guard let node = nodes.removeValue(forKey: id) else { return }
      for later in node.out.keys { nodes[later]?.into.remove(id) }
      for earlier in node.into { nodes[earlier]?.out.removeValue(forKey: id) }
      _ = UInt64.atomicFetchAdd(1, at: Diagnostics.OptionSlot.graphGeneration.pointer, ordering: .relaxed)
    }
  }

  /// How many locks the graph has (tests: forgotten locks leave it).
  func nodeCount() -> Int {
    WordLock.withLock(word) { nodes.count }
  }

  /// A shortest path of orders `start -> ... -> goal` (ids, both ends included), or nil.
  /// Called with `word` held.
  private func path(from start: UInt64, to goal: UInt64) -> [UInt64]? {
    guard let first = nodes[start], !first.out.isEmpty else { return nil }
    var parent: [UInt64: UInt64] = [start: start]
    var frontier = [start]
    while !frontier.isEmpty {
      var next: [UInt64] = []
      for id in frontier {
        for later in nodes[id]?.out.keys ?? [:].keys where parent[later] == nil {
          parent[later] = id
          if later == goal {
            var path = [goal]
            var current = goal
            while current != start {
              current = parent[current]!
              path.append(current)
            }
            return path.reversed()
          }
          next.append(later)
        }
      }
      frontier = next
    }
    return nil
  }

  /// The report of `earlier -> lock` closing the cycle `lock -> ... -> earlier` (`path`).
  /// Called with `word` held (no user code runs).
  private func cycleFinding(earlier: LockIdentity, lock: LockIdentity, path: [UInt64], thread: ThreadState)
    -> Diagnostics.Finding
  {
    // The cycle from `earlier`: earlier -> lock -> ... -> (back to earlier).
    var cycle = [earlier.id]
    cycle.append(contentsOf: path.dropLast())
    func label(_ id: UInt64) -> String {
      if id == lock.id { return "\"\(lock.label)\"" }
      if id == earlier.id { return "\"\(earlier.label)\"" }
      return "\"\(nodes[id]?.label ?? "?")\""
    }
    let limit = OrderGraph.reportedLocksLimit
    var chain = cycle.prefix(limit).map(label).joined(separator: " -> ")
    chain += cycle.count > limit ? " -> ... (\(cycle.count - limit) more)" : " -> \(label(earlier.id))"
    var details = ["\(label(earlier.id)) before \(label(lock.id)): now, on \(thread.description)"]
    for index in 0..<(path.count - 1) where index < limit - 1 {
      let from = path[index]
      let to = path[index + 1]
      let origin = nodes[from]?.out[to] ?? "?"
      details.append("\(label(from)) before \(label(to)): first seen on \(origin)")
    }
    if path.count - 1 > limit - 1 {
      details.append("... \(path.count - limit) more orders")
    }
    details.append(
      "threads taking these locks in these orders can deadlock; take them in one order (tryLock never reports)")
    return Diagnostics.Finding(
      kind: .lockOrder,
      summary:
        "potential deadlock: \(thread.description) takes \(label(lock.id)) while holding \(label(earlier.id)), "
        + "closing a lock-order cycle of \(cycle.count) locks: \(chain)",
      details: details)
  }
}
