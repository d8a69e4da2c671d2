// The CPU topology reader and the default thread choice (common/cpu_topology.h) on fake sysfs
// trees shaped like real boards — an RK3588 (4 × A55 + 4 × A76 in two clusters), a
// Snapdragon-class 1 + 3 + 4, an SMT x86 server, an Intel hybrid (P cores with SMT + E cores),
// a Raspberry Pi 4 — and on this machine's own /sys.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/cpu_topology.h"
#include "support.h"

namespace ubatch {
namespace {

namespace fs = std::filesystem;

// One CPU of a fake tree.
struct FakeCpu {
  int cpu;
  int capacity;       // 0: no cpu_capacity file
  int64_t freq_khz;   // 0: no cpufreq directory
  int cluster;        // -1: no cluster_id file
  int core;
  std::string siblings;  // core_cpus_list ("" : none)
  int package = 0;
};

// A sysfs-like tree under a fresh temporary directory, removed with the object.
class FakeSysfs {
 public:
  FakeSysfs(const std::vector<FakeCpu>& cpus, const std::string& online) {
    root_ = fs::temp_directory_path() / ("ubatch-sysfs-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(root_);
    fs::create_directories(root_);
    if (!online.empty()) write(root_ / "online", online + "\n");
    for (const FakeCpu& c : cpus) {
      const fs::path dir = root_ / ("cpu" + std::to_string(c.cpu));
      fs::create_directories(dir / "topology");
      if (c.capacity > 0) write(dir / "cpu_capacity", std::to_string(c.capacity) + "\n");
      if (c.freq_khz > 0) {
        fs::create_directories(dir / "cpufreq");
        write(dir / "cpufreq" / "cpuinfo_max_freq", std::to_string(c.freq_khz) + "\n");
      }
      write(dir / "topology" / "physical_package_id", std::to_string(c.package) + "\n");
      if (c.cluster >= 0) write(dir / "topology" / "cluster_id", std::to_string(c.cluster) + "\n");
      write(dir / "topology" / "core_id", std::to_string(c.core) + "\n");
      if (!c.siblings.empty()) write(dir / "topology" / "thread_siblings_list", c.siblings + "\n");
    }
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  std::string root() const { return root_.string(); }
  void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

 private:
  fs::path root_;
  static inline int counter_ = 0;
};

ThreadChoice choose(const FakeSysfs& sys, const std::vector<int>& allowed = {}) {
  Result<CpuTopology> topo = read_cpu_topology(sys.root());
  EXPECT_TRUE(topo) << topo.message();
  if (!topo) return {};
  return choose_threads(*topo, allowed, 99);
}

// RK3588 as mainline Linux describes it: cpu0-3 Cortex-A55 (cluster 0, 1.8 GHz, capacity 414
// from capacity-dmips-mhz 530 scaled by frequency), cpu4-5 and cpu6-7 Cortex-A76 (clusters 1
// and 2, 2.352 GHz, capacity 1024); no SMT.
std::vector<FakeCpu> rk3588(bool with_capacity = true) {
  std::vector<FakeCpu> v;
  for (int i = 0; i < 8; ++i) {
    const bool big = i >= 4;
    v.push_back({i, with_capacity ? (big ? 1024 : 414) : 0, big ? 2352000 : 1800000, big ? (i < 6 ? 1 : 2) : 0,
                 big ? (i - 4) % 2 : i, std::to_string(i)});
  }
  return v;
}

TEST(CpuTopology, Rk3588UsesTheFourBigCoresPinned) {
  FakeSysfs sys(rk3588(), "0-7");
  const ThreadChoice c = choose(sys);
  EXPECT_EQ(c.n_threads, 4);
  EXPECT_EQ(c.cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_NE(c.reason.find("cpus 4-7"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("cpus 0-3"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("capacity 1024"), std::string::npos) << c.reason;
  // Cores 4 and 6 share core_id 0 (different clusters): they are still different cores.
  Result<CpuTopology> topo = read_cpu_topology(sys.root());
  ASSERT_TRUE(topo);
  EXPECT_EQ(describe_cpu_topology(*topo),
            "8 CPUs, 8 cores, no SMT; cpus 0-3: cluster 0, capacity 414, 1800 MHz; cpus 4-5: cluster 1, capacity "
            "1024, 2352 MHz; cpus 6-7: cluster 2, capacity 1024, 2352 MHz");
}

TEST(CpuTopology, Rk3588WithoutCapacityFallsBackToFrequency) {
  FakeSysfs sys(rk3588(false), "0-7");
  const ThreadChoice c = choose(sys);
  EXPECT_EQ(c.n_threads, 4);
  EXPECT_EQ(c.cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_NE(c.reason.find("2352 MHz"), std::string::npos) << c.reason;
}

TEST(CpuTopology, Rk3588LimitedToTheLittleCoresByAffinityUsesThemAll) {
  // `taskset -c 0-3`: only the A55s are allowed, and among them all cores are alike.
  FakeSysfs sys(rk3588(), "0-7");
  const ThreadChoice c = choose(sys, {0, 1, 2, 3});
  EXPECT_EQ(c.n_threads, 4);
  EXPECT_TRUE(c.cpus.empty());
  EXPECT_NE(c.reason.find("of the 4 CPUs this process may use"), std::string::npos) << c.reason;
  // Allowed: two little and two big cores: the big ones.
  const ThreadChoice mixed = choose(sys, {2, 3, 6, 7});
  EXPECT_EQ(mixed.n_threads, 2);
  EXPECT_EQ(mixed.cpus, (std::vector<int>{6, 7}));
}

TEST(CpuTopology, SnapdragonOnePlusThreePlusFourUsesThePrimeAndTheBigCores) {
  // Snapdragon 8 Gen 1 shape: cpu0-3 Cortex-A510 (1.79 GHz), cpu4-6 A710 (2.5 GHz), cpu7
  // X2 (3.0 GHz), one DynamIQ cluster; capacities as its energy model reports them.
  std::vector<FakeCpu> v;
  for (int i = 0; i < 8; ++i) {
    const int cap = i < 4 ? 325 : i < 7 ? 871 : 1024;
    const int64_t f = i < 4 ? 1785600 : i < 7 ? 2496000 : 2995200;
    v.push_back({i, cap, f, 0, i, std::to_string(i)});
  }
  FakeSysfs sys(v, "0-7");
  const ThreadChoice c = choose(sys);
  EXPECT_EQ(c.n_threads, 4);
  EXPECT_EQ(c.cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_NE(c.reason.find("capacity 871-1024"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("the 4 slower cores (cpus 0-3, capacity 325)"), std::string::npos) << c.reason;
}

TEST(CpuTopology, SmtServerUsesOneThreadPerPhysicalCoreUnpinned) {
  // 4 cores × 2 hardware threads, siblings numbered as Linux does on x86 (n and n+4); Intel's
  // favoured cores (Turbo Boost Max 3.0) report a slightly higher maximum: still one class.
  std::vector<FakeCpu> v;
  for (int i = 0; i < 8; ++i) {
    const int core = i % 4;
    v.push_back({i, 0, core < 2 ? 4700000 : 4500000, -1, core, std::to_string(core) + "," + std::to_string(core + 4)});
  }
  FakeSysfs sys(v, "0-7");
  const ThreadChoice c = choose(sys);
  EXPECT_EQ(c.n_threads, 4);
  EXPECT_TRUE(c.cpus.empty());
  EXPECT_NE(c.reason.find("one per physical core (8 hardware threads)"), std::string::npos) << c.reason;
  Result<CpuTopology> topo = read_cpu_topology(sys.root());
  ASSERT_TRUE(topo);
  EXPECT_EQ(topo->cpus[5].siblings, (std::vector<int>{1, 5}));
  EXPECT_EQ(describe_cpu_topology(*topo).substr(0, 29), "8 CPUs, 4 cores, SMT 2-way; c");
}

TEST(CpuTopology, IntelHybridUsesThePerformanceCores) {
  // 2 P cores with SMT (cpus 0-3, 4.7 GHz) and 4 E cores (cpus 4-7, 3.5 GHz); x86 reports
  // no capacity and cluster_id 65535.
  std::vector<FakeCpu> v;
  for (int i = 0; i < 4; ++i) v.push_back({i, 0, 4700000, 65535, i / 2, i < 2 ? "0-1" : "2-3"});
  for (int i = 4; i < 8; ++i) v.push_back({i, 0, 3500000, 65535, i, std::to_string(i)});
  FakeSysfs sys(v, "0-7");
  const ThreadChoice c = choose(sys);
  EXPECT_EQ(c.n_threads, 2);
  EXPECT_EQ(c.cpus, (std::vector<int>{0, 1, 2, 3}));
  Result<CpuTopology> topo = read_cpu_topology(sys.root());
  ASSERT_TRUE(topo);
  EXPECT_EQ(topo->cpus[0].cluster, -1);  // 65535: no cluster
}

TEST(CpuTopology, RaspberryPi4UsesAllFourCores) {
  // BCM2711: 4 × Cortex-A72 at 1.5 GHz, capacity 1024 each, one cluster.
  std::vector<FakeCpu> v;
  for (int i = 0; i < 4; ++i) v.push_back({i, 1024, 1500000, 0, i, std::to_string(i)});
  FakeSysfs sys(v, "0-3");
  const ThreadChoice c = choose(sys);
  EXPECT_EQ(c.n_threads, 4);
  EXPECT_TRUE(c.cpus.empty());
  EXPECT_EQ(c.reason, "4 threads, one per physical core");
}

TEST(CpuTopology, OfflineCpusAreLeftOut) {
  // cpu2 offline ("online" says 0-1,3), and a tree without "online": each cpuN/online decides.
  std::vector<FakeCpu> v;
  for (int i = 0; i < 4; ++i) v.push_back({i, 0, 0, -1, i, ""});
  {
    FakeSysfs sys(v, "0-1,3");
    Result<CpuTopology> topo = read_cpu_topology(sys.root());
    ASSERT_TRUE(topo);
    ASSERT_EQ(topo->cpus.size(), 3u);
    EXPECT_EQ(topo->cpus[2].cpu, 3);
    EXPECT_EQ(choose(sys).n_threads, 3);
  }
  {
    FakeSysfs sys(v, "");
    sys.write(fs::path(sys.root()) / "cpu1" / "online", "0\n");
    Result<CpuTopology> topo = read_cpu_topology(sys.root());
    ASSERT_TRUE(topo);
    ASSERT_EQ(topo->cpus.size(), 3u);
    EXPECT_EQ(topo->cpus[1].cpu, 2);
    EXPECT_TRUE(topo->cpus[1].siblings.empty());
    EXPECT_EQ(topo->cpus[1].capacity, 0);
    EXPECT_EQ(describe_cpu_topology(*topo), "3 CPUs, 3 cores, no SMT; cpus 0,2-3: no capacity or frequency reported");
  }
}

TEST(CpuTopology, UnreadableTreesAreErrorsAndTheChoiceFallsBack) {
  Result<CpuTopology> missing = read_cpu_topology("/nonexistent/ubatch/cpu");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find("/nonexistent/ubatch/cpu"), std::string::npos);
  FakeSysfs empty({}, "");
  Result<CpuTopology> none = read_cpu_topology(empty.root());
  ASSERT_FALSE(none);
  EXPECT_NE(none.message().find("no CPU"), std::string::npos);
  FakeSysfs garbage({}, "zero-seven");
  EXPECT_FALSE(read_cpu_topology(garbage.root()));
  // Nothing allowed that is online: the fallback count, unpinned.
  FakeSysfs sys(rk3588(), "0-7");
  const ThreadChoice c = choose(sys, {42});
  EXPECT_EQ(c.n_threads, 99);
  EXPECT_TRUE(c.cpus.empty());
}

TEST(CpuTopology, CpuListsParseAndFormat) {
  Result<std::vector<int>> a = parse_cpu_list(" 0-3,6,8-9\n");
  ASSERT_TRUE(a);
  EXPECT_EQ(a.value(), (std::vector<int>{0, 1, 2, 3, 6, 8, 9}));
  EXPECT_EQ(format_cpu_list(a.value()), "0-3,6,8-9");
  EXPECT_EQ(format_cpu_list({5}), "5");
  EXPECT_EQ(format_cpu_list({}), "");
  Result<std::vector<int>> empty = parse_cpu_list("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  for (const char* bad : {"3-1", "a", "1,,2", "1-", "-1", "0,", "1-2-3", "0-99999999"})
    EXPECT_FALSE(parse_cpu_list(bad)) << bad;
}

TEST(CpuTopology, ThisMachine) {
  // The real /sys: the choice never exceeds the hardware threads, and on a homogeneous CPU
  // without SMT (the 2-vCPU development VM) it is today's default, every hardware thread.
  Result<CpuTopology> topo = read_cpu_topology();
  if (!topo) GTEST_SKIP() << "no readable sysfs CPU topology here: " << topo.message();
  std::string text;
  const ThreadChoice c = default_thread_choice(&text);
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  std::printf("this machine: %s\n  %s\n", text.c_str(), c.reason.c_str());
  EXPECT_GE(c.n_threads, 1);
  EXPECT_LE(c.n_threads, hw);
  const ThreadChoice plain = choose_threads(*topo, process_cpu_affinity(), hw);
  EXPECT_EQ(plain.n_threads, c.n_threads);
  bool smt = false;
  for (const LogicalCpu& l : topo->cpus) smt = smt || l.siblings.size() > 1;
  const std::vector<int> affinity = process_cpu_affinity();
  if (!smt && c.cpus.empty() && static_cast<int>(affinity.size()) == hw && static_cast<int>(topo->cpus.size()) == hw) {
    EXPECT_EQ(c.n_threads, hw);
  }
}

TEST(CpuTopology, PinningTheCallingThread) {
  const std::vector<int> before = process_cpu_affinity();
  if (before.empty()) GTEST_SKIP() << "sched_getaffinity is not available";
  // On a thread of its own, so the test process keeps its affinity.
  std::vector<int> inside;
  Status st = Status::ok();
  std::thread([&] {
    st = pin_current_thread({before.front()});
    inside = process_cpu_affinity();  // sched_getaffinity(0) is the calling thread's
  }).join();
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(inside, std::vector<int>{before.front()});
  EXPECT_EQ(process_cpu_affinity(), before);
  EXPECT_TRUE(pin_current_thread({}));
}

}  // namespace
}  // namespace ubatch
