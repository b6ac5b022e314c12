import ProcessTestSupport
import RunLoop
import Sync
import TestSupport
import Testing
import Threads

/// Audit round 4: a seeded, model-based check of timer firing order under mutation from
/// timer callbacks (libuv's and GLib's timer tests: add, remove, re-add, invalidate, revive,
/// change the fire date from inside a callback), over two modes. The real loop runs one pass
/// at a time (`run(mode:timeout: .zero)`, in either mode); every firing and every mutation its callback made is
/// logged; a simple model then replays the log and predicts each pass's firing order from
/// the documented rules:
///
/// - a pass fires the timers due at its start, earliest fire date first, equal dates in
///   schedule order (the order added; a re-armed or re-added timer goes after the timers
///   already there);
/// - a timer that an earlier callback of the pass invalidated, removed from the mode, or
///   moved to the future does not fire in that pass; one that was still due fires;
/// - a timer added, revived or re-dated by a callback of the pass fires in a later pass;
/// - a callback may run a pass nested: it lists the timers due then, except those whose
///   callbacks run; a timer fired earlier in the enclosing pass is listed under the date it
///   fired for, as its schedule is renewed only when the enclosing pass ends (re-dated into
///   the past meanwhile, it fires in the nested pass at that place);
/// - after its callback, a one-shot timer is invalidated (unless its callback re-armed it);
///   a repeating timer takes a date set during the callback when later than the instant it
///   was due at, else its next grid point.
@Suite("Audit round 4: RunLoop timer model", .timeLimit(.minutes(3)))
struct AuditRound4RunLoopTimerModelTests {
  /// A fire date: nanoseconds after the (past) base instant, or far in the future.
  enum When: Equatable, CustomStringConvertible {
    case past(Int64)
    case future
    var description: String {
      switch self {
      case .past(let offset): return "past+\(offset)"
      case .future: return "future"
      }
    }
  }

  /// A mutation made by a callback.
  enum Op: CustomStringConvertible {
    case invalidate(Int)
    case remove(Int, mode: Int)
    case add(Int, mode: Int, accepted: Bool)
    case setDate(Int, When)
    case create(Int, When, repeating: Bool, mode: Int)
    case rearmSelf(When)
    case revive(Int, When, mode: Int)
    /// The callback ran the loop for one pass in a mode, nested (its firings follow in the
    /// log).
    case nestedPass(mode: Int)
    var description: String {
      switch self {
      case .invalidate(let id): return "invalidate(\(id))"
      case .remove(let id, let mode): return "remove(\(id), mode \(mode))"
      case .add(let id, let mode, let accepted): return "add(\(id), mode \(mode)) -> \(accepted)"
      case .setDate(let id, let when): return "setNextFireDate(\(id), \(when))"
      case .create(let id, let when, let repeating, let mode):
        return "create(\(id), \(when), repeating: \(repeating), mode \(mode))"
      case .rearmSelf(let when): return "rearmSelf(\(when))"
      case .revive(let id, let when, let mode): return "revive(\(id), \(when), mode \(mode))"
      case .nestedPass(let mode): return "nestedPass(mode \(mode))"
      }
    }
  }

  /// The two modes timers are spread over.
  static let modes: [RunLoopMode] = [.default, "round4-model-other"]

  struct Firing {
    let pass: Int
    let id: Int
    var ops: [Op]
  }

  /// The real side: timers and the log, touched only on the loop's thread.
  final class World: @unchecked Sendable {
    var generator: SeededGenerator
    let base: MonotonicInstant
    var timers: [RunLoopTimer] = []
    var repeating: [Bool] = []
    var log: [Firing] = []
    var pass = 0
    var depth = 0
    var uniqueOffset: Int64 = 1_000
    let loop: RunLoop
    let modes = AuditRound4RunLoopTimerModelTests.modes
    static let interval = Duration.seconds(3600)
    static let maximumTimers = 40

    init(seed: UInt64, loop: RunLoop) {
      generator = SeededGenerator(seed: seed)
      base = MonotonicInstant.now - .seconds(10)
      self.loop = loop
    }

    func instant(_ when: When) -> MonotonicInstant {
      switch when {
      case .past(let offset): return base.advanced(by: .nanoseconds(offset))
      case .future: return .distantFuture
      }
    }

