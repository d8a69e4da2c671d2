#include "loadgen/load_mix.h"

#include <random>
#include <sstream>

#include <fmt/format.h>

namespace ubatch::loadgen {

Result<std::vector<MixClass>> parse_mix(const std::string& text) {
  std::vector<MixClass> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    MixClass c;
    std::string rest = item;
    if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
      const std::string w = rest.substr(colon + 1);
      size_t used = 0;
      try {
        c.weight = std::stod(w, &used);
      } catch (...) {
        used = 0;
      }
      if (used == 0 || used != w.size() || !(c.weight > 0))
        return Status::error(fmt::format("--mix '{}': the weight must be a positive number", item));
      rest = rest.substr(0, colon);
    }
    if (const size_t at = rest.find('@'); at != std::string::npos) {
      c.model = rest.substr(at + 1);
      rest = rest.substr(0, at);
    }
    c.kind = rest;
    if (c.kind == "chat") c.endpoint = "/v1/chat/completions";
    else if (c.kind == "completion") c.endpoint = "/v1/completions";
    else if (c.kind == "embedding") c.endpoint = "/v1/embeddings";
    else return Status::error(fmt::format("--mix '{}': the kind must be chat, completion or embedding", item));
    out.push_back(std::move(c));
  }
  if (out.empty()) return Status::error("--mix: no entry (e.g. chat@a:2,completion@b:1,embedding@b:1)");
  return out;
}

const MixClass& pick_class(const std::vector<MixClass>& mix, uint64_t seed, int64_t index) {
  // Its own generator (seed and index mixed), so the mix leaves prompts and lengths as they were.
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), 0x6d697865u,
                    static_cast<uint32_t>(index), static_cast<uint32_t>(static_cast<uint64_t>(index) >> 32)};
  std::mt19937_64 rng(seq);
  double total = 0;
  for (const MixClass& c : mix) total += c.weight;
  double x = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (const MixClass& c : mix) {
    if (x < c.weight) return c;
    x -= c.weight;
  }
  return mix.back();
}

std::map<std::string, ClassReport> summarize_kinds(const std::vector<RequestResult>& requests) {
  std::map<std::string, ClassReport> out;
  std::map<std::string, std::vector<RequestResult>> by_kind;
  for (const RequestResult& r : requests)
    if (!r.kind.empty()) by_kind[r.kind].push_back(r);
  for (auto& [kind, rs] : by_kind) {
    // summarize_class selects by the urgent flag: hand it this kind's requests as one class.
    for (RequestResult& r : rs) r.urgent = false;
    out[kind] = summarize_class(rs, false);
  }
  return out;
}

std::map<std::string, double> busy_seconds_delta(const std::string& before, const std::string& after) {
  auto parse = [](const std::string& text) {
    std::map<std::string, double> m;
    std::stringstream in(text);
    std::string line;
    static const std::string kPrefix = "ubatch_busy_seconds_total{model=\"";
    while (std::getline(in, line)) {
      if (line.compare(0, kPrefix.size(), kPrefix) != 0) continue;
      const size_t end = line.find("\"}", kPrefix.size());
      if (end == std::string::npos) continue;
      m[line.substr(kPrefix.size(), end - kPrefix.size())] = std::strtod(line.c_str() + end + 2, nullptr);
    }
    return m;
  };
  const std::map<std::string, double> a = parse(before), b = parse(after);
  std::map<std::string, double> out;
  for (const auto& [model, v] : b) {
    // Loaded during the run, or reloaded (its counters started again): what it has now.
    auto it = a.find(model);
    out[model] = it != a.end() && it->second <= v ? v - it->second : v;
  }
  return out;
}

}  // namespace ubatch::loadgen
