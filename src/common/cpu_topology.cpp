#include "common/cpu_topology.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace ubatch {

namespace fs = std::filesystem;

namespace {

// The first line of a sysfs file, trimmed; "" when it cannot be read.
std::string read_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// An integer file; `fallback` when missing or not a number.
int64_t read_int(const fs::path& p, int64_t fallback) {
  const std::string s = read_line(p);
  if (s.empty()) return fallback;
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used, 10);
    return used == s.size() ? v : fallback;
  } catch (...) {
    return fallback;
  }
}

bool parse_int(const std::string& s, int& out) {
  if (s.empty() || s.size() > 7 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  out = std::stoi(s);
  return true;
}

// A speed class: cores of about the same speed.
struct Core {
  std::vector<int> cpus;  // its logical CPUs (usable ones), ascending
  int64_t speed = 0;      // capacity or kHz (0: unknown)
};

}  // namespace

Result<std::vector<int>> parse_cpu_list(const std::string& text) {
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  size_t start = 0;
  while (start < t.size() && std::isspace(static_cast<unsigned char>(t[start]))) ++start;
  t = t.substr(start);
  std::set<int> cpus;
  std::stringstream in(t);
  std::string item;
  auto bad = [&] { return Status::error(fmt::format("not a CPU list: '{}'", text)); };
  if (t.empty()) return std::vector<int>{};
  while (std::getline(in, item, ',')) {
    const size_t dash = item.find('-');
    int a = 0, b = 0;
    if (dash == std::string::npos) {
      if (!parse_int(item, a)) return bad();
      b = a;
    } else if (!parse_int(item.substr(0, dash), a) || !parse_int(item.substr(dash + 1), b) || b < a) {
      return bad();
    }
    if (b - a > 65536) return bad();
    for (int c = a; c <= b; ++c) cpus.insert(c);
  }
  if (!t.empty() && t.back() == ',') return bad();
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

Result<CpuTopology> read_cpu_topology(const std::string& root) {
  const fs::path base(root);
  std::error_code ec;
  if (!fs::is_directory(base, ec)) return Status::error(fmt::format("cpu topology: {} is not a directory", root));
  std::vector<int> online;
  if (const std::string list = read_line(base / "online"); !list.empty()) {
    Result<std::vector<int>> parsed = parse_cpu_list(list);
    if (!parsed) return Status::error(fmt::format("cpu topology: {}: {}", (base / "online").string(), parsed.message()));
    online = std::move(parsed.value());
  } else {
    // No "online" file: every cpuN directory whose own "online" is not 0.
    for (const fs::directory_entry& e : fs::directory_iterator(base, ec)) {
      const std::string name = e.path().filename().string();
      int n = 0;
      if (name.size() > 3 && name.compare(0, 3, "cpu") == 0 && parse_int(name.substr(3), n) &&
          read_int(e.path() / "online", 1) != 0)
        online.push_back(n);
    }
    std::sort(online.begin(), online.end());
  }
  CpuTopology topo;
  for (int n : online) {
    const fs::path dir = base / fmt::format("cpu{}", n);
    if (!fs::is_directory(dir, ec)) continue;
    LogicalCpu c;
    c.cpu = n;
    const fs::path t = dir / "topology";
    c.package = static_cast<int>(read_int(t / "physical_package_id", -1));
    const int64_t cluster = read_int(t / "cluster_id", -1);
    c.cluster = cluster < 0 || cluster >= 65535 ? -1 : static_cast<int>(cluster);  // 65535: "no cluster" (x86)
    c.core = static_cast<int>(read_int(t / "core_id", -1));
    c.capacity = static_cast<int>(std::max<int64_t>(0, read_int(dir / "cpu_capacity", 0)));
    c.max_freq_khz = std::max<int64_t>(0, read_int(dir / "cpufreq" / "cpuinfo_max_freq", 0));
    std::string siblings = read_line(t / "core_cpus_list");
    if (siblings.empty()) siblings = read_line(t / "thread_siblings_list");
    if (Result<std::vector<int>> s = parse_cpu_list(siblings); s && !s->empty()) c.siblings = std::move(s.value());
    topo.cpus.push_back(std::move(c));
  }
  if (topo.cpus.empty()) return Status::error(fmt::format("cpu topology: no CPU listed under {}", root));
  return topo;
}

ThreadChoice choose_threads(const CpuTopology& topo, const std::vector<int>& allowed, int fallback) {
  ThreadChoice out;
  const std::set<int> allow(allowed.begin(), allowed.end());
  std::map<int, const LogicalCpu*> usable;
  for (const LogicalCpu& c : topo.cpus)
    if (allow.empty() || allow.count(c.cpu)) usable[c.cpu] = &c;
  if (usable.empty()) {
    out.n_threads = std::max(1, fallback);
    out.reason = fmt::format("{} threads, every hardware thread: no CPU topology to choose from", out.n_threads);
    return out;
  }
  const bool limited = !allow.empty() && usable.size() < topo.cpus.size();

  // Physical cores: the SMT siblings of each CPU (those usable), else the CPU alone.
  std::map<std::vector<int>, Core> by_key;
  for (const auto& [n, c] : usable) {
    std::vector<int> key;
    for (int s : c->siblings)
      if (usable.count(s)) key.push_back(s);
    if (key.empty()) key = {n};
    by_key[key].cpus = key;
  }
  // The speed signal: capacity if the usable CPUs differ in it, else the maximum frequency.
  auto differs = [&](auto field) {
    std::set<int64_t> values;
    for (const auto& [n, c] : usable) values.insert(field(*c));
    return values.size() > 1 && !values.count(0);
  };
  const bool by_capacity = differs([](const LogicalCpu& c) { return int64_t{c.capacity}; });
  const bool by_freq = !by_capacity && differs([](const LogicalCpu& c) { return c.max_freq_khz; });
  std::vector<Core> cores;
  for (auto& [key, core] : by_key) {
    for (int n : core.cpus) {
      const LogicalCpu& c = *usable.at(n);
      core.speed = std::max<int64_t>(core.speed, by_capacity ? c.capacity : by_freq ? c.max_freq_khz : 0);
    }
    cores.push_back(core);
  }
  std::stable_sort(cores.begin(), cores.end(), [](const Core& a, const Core& b) { return a.speed > b.speed; });
  const size_t n_logical = usable.size();
  const std::string smt = n_logical > cores.size() ? fmt::format(" ({} hardware threads)", n_logical) : "";
  const std::string where = limited ? fmt::format(" of the {} CPUs this process may use", n_logical) : "";

  // Speed classes, fastest first.
  std::vector<std::vector<Core>> classes;
  for (const Core& c : cores) {
    if (classes.empty() || c.speed * 10 < classes.back().front().speed * 9) classes.emplace_back();
    classes.back().push_back(c);
  }
  if (classes.size() == 1) {
    out.n_threads = static_cast<int>(cores.size());
    out.reason = fmt::format("{} threads, one per physical core{}{}{}", out.n_threads, where, smt,
                             n_logical > cores.size() ? "; SMT siblings share a core's SIMD units" : "");
    return out;
  }
  std::vector<int> fast_cpus, slow_cpus;
  size_t n_fast = 0;
  for (size_t k = 0; k + 1 < classes.size(); ++k)
    for (const Core& c : classes[k]) {
      ++n_fast;
      fast_cpus.insert(fast_cpus.end(), c.cpus.begin(), c.cpus.end());
    }
  for (const Core& c : classes.back()) slow_cpus.insert(slow_cpus.end(), c.cpus.begin(), c.cpus.end());
  std::sort(fast_cpus.begin(), fast_cpus.end());
  std::sort(slow_cpus.begin(), slow_cpus.end());
  auto speed = [&](int64_t lo, int64_t hi) {
    const std::string range = lo == hi ? fmt::format("{}", by_capacity ? lo : lo / 1000)
                                       : fmt::format("{}-{}", by_capacity ? lo : lo / 1000, by_capacity ? hi : hi / 1000);
    return by_capacity ? "capacity " + range : range + " MHz";
  };
  out.n_threads = static_cast<int>(n_fast);
  out.cpus = fast_cpus;
  out.reason = fmt::format(
      "{} threads, one per fast core{}{} (cpus {}, {}), pinned there; the {} slower cores (cpus {}, {}) are left "
      "out: a step waits for its slowest thread",
      out.n_threads, where, smt, format_cpu_list(fast_cpus),
      speed(classes[classes.size() - 2].back().speed, classes.front().front().speed), classes.back().size(),
      format_cpu_list(slow_cpus), speed(classes.back().back().speed, classes.back().front().speed));
  return out;
}

std::string describe_cpu_topology(const CpuTopology& topo) {
  std::set<std::vector<int>> cores;
  for (const LogicalCpu& c : topo.cpus) cores.insert(c.siblings.empty() ? std::vector<int>{c.cpu} : c.siblings);
  size_t max_smt = 1;
  for (const auto& s : cores) max_smt = std::max(max_smt, s.size());
  std::string out = fmt::format("{} CPUs, {} cores, {}", topo.cpus.size(), cores.size(),
                                max_smt > 1 ? fmt::format("SMT {}-way", max_smt) : std::string("no SMT"));
  // Runs of CPUs with the same cluster, capacity and frequency.
  struct Group {
    std::vector<int> cpus;
    int cluster, capacity;
    int64_t freq;
  };
  std::vector<Group> groups;
  for (const LogicalCpu& c : topo.cpus) {
    if (!groups.empty() && groups.back().cluster == c.cluster && groups.back().capacity == c.capacity &&
        groups.back().freq == c.max_freq_khz)
      groups.back().cpus.push_back(c.cpu);
    else
      groups.push_back({{c.cpu}, c.cluster, c.capacity, c.max_freq_khz});
  }
  for (const Group& g : groups) {
    std::string parts;
    auto add = [&](const std::string& p) { parts += (parts.empty() ? "" : ", ") + p; };
    if (g.cluster >= 0) add(fmt::format("cluster {}", g.cluster));
    if (g.capacity > 0) add(fmt::format("capacity {}", g.capacity));
    if (g.freq > 0) add(fmt::format("{} MHz", g.freq / 1000));
    if (parts.empty()) add("no capacity or frequency reported");
    out += fmt::format("; cpus {}: {}", format_cpu_list(g.cpus), parts);
  }
  return out;
}

std::vector<int> process_cpu_affinity() {
  std::vector<int> out;
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
#endif
  return out;
}

ThreadChoice default_thread_choice(std::string* topology) {
  static std::once_flag once;
  static Result<CpuTopology> topo = Status::error("not read");
  std::call_once(once, [] { topo = read_cpu_topology(); });
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!topo) {
    if (topology) *topology = topo.message();
    ThreadChoice c;
    c.n_threads = hw;
    c.reason = fmt::format("{} threads, every hardware thread ({})", hw, topo.message());
    return c;
  }
  if (topology) *topology = describe_cpu_topology(*topo);
  return choose_threads(*topo, process_cpu_affinity(), hw);
}

Status pin_current_thread(const std::vector<int>& cpus) {
  if (cpus.empty()) return Status::ok();
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); rc != 0)
    return Status::error(fmt::format("cannot pin a thread to cpus {}: {}", format_cpu_list(cpus), std::strerror(rc)));
  return Status::ok();
#else
  return Status::error("pinning threads is supported on Linux only");
#endif
}

}  // namespace ubatch