    func randomWhen() -> When {
      switch generator.below(3) {
      case 0:
        return .past(Int64(generator.below(4)))
      case 1:
        uniqueOffset += 1
        return .past(uniqueOffset)
      default:
        return generator.below(2) == 0 ? .future : .past(Int64(generator.below(4)))
      }
    }

    func block(_ id: Int) -> @Sendable (RunLoopTimer) -> Void {
      { [unowned self] _ in self.fired(id) }
    }

    func makeTimer(_ when: When, repeating: Bool) -> Int {
      let id = timers.count
      let timer = RunLoopTimer(fireAt: instant(when), interval: repeating ? World.interval : .zero, block(id))
      timers.append(timer)
      self.repeating.append(repeating)
      return id
    }

    func fired(_ id: Int) {
      // Logged in the order firings start: those of a nested pass follow their parent.
      let index = log.count
      log.append(Firing(pass: pass, id: id, ops: []))
      var ops: [Op] = []
      for _ in 0..<generator.below(3) {
        let target = generator.below(timers.count)
        switch generator.below(9) {
        case 8:
          guard depth < 2 else { continue }
          let mode = generator.below(2)
          ops.append(.nestedPass(mode: mode))
          depth += 1
          _ = loop.run(mode: modes[mode], timeout: .zero)
          depth -= 1
        case 0:
          timers[target].invalidate()
          ops.append(.invalidate(target))
        case 1:
          let mode = generator.below(2)
          loop.remove(timers[target], forMode: modes[mode])
          ops.append(.remove(target, mode: mode))
        case 2:
          let mode = generator.below(2)
          ops.append(.add(target, mode: mode, accepted: loop.add(timers[target], forMode: modes[mode])))
        case 3, 4:
          let when = randomWhen()
          timers[target].setNextFireDate(instant(when))
          ops.append(.setDate(target, when))
        case 5:
          guard timers.count < World.maximumTimers else { continue }
          let when = randomWhen()
          let repeats = generator.below(4) == 0
          let mode = generator.below(2)
          let created = makeTimer(when, repeating: repeats)
          _ = loop.add(timers[created], forMode: modes[mode])
          ops.append(.create(created, when, repeating: repeats, mode: mode))
        case 6:
          let when = randomWhen()
          timers[id].rearm(fireAt: instant(when), block(id))
          ops.append(.rearmSelf(when))
        default:
          // Revive another invalidated timer (rearm is only allowed on an invalid one).
          guard target != id, !timers[target].isValid else { continue }
          let when = randomWhen()
          let mode = generator.below(2)
          timers[target].rearm(fireAt: instant(when), block(target))
          _ = loop.add(timers[target], forMode: modes[mode])
          ops.append(.revive(target, when, mode: mode))
        }
      }
      log[index].ops = ops
    }
  }

  /// The model's view of one timer.
  struct ModelTimer {
    var valid = true
    /// The modes it is in (indexes into `modes`); in none, the loop forgets it.
    var modes: Set<Int> = []
    var when: When
    var sequence: UInt64 = 0
    let repeating: Bool
    /// Counts `rearm` calls (its own callback's or a revival), as the timer does.
    var rearms = 0
    /// Re-armed since the loop last renewed its schedule: the next renewal gives it a new
    /// place among equal dates.
    var rearmed = false
    /// The date and place the loop last scheduled it under: what a pass's list of due
    /// timers is taken from. A timer fired in a pass is renewed at the end of that pass, so
    /// a pass nested in a callback still sees it under the instant it fired for.
    var key: (When, UInt64)? = nil
  }

  struct Model {
    var timers: [ModelTimer] = []
    var sequence: UInt64 = 0

    /// The loop renews a timer's schedule (valid and in the mode only).
    mutating func renew(_ id: Int) {
      guard timers[id].valid, !timers[id].modes.isEmpty else { return }
      if timers[id].rearmed {
        sequence += 1
        timers[id].sequence = sequence
        timers[id].rearmed = false
      }
      timers[id].key = (timers[id].when, timers[id].sequence)
    }

    mutating func add(_ id: Int, _ mode: Int) -> Bool {
      guard timers[id].valid else { return false }
      // Joining the loop (in no mode before): it goes after the timers added before it.
      if timers[id].modes.isEmpty {
        sequence += 1
        timers[id].sequence = sequence
      }
      timers[id].modes.insert(mode)
      renew(id)
      return true
    }

