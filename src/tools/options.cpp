#include "tools/options.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <sstream>

#include "tools/command.h"

#include <unistd.h>

#include <cstdio>

#include "common/cpu_topology.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "common/large_buffer.h"

namespace ubatch::tools {

void add_model_options(CLI::App& app, ModelOptions& o) {
  o.model = default_model_path();
  app.add_option("-m,--model", o.model, "GGUF model file")->capture_default_str();
  app.add_option("-t,--threads", o.n_threads,
                 "compute threads (0: one per physical core; on a CPU with big and little cores, one per big core, "
                 "pinned there; `ubatch info` shows the choice)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  app.add_option("-c,--n-ctx", o.n_ctx,
                 "KV cache capacity in tokens, all sequences (0: min(4096, trained context) per parallel "
                 "sequence, within a quarter of available memory)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 24));
  app.add_option("-b,--n-batch", o.n_batch, "most tokens per decode step (logical batch)")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-u,--n-ubatch", o.n_ubatch, "most tokens per forward pass (physical micro-batch)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--kv-cache-fraction", o.kv_cache_fraction,
                 "size the KV cache to this share of available memory (overrides --n-ctx)")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--kv-type", o.kv_type, "KV cache storage type")
      ->capture_default_str()->check(CLI::IsMember({"f16", "f32", "q8_0"}));
  app.add_option("--state-type", o.state_type,
                 "recurrent state storage of hybrid models (Gated DeltaNet's matrices): bf16 halves its bytes per "
                 "sequence and snapshot, rounding the state after every token")
      ->capture_default_str()->check(CLI::IsMember({"f32", "bf16"}));
}

TensorType kv_type_of(const std::string& name) {
  return name == "f32" ? TensorType::F32 : name == "q8_0" ? TensorType::Q8_0 : TensorType::F16;
}

TensorType state_type_of(const std::string& name) { return name == "bf16" ? TensorType::BF16 : TensorType::F32; }

void add_spec_options(CLI::App& app, sched::EngineConfig& e) {
  app.add_option("--spec-ngram", e.spec_ngram,
                 "speculative decoding: longest n-gram of the sequence's own tokens matched to draft from "
                 "(prompt lookup; 0: off)")
      ->capture_default_str()->check(CLI::Range(0, 16));
  app.add_option("--spec-k", e.spec_k, "speculative decoding: most draft tokens per sequence per step (0: off)")
      ->capture_default_str()->check(CLI::Range(0, 64));
  app.add_option("--spec-table", e.spec_table,
                 "speculative decoding: entries of a server-wide n-gram table of finished outputs, drafting "
                 "where a sequence's own tokens have no match (0: off; bytes: entries x (16 + 4 x spec-k))")
      ->capture_default_str()->check(CLI::Range(0, 1 << 24));
  app.add_flag("--spec-always", e.spec_always,
               "speculative decoding: draft whenever a draft exists, up to --spec-k, instead of only where the "
               "measured step-time model says it pays (fixed-k speculation, for comparison)");
}

void add_sampling_options(CLI::App& app, SamplingParams& p, bool with_seed) {
  app.add_option("--temp", p.temperature, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", p.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", p.top_p, "top-p / nucleus (1: off)")->capture_default_str();
  app.add_option("--min-p", p.min_p, "min-p (0: off)")->capture_default_str();
  app.add_option("--repeat-penalty", p.repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
  app.add_option("--repeat-last-n", p.repeat_last_n, "tokens the repetition penalty looks back over")
      ->capture_default_str();
  app.add_option("--presence-penalty", p.presence_penalty, "presence penalty")->capture_default_str();
  app.add_option("--frequency-penalty", p.frequency_penalty, "frequency penalty")->capture_default_str();
  if (with_seed) app.add_option("-s,--seed", p.seed, "random seed")->capture_default_str();
}

Result<Loaded> load(const ModelOptions& o, bool with_tokenizer) {
  // Decide the matmul level (and run the AMX self-check, which forks) while the process is
  // still small, before the model is mapped and packed.
  kernels::matmul_simd_level();
  Loaded out;
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::unique_ptr<gguf::File>> file = gguf::File::open(o.model);
  if (!file) return file.status();
  std::shared_ptr<const gguf::File> shared(std::move(file.value()));
  Result<std::unique_ptr<Model>> model = Model::load(shared);
  if (!model) return Status::error(fmt::format("{}: {}", o.model, model.message()));
  out.model = std::shared_ptr<Model>(std::move(model.value()));
  if (with_tokenizer) {
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*shared);
    if (!tok) return Status::error(fmt::format("{}: {}", o.model, tok.message()));
    out.tokenizer = std::move(tok.value());
  }
  ContextParams cp;
  const int32_t trained = out.model->hparams().n_ctx_train;
  cp.kv_type = kv_type_of(o.kv_type);
  cp.state_type = state_type_of(o.state_type);
  cp.n_ctx = o.n_ctx > 0 ? o.n_ctx
                         : auto_kv_cells(o.ctx_sequences, trained, kv_bytes_per_token(out.model->hparams(), cp.kv_type),
                                         available_memory_bytes());
  cp.kv_cache_fraction = o.kv_cache_fraction;
  cp.n_batch = o.n_batch;
  cp.n_ubatch = o.n_ubatch;
  cp.n_threads = o.n_threads;
  Result<std::unique_ptr<Context>> ctx = Context::create(out.model, cp);
  if (!ctx) return ctx.status();
  out.context = std::move(ctx.value());
  const std::vector<MixerKind>& mixers = out.model->hparams().layer_mixer;
  if (cp.state_type == TensorType::BF16 &&
      std::find(mixers.begin(), mixers.end(), MixerKind::GatedDeltaNet) == mixers.end())
    fmt::print(stderr, "warning: --state-type bf16 changes nothing for {}: it has no Gated DeltaNet layer (the only "
                       "state kept in BF16)\n", o.model);
  out.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string chat_template_for(const Model& model, const Tokenizer& tokenizer) {
  if (!tokenizer.chat_template().empty()) return tokenizer.chat_template();
  const std::string& arch = model.hparams().arch;
  if (arch.rfind("gemma", 0) == 0) return "gemma";  // Gemma GGUFs often ship without a template
  return "";
}

Result<std::string> read_chat_template_option(const std::string& value) {
  static const char* kFamilies[] = {"gemma", "gemma2", "gemma3", "llama3", "chatml", "llama2", "phi3"};
  for (const char* f : kFamilies)
    if (value == f) return value;
  std::error_code ec;
  if (value.empty() || value.size() > 4096 || !std::filesystem::is_regular_file(value, ec)) return value;
  std::ifstream in(value, std::ios::binary);
  if (!in) return Status::error(fmt::format("--chat-template: cannot read {}", value));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Result<std::vector<int32_t>> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::string item;
  std::string norm = text;
  for (char& c : norm)
    if (c == ',') c = ' ';
  std::istringstream in(norm);
  while (in >> item) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || v < INT32_MIN || v > INT32_MAX)
      return Status::error(fmt::format("bad token id '{}'", item));
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

}  // namespace ubatch::tools

namespace ubatch::tools {

std::string perf_weights_line(const Model& model) {
  std::string rss = "?";
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    long pages_total = 0, pages_resident = 0;
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) == 2)
      rss = fmt::format("{:.1f} MiB", static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0);
    std::fclose(f);
  }
  return fmt::format("perf: weights         {:.1f} MiB in the file, {:.1f} MiB packed for the kernels; resident set {}\n"
                     "perf: {}\n"
                     "perf: matmul levels   {}\n",
                     static_cast<double>(model.weight_bytes()) / 1048576.0,
                     static_cast<double>(model.packed_bytes()) / 1048576.0, rss, huge_page_summary(),
                     kernels::describe_matmul_levels());
}

