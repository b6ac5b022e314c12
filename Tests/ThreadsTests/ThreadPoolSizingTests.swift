import Testing

@testable import Threads

/// How the pool's default sizes are derived: the CPUs the process may use (affinity mask,
/// cgroup quota), read from the files the kernel provides.
@Suite("ThreadPool sizes itself from the CPUs the process may use", .timeLimit(.minutes(3)))
struct ThreadPoolSizingTests {
  @Test func cgroupV2CpuMaxGivesTheQuotaRoundedUp() {
    #expect(ProcessorLimits.processorCount(cpuMax: "max 100000\n") == nil)
    #expect(ProcessorLimits.processorCount(cpuMax: "150000 100000\n") == 2)
    #expect(ProcessorLimits.processorCount(cpuMax: "50000 100000") == 1)
    #expect(ProcessorLimits.processorCount(cpuMax: "400000 100000") == 4)
    #expect(ProcessorLimits.processorCount(cpuMax: "garbage") == nil)
  }

  @Test func cgroupV1QuotaOfMinusOneIsNoLimit() {
    #expect(ProcessorLimits.processorCount(quotaMicroseconds: "-1\n", periodMicroseconds: "100000\n") == nil)
    #expect(ProcessorLimits.processorCount(quotaMicroseconds: "250000\n", periodMicroseconds: "100000\n") == 3)
  }

  @Test func membershipLinesOfBothVersionsAreParsed() {
    let text = "12:cpu,cpuacct:/docker/abc\n0::/user.slice/app.scope\nbroken line\n"
    let entries = ProcessorLimits.parseMembership(text)
    #expect(
      entries == [
        .init(hierarchy: "12", controllers: ["cpu", "cpuacct"], path: "/docker/abc"),
        .init(hierarchy: "0", controllers: [], path: "/user.slice/app.scope"),
      ])
  }

  @Test func aCgroupV2LimitOfAnAncestorApplies() {
    #expect(
      ProcessorLimits.ancestorDirectories(of: "/a/b", under: "/sys/fs/cgroup") == [
        "/sys/fs/cgroup/a/b", "/sys/fs/cgroup/a", "/sys/fs/cgroup",
      ])
    #expect(ProcessorLimits.ancestorDirectories(of: "/", under: "/sys/fs/cgroup") == ["/sys/fs/cgroup"])
  }

  @Test func theUsableCountIsWithinTheAffinityMaskAndTheDefaultsFollowTheFormula() throws {
    let affinity = try Thread.currentCPUAffinity().count
    #expect(ThreadPool.usableProcessorCount >= 1)
    #expect(ThreadPool.usableProcessorCount <= affinity)
    #expect(ThreadPool.defaultMaximumThreads == max(16, 4 * ThreadPool.usableProcessorCount))
  }

  @Test func priorityLevels() {
    #expect(ThreadPool.level(of: .high) == 0)
    #expect(ThreadPool.level(of: .userInitiated) == 0)
    #expect(ThreadPool.level(of: .medium) == 1)
    #expect(ThreadPool.level(of: .utility) == 2)
    #expect(ThreadPool.level(of: .background) == 2)
  }
}