    /// Timers whose callbacks run (outer passes included): never due.
    var firing: Set<Int> = []

    /// Whether the timer fires when its turn in a pass comes.
    func isDue(_ id: Int, in mode: Int) -> Bool {
      let timer = timers[id]
      guard timer.valid, timer.modes.contains(mode), !firing.contains(id), case .past = timer.when else {
        return false
      }
      return true
    }

    func offset(_ when: When) -> Int64 {
      if case .past(let offset) = when { return offset }
      return .max
    }

    func offset(_ id: Int) -> Int64 { offset(timers[id].when) }

    /// The timers listed as due at the start of a pass, in firing order.
    func snapshot(_ mode: Int) -> [Int] {
      let listed = timers.indices.filter { id in
        let timer = timers[id]
        guard timer.valid, timer.modes.contains(mode), !firing.contains(id), let key = timer.key, case .past = key.0
        else {
          return false
        }
        return true
      }
      return listed.sorted {
        (offset(timers[$0].key!.0), timers[$0].key!.1) < (offset(timers[$1].key!.0), timers[$1].key!.1)
      }
    }

    mutating func rearm(_ id: Int, _ when: When) {
      timers[id].valid = true
      timers[id].when = when
      timers[id].rearmed = true
      timers[id].rearms += 1
      renew(id)
    }

    /// Applies a callback's mutation; `firing` is the timer whose callback made it.
    /// Returns a mismatch description when the real call answered otherwise.
    mutating func apply(_ op: Op, firing: Int) -> String? {
      switch op {
      case .invalidate(let id):
        timers[id].valid = false
        timers[id].modes = []
      case .remove(let id, let mode):
        timers[id].modes.remove(mode)
      case .add(let id, let mode, let accepted):
        let expected = add(id, mode)
        if expected != accepted { return "add(\(id)) returned \(accepted), model expected \(expected)" }
      case .setDate(let id, let when):
        guard timers[id].valid else { break }
        timers[id].when = when
        timers[id].rearmed = true
        renew(id)
      case .create(let id, let when, let repeating, let mode):
        precondition(id == timers.count)
        timers.append(ModelTimer(when: when, repeating: repeating))
        _ = add(id, mode)
      case .rearmSelf(let when):
        rearm(firing, when)
      case .revive(let id, let when, let mode):
        rearm(id, when)
        _ = add(id, mode)
      case .nestedPass:
        preconditionFailure("replayed by the caller")
      }
      return nil
    }
  }

