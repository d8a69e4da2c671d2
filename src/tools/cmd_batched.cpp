// `ubatch batched -p PROMPT -np N -n LEN`: decode the prompt once, share its KV with N
// sequences (seq_cp, no copy), then decode all N together, one token each per step, each
// sampled independently (seed + i). Prints every sequence's text and the timings.
#include <chrono>
#include <cstdio>
#include <fmt/format.h>

#include "tools/command.h"
#include "tools/options.h"

namespace ubatch::tools {
namespace {

struct BatchedOptions {
  ModelOptions model;
  SamplingParams sampling;
  std::string prompt = "The capital of France is";
  int32_t n_parallel = 4;
  int32_t n_predict = 32;
  bool quiet = false;
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

int run_batched(BatchedOptions o) {
  const bool auto_ctx = o.model.n_ctx <= 0;
  // Load with a placeholder capacity when sizing automatically; the real one is known
  // after tokenizing the prompt.
  if (auto_ctx) o.model.n_ctx = 256;
  Result<Loaded> loaded = load(o.model, true);
  if (!loaded) return fmt::print(stderr, "error: {}\n", loaded.message()), 1;
  const Tokenizer& tok = *loaded->tokenizer;
  std::vector<int32_t> prompt = tok.tokenize(o.prompt, tok.add_bos_default(), false);
  if (prompt.empty()) return fmt::print(stderr, "error: the prompt is empty\n"), 1;
  const int32_t n_prompt = static_cast<int32_t>(prompt.size());
  // Every step returns one row of logits per sequence.
  const double logits_gib = double(o.n_parallel) * loaded->model->hparams().n_vocab * sizeof(float) / 1073741824.0;
  if (logits_gib > 2.0)
    return fmt::print(stderr, "error: -np {} needs {:.1f} GiB of logits per step ({} x {} floats); the limit is 2 GiB\n",
                      o.n_parallel, logits_gib, o.n_parallel, loaded->model->hparams().n_vocab), 1;
  const int64_t n_kv_req = n_prompt + int64_t{o.n_parallel} * o.n_predict;
  const int32_t bs = loaded->context->kv().block_size();
  if (auto_ctx) {
    // Room for the shared prompt plus every sequence's own blocks (its copy of the partly
    // filled prompt block and its generated tokens).
    ModelOptions mo = o.model;
    mo.n_ctx = static_cast<int32_t>(n_kv_req + int64_t{o.n_parallel} * 2 * bs);
    loaded->context.reset();
    ContextParams cp = {};
    cp.n_ctx = mo.n_ctx;
    cp.n_batch = std::max(mo.n_batch, o.n_parallel);
    cp.n_ubatch = mo.n_ubatch;
    cp.n_threads = mo.n_threads;
    cp.kv_type = mo.kv_type == "f32" ? TensorType::F32 : mo.kv_type == "q8_0" ? TensorType::Q8_0 : TensorType::F16;
    Result<std::unique_ptr<Context>> ctx = Context::create(loaded->model, cp);
    if (!ctx) return fmt::print(stderr, "error: {}\n", ctx.message()), 1;
    loaded->context = std::move(ctx.value());
  } else if (n_kv_req > loaded->context->kv().n_cells()) {
    return fmt::print(stderr,
                      "error: the run needs {} KV cells (prompt {} + {} sequences x {} tokens) but --n-ctx is {}\n",
                      n_kv_req, n_prompt, o.n_parallel, o.n_predict, loaded->context->kv().n_cells()), 1;
  }
  Context& ctx = *loaded->context;
  if (o.n_parallel > ctx.params().n_batch)
    return fmt::print(stderr, "error: -np {} exceeds --n-batch {}\n", o.n_parallel, ctx.params().n_batch), 1;

  std::vector<Sampler> samplers;
  for (int32_t i = 0; i < o.n_parallel; ++i) {
    SamplingParams sp = o.sampling;
    sp.seed = o.sampling.seed + static_cast<uint64_t>(i);
    samplers.emplace_back(sp, ctx.n_vocab());
    for (int32_t id : prompt) samplers.back().accept(id);
  }

  // 1. The prompt, once, as sequence 0; then shared with every other sequence.
  const auto t_prompt = Clock::now();
  Batch batch;
  int32_t last_row = 0;
  for (int32_t start = 0; start < n_prompt; start += ctx.params().n_batch) {
    batch.clear();
    const int32_t end = std::min(n_prompt, start + ctx.params().n_batch);
    for (int32_t i = start; i < end; ++i) batch.add(prompt[i], i, 0, i + 1 == n_prompt);
    DecodeResult r = ctx.decode(batch);
    if (!r.ok()) return fmt::print(stderr, "error: {}\n", r.message), 1;
    last_row = end - start - 1;
  }
  const double prompt_ms = ms_since(t_prompt);
  for (int32_t i = 1; i < o.n_parallel; ++i) ctx.kv().seq_cp(0, i);

  // 2. All sequences together, one token each per step.
  std::vector<std::string> text(o.n_parallel);
  std::vector<Utf8StreamDecoder> utf8(o.n_parallel);
  std::vector<int32_t> n_gen(o.n_parallel, 0), row(o.n_parallel, last_row);
  std::vector<double> done_ms(o.n_parallel, 0.0);
  std::vector<bool> live(o.n_parallel, o.n_predict > 0);
  std::vector<const float*> logits(o.n_parallel, ctx.logits(last_row));
  int32_t peak_blocks = ctx.kv().stats().n_blocks_used;
  int64_t n_steps = 0;
  const auto t_gen = Clock::now();
  for (int32_t pos = n_prompt;; ++pos) {
    batch.clear();
    for (int32_t i = 0; i < o.n_parallel; ++i) {
      if (!live[i]) continue;
      const int32_t id = samplers[i].sample(logits[i]);
      samplers[i].accept(id);
      ++n_gen[i];
      if (tok.is_eog(id)) { live[i] = false; done_ms[i] = ms_since(t_gen); continue; }
      text[i] += utf8[i].push(tok.token_to_piece(id));
      if (n_gen[i] >= o.n_predict) { live[i] = false; done_ms[i] = ms_since(t_gen); continue; }
      row[i] = batch.n_tokens();
      batch.add(id, pos, i, true);
    }
    if (batch.n_tokens() == 0) break;
    DecodeResult r = ctx.decode(batch);
    if (!r.ok()) return fmt::print(stderr, "error: {}\n", r.message), 1;
    ++n_steps;
    peak_blocks = std::max(peak_blocks, ctx.kv().stats().n_blocks_used);
    for (int32_t i = 0; i < o.n_parallel; ++i)
      if (live[i]) logits[i] = ctx.logits(row[i]);
  }
  const double gen_ms = ms_since(t_gen);
  int64_t total = 0;
  for (int32_t i = 0; i < o.n_parallel; ++i) total += n_gen[i];

  if (!o.quiet)
    for (int32_t i = 0; i < o.n_parallel; ++i)
      fmt::print("sequence {}:\n{}{}\n\n", i, o.prompt, text[i] + utf8[i].flush());
  fmt::print(stderr, "batched: n_parallel {}, prompt {} tokens, {} decode steps, threads {}\n", o.n_parallel,
             n_prompt, n_steps, ctx.pool().n_threads());
  fmt::print(stderr, "batched: prompt eval   {:10.2f} ms / {:5d} tokens ({:8.2f} tokens/s)\n", prompt_ms, n_prompt,
             1000.0 * n_prompt / prompt_ms);
  fmt::print(stderr, "batched: generation    {:10.2f} ms / {:5d} tokens ({:8.2f} tokens/s aggregate)\n", gen_ms,
             total, gen_ms > 0 ? 1000.0 * total / gen_ms : 0.0);
  for (int32_t i = 0; i < o.n_parallel; ++i)
    fmt::print(stderr, "batched: sequence {:3d}  {:5d} tokens in {:9.2f} ms ({:8.2f} tokens/s)\n", i, n_gen[i],
               done_ms[i], done_ms[i] > 0 ? 1000.0 * n_gen[i] / done_ms[i] : 0.0);
  const KvStats kv = ctx.kv().stats();
  fmt::print(stderr, "batched: KV used       peak {} of {} blocks ({} tokens/block; {} cells needed unshared)\n",
             peak_blocks, kv.n_blocks, bs, n_kv_req);
  return 0;
}

UBATCH_REGISTER_COMMAND("batched", "decode a prompt once and generate N sequences from it together",
                        [](CLI::App& sub) -> std::function<int()> {
  auto o = std::make_shared<BatchedOptions>();
  add_model_options(sub, o->model);
  add_sampling_options(sub, o->sampling);
  sub.add_option("-p,--prompt", o->prompt, "prompt text")->capture_default_str();
  sub.add_option("--n-parallel", o->n_parallel, "sequences generated together (-np)")->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub.add_option("-n,--n-predict", o->n_predict, "tokens to generate per sequence")->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub.add_flag("-q,--quiet", o->quiet, "do not print the generated texts");
  return [o] { return run_batched(*o); };
});

}  // namespace
}  // namespace ubatch::tools
