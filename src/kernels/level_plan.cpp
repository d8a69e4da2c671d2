// The shape classes, the level-choice rule and the cache file of level_plan.h.
#include "kernels/level_plan.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

#include "kernels/packed_weight.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace ubatch::kernels {

namespace {
// Bump when the probe's products or the kernels change enough that old timings mislead.
constexpr int kLevelProbeVersion = 1;
constexpr const char* kCacheHeader = "ubatch kernel level timings v1";
constexpr const char* kBuildMarker = " | build ";
}  // namespace

ShapeClass shape_class(int64_t n_tokens) {
  if (n_tokens <= kDecodeMaxRows) return ShapeClass::Decode;
  if (n_tokens <= kSmallBatchMaxRows) return ShapeClass::SmallBatch;
  return ShapeClass::Prefill;
}

const char* shape_class_name(ShapeClass c) {
  switch (c) {
    case ShapeClass::Decode: return "decode";
    case ShapeClass::SmallBatch: return "small-batch";
    case ShapeClass::Prefill: return "prefill";
  }
  return "?";
}

const char* shape_class_rows(ShapeClass c) {
  switch (c) {
    case ShapeClass::Decode: return "1-2 rows";
    case ShapeClass::SmallBatch: return "3-64 rows";
    case ShapeClass::Prefill: return "65+ rows";
  }
  return "?";
}

LevelPlan choose_level_plan(const std::vector<LevelTiming>& timings, SimdLevel cap, double tie) {
  LevelPlan plan;
  for (int c = 0; c < kShapeClasses; ++c) {
    // The candidates' times (first entry of each level only).
    std::vector<const LevelTiming*> cand;
    for (size_t i = 0; i < timings.size(); ++i) {
      const LevelTiming& t = timings[i];
      bool first = true;
      for (size_t j = 0; j < i; ++j) first = first && timings[j].level != t.level;
      if (first && t.passed && t.level <= cap && t.seconds[c] > 0) cand.push_back(&t);
    }
    if (cand.empty()) {
      plan.level[c] = SimdLevel::Scalar;
      continue;
    }
    double best = cand[0]->seconds[c];
    for (const LevelTiming* t : cand) best = t->seconds[c] < best ? t->seconds[c] : best;
    const LevelTiming* pick = nullptr;
    for (const LevelTiming* t : cand)
      if (t->seconds[c] <= best * (1.0 + tie) && (!pick || t->level < pick->level)) pick = t;
    plan.level[c] = pick->level;
  }
  return plan;
}

std::string describe_level_plan(const LevelPlan& plan) {
  std::string out;
  for (int c = 0; c < kShapeClasses; ++c) {
    if (c) out += ", ";
    out += shape_class_name(static_cast<ShapeClass>(c));
    out += ' ';
    out += simd_level_name(plan.level[c]);
  }
  return out;
}

std::string format_level_cache(const std::string& key, const std::vector<LevelTiming>& timings) {
  std::string out = std::string(kCacheHeader) + "\nkey " + key + "\n";
  for (const LevelTiming& t : timings) {
    out += "level ";
    out += simd_level_name(t.level);
    out += t.passed ? " passed" : " failed";
    for (double s : t.seconds) {
      char buf[32];
      if (s > 0) std::snprintf(buf, sizeof buf, " %.4e", s);
      else std::snprintf(buf, sizeof buf, " -");
      out += buf;
    }
    out += '\n';
  }
  return out;
}

bool parse_level_cache(const std::string& text, const std::string& key, std::vector<LevelTiming>* out) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kCacheHeader) return false;
  if (!std::getline(in, line) || line != "key " + key) return false;
  std::vector<LevelTiming> parsed;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string word, name, status;
    if (!(ls >> word >> name >> status) || word != "level") return false;
    bool ok = false;
    LevelTiming t;
    t.level = parse_simd_cap(name.c_str(), &ok);
    if (!ok || std::strcmp(simd_level_name(t.level), name.c_str()) != 0) return false;
    if (status != "passed" && status != "failed") return false;
    t.passed = status == "passed";
    for (double& s : t.seconds) {
      std::string v;
      if (!(ls >> v)) return false;
      if (v == "-") {
        s = 0;
        continue;
      }
      char* end = nullptr;
      s = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(s > 0) || s > 1e6) return false;
    }
    std::string extra;
    if (ls >> extra) return false;
    parsed.push_back(t);
  }
  *out = std::move(parsed);
  return true;
}

namespace {

std::string cpu_model_string() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned regs[12] = {};
  unsigned a = 0, b = 0, c = 0, d = 0;
  std::string brand;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000004u) {
    for (unsigned i = 0; i < 3; ++i) __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    char text[49] = {};
    std::memcpy(text, regs, 48);
    brand = text;
    while (!brand.empty() && brand.back() == ' ') brand.pop_back();
    while (!brand.empty() && brand.front() == ' ') brand.erase(brand.begin());
  }
  unsigned family = 0, model = 0, stepping = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    family = (a >> 8) & 0xF;
    model = (a >> 4) & 0xF;
    stepping = a & 0xF;
    if (family == 0xF) family += (a >> 20) & 0xFF;
    if (family == 0x6 || family >= 0xF) model |= ((a >> 16) & 0xF) << 4;
  }
  for (char& ch : brand)
    if (ch == '"' || ch == '\n') ch = '\'';
  return "x86-64 \"" + brand + "\" family " + std::to_string(family) + " model " + std::to_string(model) +
         " stepping " + std::to_string(stepping);
#elif defined(__aarch64__)
  std::ifstream f("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1");
  std::string midr;
  if (!(f >> midr)) midr = "unknown";
  return "aarch64 midr " + midr;
#else
  return "generic";
#endif
}

// FNV-1a, 64 bits.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

// This executable's size and modification time: a rebuilt binary (new kernels) measures again.
std::string build_stamp() {
  struct stat st;
  if (stat("/proc/self/exe", &st) != 0) return "unknown";
  return std::to_string(static_cast<long long>(st.st_size)) + " " + std::to_string(static_cast<long long>(st.st_mtime));
}

const std::string& level_cache_key() {
  static const std::string key = cpu_model_string() + " | " + simd_level_names() + " | layout " +
                                 std::to_string(kPackedLayoutVersion) + " | probe " +
                                 std::to_string(kLevelProbeVersion) + kBuildMarker + build_stamp();
  return key;
}

std::string level_cache_path(const char* xdg_cache_home, const char* home, const std::string& key) {
  std::string dir;
  if (xdg_cache_home && *xdg_cache_home) dir = xdg_cache_home;
  else if (home && *home) dir = std::string(home) + "/.cache";
  else return "";
  char name[64];
  const std::string file_key = key.substr(0, key.find(kBuildMarker));  // one file per CPU model
  std::snprintf(name, sizeof name, "kernel-levels-%016llx.txt", static_cast<unsigned long long>(fnv1a(file_key)));
  return dir + "/ubatch/" + name;
}

}  // namespace ubatch::kernels
