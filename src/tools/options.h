// Options shared by subcommands (model, context, sampling) and loading what they name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "context/context.h"
#include "model/model.h"
#include "sched/engine.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::tools {

struct ModelOptions {
  std::string model;               // -m
  int32_t n_threads = 0;           // --threads (0: the default of common/cpu_topology.h)
  int32_t n_ctx = 0;               // --n-ctx (0: automatic, see ctx_sequences)
  int32_t ctx_sequences = 1;       // with n_ctx 0: auto_kv_cells(ctx_sequences, ...) (serve:
                                   // its --n-parallel)
  int32_t n_batch = 2048;          // --n-batch
  int32_t n_ubatch = 512;          // --n-ubatch
  float kv_cache_fraction = 0.0f;  // --kv-cache-fraction
  std::string kv_type = "f16";     // --kv-type f16|f32|q8_0
  std::string state_type = "f32";  // --state-type f32|bf16 (models with recurrent layers)
};

// Adds -m/--model, --threads, --n-ctx, --n-batch, --n-ubatch, --kv-cache-fraction, --kv-type,
// --state-type.
void add_model_options(CLI::App& app, ModelOptions& o);
// The tensor types --kv-type and --state-type name (as their checks allow: f16|f32|q8_0, f32|bf16).
TensorType kv_type_of(const std::string& name);
TensorType state_type_of(const std::string& name);
// Adds --spec-ngram, --spec-k, --spec-table, --spec-always (speculative decoding; docs/CLI.md) into the
// engine configuration's fields.
void add_spec_options(CLI::App& app, sched::EngineConfig& e);
// Adds --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty and (with_seed) -s/--seed.
void add_sampling_options(CLI::App& app, SamplingParams& p, bool with_seed = true);

struct Loaded {
  std::shared_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Context> context;
  double load_ms = 0.0;  // file mapping, validation and weight binding
};

// Loads model (+ tokenizer when with_tokenizer) and creates a context. Errors name the file.
Result<Loaded> load(const ModelOptions& o, bool with_tokenizer);

// One --perf line on weight memory: bytes in the file, bytes of the kernels' packed copies
// (kernels/packed_weight.h), the matmul SIMD level, and the process's resident set
// (/proc/self/statm; "?" where unavailable).
std::string perf_weights_line(const Model& model);

// The chat template to format conversations with: the model's `tokenizer.chat_template`, or
// when it has none, the family of its architecture (gemma3 → "gemma"), else "".
std::string chat_template_for(const Model& model, const Tokenizer& tokenizer);

// What the compute runs on, for the start-up log and `ubatch info`, one item per string: the
// CPU topology found (common/cpu_topology.h), the compute threads — `requested_threads` > 0:
// --threads, else the default and why — and the CPU features and kernel level the matmul runs at.
std::vector<std::string> machine_lines(int32_t requested_threads);

// --chat-template FILE|NAME: a family name (gemma, gemma2, gemma3, llama3, chatml, llama2,
// phi3) as it is; the path of a readable file: its text (a Jinja template); anything else:
// the value itself as a template's text. Errors: a path that exists but cannot be read.
Result<std::string> read_chat_template_option(const std::string& value);

// Parses "1,2,3" (commas or spaces) into ids; errors name the bad item.
Result<std::vector<int32_t>> parse_id_list(const std::string& text);

}  // namespace ubatch::tools
