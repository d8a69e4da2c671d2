// A mix of request kinds for `ubatch load --mix`: chat on one model, completions on another,
// embeddings, each with a weight — the traffic of a server that holds several models
// (docs/API.md, "Several models"). Each request's kind is a seeded draw of its own (the
// prompts and lengths stay those of the same run without a mix). The report gives each
// kind's outcome (ClassReport) and, read from the server's /metrics before and after, each
// model's busy time: its share of the machine.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/load_classes.h"
#include "loadgen/load_client.h"
#include "common/status.h"

namespace ubatch::loadgen {

struct MixClass {
  std::string kind;      // chat, completion, embedding
  std::string model;     // "" : none sent (the server's default for the endpoint)
  double weight = 1;     // > 0
  std::string endpoint;  // /v1/chat/completions, /v1/completions, /v1/embeddings
  std::string label() const { return model.empty() ? kind : kind + "@" + model; }
};

// "chat@smollm2:2,completion@gemma:1,embedding@gemma:1": comma-separated KIND[@MODEL][:WEIGHT]
// (weight 1 when omitted). Errors name the entry: unknown kind, bad weight, empty.
Result<std::vector<MixClass>> parse_mix(const std::string& text);

// The class of request `index` (a seeded draw by weight).
const MixClass& pick_class(const std::vector<MixClass>& mix, uint64_t seed, int64_t index);

// Per kind: the requests whose RequestResult::kind is the class's label.
std::map<std::string, ClassReport> summarize_kinds(const std::vector<RequestResult>& requests);

// Each model's busy time (ubatch_busy_seconds_total{model}) between two /metrics texts, in
// seconds: for a model absent before, or whose counter went back (reloaded), its value after.
std::map<std::string, double> busy_seconds_delta(const std::string& before, const std::string& after);

}  // namespace ubatch::loadgen
