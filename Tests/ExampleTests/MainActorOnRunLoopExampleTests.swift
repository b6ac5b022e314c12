import Testing

/// Examples/MainActorOnRunLoop, run as a child process (installing the main executor changes
/// the whole process, and a test runner's main thread never runs a run loop).
@Suite(.timeLimit(.minutes(3))) struct MainActorOnRunLoopExampleTests {
  /// The checks the program makes with the switch installed, in order.
  static let installedChecks = [
    "ok: @MainActor code starts on the main thread",
    "ok: a timer on the main run loop fires on the main thread (MainActor.assumeIsolated passes)",
    "ok: back on the main thread after awaiting the timer",
    "ok: Task.sleep on @MainActor is never early",
    "ok: back on the main thread after Task.sleep",
    "ok: Task.sleep with a tolerance is never early",
    "ok: the pinned actor runs on its run-loop thread",
    "ok: back on the main thread after a hop to the pinned actor",
    "ok: Task.sleep in the pinned actor is never early and resumes on its thread",
    "ok: back on the main thread after the pinned actor slept",
    "ok: back on the main thread after a hop to a default actor",
    "ok: back on the main thread after a continuation resumed from another thread",
    "ok: a @MainActor function called from a detached task runs on the main thread",
    "ok: back on the main thread after awaiting the detached task",
  ]

  static func run(_ arguments: [String]) throws -> (status: Int32, lines: [String]) {
    let run = try #require(
      runExampleProgram("MainActorOnRunLoopExample", arguments: arguments),
      "the MainActorOnRunLoopExample program is built beside the tests (swift build --build-tests)")
    return (run.status, run.output.split(separator: "\n").map(String.init))
  }

  @Test func mainActorCodeStaysOnTheMainThreadAcrossEveryKindOfAwait() throws {
    let (status, lines) = try Self.run([])
    #expect(status == 0, "the program's report: \(lines)")
    #expect(lines == Self.installedChecks + ["all checks passed"])
  }

  @Test func mainActorCodeRunsUnderAForeignPollLoopWithoutATickler() throws {
    let (status, lines) = try Self.run(["--foreign-loop"])
    #expect(status == 0, "the program's report: \(lines)")
    #expect(
      lines
        == Self.installedChecks + [
          "ok: the foreign loop was woken for every piece of work (no tickler)", "all checks passed",
        ])
  }

  @Test func anExitRequestForTheMainThreadEndsTheProgram() throws {
    let (status, lines) = try Self.run(["--exit-request"])
    #expect(status == 0, "the program's report: \(lines)")
    #expect(lines == ["ok: @MainActor code starts on the main thread", "asking the main thread to exit"])
  }

  @Test("install() short of descriptors throws at every level, and installs once there are enough")
  func installShortOfDescriptorsThrowsInsteadOfStopping() throws {
    var outcomes: [String] = []
    for free in 0...8 {
      let (status, lines) = try Self.run(["--short-of-descriptors", String(free)])
      #expect(status == 0, "with \(free) free descriptors the program stopped: \(lines)")
      outcomes.append(lines.last ?? "")
    }
    #expect(outcomes.first?.hasPrefix("threw: ") == true, "\(outcomes)")
    #expect(outcomes.last == "installed", "\(outcomes)")
    #expect(outcomes.allSatisfy { $0 == "installed" || $0.hasPrefix("threw: ") }, "\(outcomes)")
  }

  @Test func withoutTheSwitchNothingChanges() throws {
    let (status, lines) = try Self.run(["--not-installed"])
    #expect(status == 0, "the program's report: \(lines)")
    #expect(
      lines == [
        "ok: the switch is off unless installed",
        "ok: the main run loop is untouched (nothing in its default mode)",
        "ok: tasks, sleeps and default actors work as before",
        "all checks passed",
      ])
  }
}
