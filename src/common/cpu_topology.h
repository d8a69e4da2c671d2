// The CPU topology as Linux describes it in sysfs, and the compute-thread count chosen from it.
//
// Why: decode splits every matrix into equal row ranges, one per thread (kernels/thread_pool.h),
// so a step lasts as long as its slowest thread. On a heterogeneous CPU (Arm big.LITTLE /
// DynamIQ: RK3588's 4 × Cortex-A76 + 4 × A55, phone SoCs' 1 + 3 + 4; Intel P + E cores) a
// thread on a little core paces the big ones, and more threads are slower than the fast cores
// alone. On an SMT CPU two hardware threads share one core's SIMD units, so a second thread
// per core adds contention, not throughput, to these kernels.
//
// Sources (Documentation/ABI/stable/sysfs-devices-system-cpu and
// Documentation/admin-guide/cputopology.rst of the Linux kernel), under a root that is
// normally /sys/devices/system/cpu (a parameter, so tests read fake trees):
//   online                          CPU list ("0-7", "0,2-3") of the CPUs online
//   cpuN/cpu_capacity               relative compute capacity, 1024 = the system's fastest
//                                   core (arm64, RISC-V; some x86 kernels); optional
//   cpuN/cpufreq/cpuinfo_max_freq   highest frequency in kHz; optional
//   cpuN/topology/core_cpus_list    the CPUs of N's physical core (its SMT siblings), or the
//     (or thread_siblings_list)     older name; optional
//   cpuN/topology/core_id, cluster_id, physical_package_id
//
// This is not a kernel concern (kernels/ knows instruction sets, not how many threads a
// machine should run), and nothing here depends on the model: it sits in common/, read by the
// tools that size the thread pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ubatch {

// One logical CPU (a hardware thread).
struct LogicalCpu {
  int cpu = 0;                 // N of cpuN
  int package = -1;            // physical_package_id (-1: unknown)
  int cluster = -1;            // cluster_id (-1: unknown; the kernel's 65535 / -1 read as -1)
  int core = -1;               // core_id, unique within a package or cluster (-1: unknown)
  int capacity = 0;            // cpu_capacity (0: not reported)
  int64_t max_freq_khz = 0;    // cpufreq/cpuinfo_max_freq (0: not reported)
  std::vector<int> siblings;   // the CPUs sharing its physical core, itself included, ascending
                               // (empty: not reported)
};

struct CpuTopology {
  std::vector<LogicalCpu> cpus;  // the online CPUs, ascending by number
};

// Reads the topology under `root` (normally "/sys/devices/system/cpu"). Missing optional
// files leave their fields unknown. Errors: `root` cannot be read, or it lists no CPU (the
// message names the path).
Result<CpuTopology> read_cpu_topology(const std::string& root = "/sys/devices/system/cpu");

// Parses a kernel CPU list ("0-3,6,8-9"; whitespace around it ignored) into ascending,
// distinct CPU numbers. Errors: anything else (the message quotes the text).
Result<std::vector<int>> parse_cpu_list(const std::string& text);

// "0-3,6,8-9" for {0,1,2,3,6,8,9}.
std::string format_cpu_list(const std::vector<int>& cpus);

// The compute threads chosen for a topology.
struct ThreadChoice {
  int n_threads = 1;          // >= 1
  std::vector<int> cpus;      // where the threads should run: the fast cores' CPUs on a
                              // heterogeneous CPU; empty: anywhere (no pinning)
  std::string reason;         // one line: what was chosen and why
};

// The default compute-thread count: one thread per physical core (SMT siblings counted once)
// among the CPUs both online and in `allowed` (the process's affinity; empty: no limit), and
// on a heterogeneous CPU only the fast cores.
//
// Speed of a core: cpu_capacity when the CPUs report different capacities, else
// cpuinfo_max_freq when they report different frequencies, else all cores are alike. Cores
// are sorted by speed and cut into classes wherever a core is below 90% of the fastest core
// of its class (so that Intel's favoured cores, a few percent above the rest, stay one
// class, while big and little cores — 60% and less on current SoCs — do not). With more than
// one class the slowest class is left out and the threads are pinned to the others.
// With no usable topology (no CPU listed) the choice is `fallback` threads, unpinned.
ThreadChoice choose_threads(const CpuTopology& topo, const std::vector<int>& allowed, int fallback);

// One line describing the topology: CPUs, physical cores, SMT, and the CPUs grouped by
// cluster, capacity and frequency ("8 CPUs, 8 cores, no SMT; cpus 0-3: cluster 0, capacity
// 414, 1800 MHz; cpus 4-5: …").
std::string describe_cpu_topology(const CpuTopology& topo);

// The CPUs this process may run on (sched_getaffinity), ascending; empty when unknown.
std::vector<int> process_cpu_affinity();

// What this machine should run with: its topology (read once, from /sys/devices/system/cpu),
// the affinity of the calling process and choose_threads(), falling back to
// std::thread::hardware_concurrency() when the topology cannot be read. `topology` receives
// describe_cpu_topology() (or why it could not be read) when not null. Thread-safe.
ThreadChoice default_thread_choice(std::string* topology = nullptr);

// Pins the calling thread to `cpus` (any of them; pthread_setaffinity_np). Empty: nothing.
// Errors: the system refused (the message says why).
Status pin_current_thread(const std::vector<int>& cpus);

}  // namespace ubatch