std::vector<std::string> machine_lines(int32_t requested_threads) {
  std::vector<std::string> out;
  std::string topology;
  const ThreadChoice choice = default_thread_choice(&topology);
  out.push_back("cpu topology: " + topology);
  if (requested_threads > 0)
    out.push_back(fmt::format("compute: {} thread{} (--threads; the default here: {})", requested_threads,
                              requested_threads == 1 ? "" : "s", choice.reason));
  else
    out.push_back(fmt::format("compute: {} (default; --threads overrides)", choice.reason));
  const kernels::CpuFeatures& f = kernels::cpu_features();
  std::string features;
  auto add = [&](bool on, const char* name) {
    if (on) features += (features.empty() ? "" : " ") + std::string(name);
  };
  add(f.avx2, "avx2+fma+f16c");
  add(f.avx512, "avx512f/bw/vl/dq");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx_vnni, "avx_vnni");
  add(f.amx_int8, "amx_int8");
  add(f.os_amx, "os_amx");
  add(f.neon, "neon");
  add(f.dotprod, "dotprod");
  add(f.i8mm, "i8mm");
  std::string lowered;
  const kernels::SimdLevel level = kernels::matmul_simd_level(&lowered);
  const std::string why = !lowered.empty() ? lowered : kernels::simd_level_reason();
  out.push_back(fmt::format("cpu features: {}; kernel level: {}{}", features.empty() ? "none the kernels use" : features,
                            kernels::simd_level_name(level), why.empty() ? "" : " (" + why + ")"));
  out.push_back("matmul levels: " + kernels::describe_matmul_levels());
  return out;
}

}  // namespace ubatch::tools