  /// Runs one seed; returns the first disagreement between the loop and the model, if any.
  static func check(seed: UInt64) -> (failure: String?, firings: Int, ops: Int) {
    let outcome = Box<(String?, Int, Int)>((nil, 0, 0))
    TestThread.run {
      let loop = RunLoop.current
      let world = World(seed: seed, loop: loop)
      var model = Model()
      // The modes of the top-level passes, from a generator of their own.
      var passModes = SeededGenerator(seed: ~seed)
      let initial = 6 + world.generator.below(6)
      for _ in 0..<initial {
        let when: When = .past(Int64(world.generator.below(4)))
        let repeats = world.generator.below(4) == 0
        let id = world.makeTimer(when, repeating: repeats)
        model.timers.append(ModelTimer(when: when, repeating: repeats))
        // In the default mode, the other one, or both.
        let placement = world.generator.below(3)
        for mode in 0..<2 where placement == 2 || placement == mode {
          loop.add(world.timers[id], forMode: modes[mode])
          _ = model.add(id, mode)
        }
      }
      var cursor = 0
      var failure: String? = nil
      /// Replays one pass (nested ones recursively); false once a disagreement is found.
      func replayPass(_ pass: Int, mode: Int, depth: Int) -> Bool {
        let expected = model.snapshot(mode)
        let context = "seed \(seed) pass \(pass) mode \(mode) depth \(depth)"
        for id in expected {
          // Still due when its turn comes (an earlier callback of this pass, or a nested
          // pass, may have invalidated, removed, postponed or fired it).
          guard model.isDue(id, in: mode) else { continue }
          guard cursor < world.log.count, world.log[cursor].pass == pass else {
            failure = "\(context): timer \(id) did not fire (expected order \(expected))"
            return false
          }
          let firing = world.log[cursor]
          guard firing.id == id else {
            failure = "\(context): timer \(firing.id) fired where the model expected \(id) (order \(expected))"
            return false
          }
          cursor += 1
          let scheduled = model.offset(id)
          let rearmsBefore = model.timers[id].rearms
          model.firing.insert(id)
          for op in firing.ops {
            if case .nestedPass(let nestedMode) = op {
              guard replayPass(pass, mode: nestedMode, depth: depth + 1) else { return false }
              continue
            }
            if let mismatch = model.apply(op, firing: id) {
              failure = "seed \(seed) pass \(pass) in timer \(id): \(mismatch)"
              return false
            }
          }
          model.firing.remove(id)
          // After the callback.
          guard model.timers[id].valid, model.timers[id].rearms == rearmsBefore else { continue }
          if !model.timers[id].repeating {
            model.timers[id].valid = false
            model.timers[id].modes = []
          } else if model.offset(id) <= scheduled {
            // The next grid point, an hour on: in the future.
            model.timers[id].when = .future
            model.timers[id].rearmed = true
          }
        }
        // The pass renews the schedule of every timer it listed.
        for id in expected { model.renew(id) }
        return true
      }
      var idle = 0
      passes: for pass in 0..<40 {
        world.pass = pass
        let mode = passModes.below(2)
        let expected = model.snapshot(mode)
        _ = loop.run(mode: modes[mode], timeout: .zero)
        guard replayPass(pass, mode: mode, depth: 0) else { break }
        if cursor < world.log.count {
          let extra = world.log[cursor]
          failure = "seed \(seed) pass \(pass) mode \(mode): timer \(extra.id) fired, the model expected none more"
          break
        }
        for (id, timer) in world.timers.enumerated() where timer.isValid != model.timers[id].valid {
          failure =
            "seed \(seed) after pass \(pass): timer \(id) valid \(timer.isValid), model \(model.timers[id].valid)"
          break passes
        }
        for (id, timer) in world.timers.enumerated() where model.timers[id].valid {
          for index in 0..<2 {
            let inMode = loop.contains(timer, inMode: modes[index])
            if inMode != model.timers[id].modes.contains(index) {
              failure = "seed \(seed) after pass \(pass): timer \(id) in mode \(index) \(inMode), model \(!inMode)"
              break passes
            }
          }
        }
        // Done after two passes in a row with nothing due in either mode.
        idle = expected.isEmpty && model.snapshot(0).isEmpty && model.snapshot(1).isEmpty ? idle + 1 : 0
        if idle >= 2 { break }
      }
      if failure == nil {
        for (id, timer) in world.timers.enumerated() where timer.isValid != model.timers[id].valid {
          failure = "seed \(seed): at the end timer \(id) valid \(timer.isValid), model \(model.timers[id].valid)"
          break
        }
      }
      if let failure {
        var text =
          failure + "\ninitial: "
          + (0..<initial).map { "\($0):\(world.repeating[$0] ? "R" : "1")" }.joined(separator: " ")
        for entry in world.log.prefix(40) { text += "\n  pass \(entry.pass) fire \(entry.id): \(entry.ops)" }
        print(text)
      }
      for timer in world.timers { timer.invalidate() }
      outcome.value = (failure, world.log.count, world.log.reduce(0) { $0 + $1.ops.count })
    }
    return outcome.value
  }

  @Test func timerFiringOrderFollowsTheModelUnderMutationFromCallbacks() {
    let start = MonotonicInstant.now
    var seed: UInt64 = 0x5EED_0004
    var seeds = 0
    var firings = 0
    var ops = 0
    // Bounded to about a second, at least 20 seeds.
    while seeds < 20 || (seeds < 400 && start.duration(to: .now) < .seconds(1)) {
      let outcome = Self.check(seed: seed)
      if let failure = outcome.failure {
        Issue.record(Comment(rawValue: failure))
        return
      }
      firings += outcome.firings
      ops += outcome.ops
      seed &+= 1
      seeds += 1
    }
    // The runs did exercise the rules: many firings, most with mutations.
    #expect(firings >= seeds * 6)
    #expect(ops >= seeds * 4)
  }
}
