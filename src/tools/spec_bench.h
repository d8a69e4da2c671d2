// `ubatch bench --spec`: single-sequence generation from prompt files with speculative
// decoding off and on, timed side by side. For each round, each prompt, each --spec setting
// (the order of the settings alternates between rounds), one request runs to completion
// through the scheduler (tools/generate.h) on a fresh scheduler, so every run learns its
// step-time model and acceptance estimates from scratch. Reported per prompt and setting:
// generated tokens, generation tokens/s (tokens after the first / time from the first token
// to the last; min, median and max over rounds), the speedup over the setting "0" (speculation
// off) as min / median / max of the per-round ratios, draft acceptance, tokens per step, and
// whether the output equals that of the first setting in every round.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "context/context.h"
#include "sched/engine.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::tools {

struct SpecSetting {
  int32_t ngram = sched::EngineConfig{}.spec_ngram;  // --spec-ngram
  int32_t k = 0;        // --spec-k; 0: speculation off
  bool always = false;  // --spec-always
  std::string name() const;  // "off", "n3 k8", "n3 k8 always"
};

// Parses "0,8,4:16,8a": K, or N:K (N the n-gram length; default the engine's), with a trailing "a" for
// --spec-always. Errors name the bad item.
Result<std::vector<SpecSetting>> parse_spec_settings(const std::string& text);

struct SpecBenchOptions {
  std::vector<std::string> prompt_files;  // read as text, tokenized with BOS
  std::vector<SpecSetting> settings;
  SamplingParams sampling;
  int32_t n_gen = 256;
  int reps = 3;
};

struct SpecBenchRow {
  std::string prompt;  // file name
  SpecSetting setting;
  int32_t n_prompt = 0;
  int32_t n_gen = 0;                // tokens generated (the same for every setting when outputs agree)
  std::vector<double> gen_tps;      // per round
  std::vector<double> speedup;      // per round: this setting's rate / the off setting's
  double acceptance = 0;            // draft tokens accepted / verified, all rounds
  double tokens_per_step = 0;       // tokens per decode step, all rounds
  bool same_output = true;          // equal to the first setting's output in every round
};

// Runs the benchmark on ctx (progress on stderr). Errors: unreadable prompt files, requests
// that do not fit the context.
Result<std::vector<SpecBenchRow>> run_spec_bench(Context& ctx, const Tokenizer& tok, const SpecBenchOptions& o);

std::string format_spec_markdown(const std::vector<SpecBenchRow>& rows);
std::string format_spec_csv(const std::vector<SpecBenchRow>& rows);
nlohmann::json spec_json(const std::vector<SpecBenchRow>& rows);

}  // namespace ubatch::tools
