// `ubatch batched -p PROMPT -np N -n LEN`: decode the prompt once, share its KV with N
// sequences, then decode all N together, each sampled independently (seed + i). Runs one
// request with n = N through the scheduler on this thread (tools/generate.h): the samples
// fork the first one's prompt KV (seq_cp, no copy), every step carries one token of each
// (plus speculative drafts where they pay, --spec-*). Prints every sequence's text and the
// timings.
#include <chrono>
#include <cstdio>
#include <fmt/format.h>

#include "tools/command.h"
#include "tools/generate.h"
#include "tools/options.h"

namespace ubatch::tools {
namespace {

struct BatchedOptions {
  ModelOptions model;
  SamplingParams sampling;
  sched::EngineConfig engine;  // the speculation fields (--spec-*)
  std::string prompt = "The capital of France is";
  int32_t n_parallel = 4;
  int32_t n_predict = 32;
  bool quiet = false;
};

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
  // Every step returns one row of logits per sequence (more with drafts, within n_batch).
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
    cp.kv_type = kv_type_of(mo.kv_type);
    cp.state_type = state_type_of(mo.state_type);
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

  std::vector<std::string> text(o.n_parallel);
  std::vector<int32_t> n_gen(o.n_parallel, 0);
  std::vector<double> done_ms(o.n_parallel, 0.0);
  double first_ms = -1;
  if (o.n_predict > 0) {
    sched::EngineConfig cfg = o.engine;
    cfg.n_parallel = o.n_parallel;
    cfg.n_batch = ctx.params().n_batch;
    sched::Request req;
    req.prompt = prompt;
    req.sampling = o.sampling;
    req.max_tokens = o.n_predict;
    req.n = o.n_parallel;
    Generated g = generate(ctx, tok, cfg, std::move(req), [&](const sched::Event& e, double ms) {
      const auto i = static_cast<size_t>(e.index);
      if (e.kind == sched::Event::Kind::Token) {
        text[i] += e.text;
        if (e.token >= 0) {
          ++n_gen[i];
          if (first_ms < 0) first_ms = ms;
        }
      } else if (e.kind == sched::Event::Kind::Finish) {
        // The end-of-generation token counts as generated, as the engine counts it.
        done_ms[i] = ms;
      }
    });
    if (!g.error.empty()) return fmt::print(stderr, "error: {}\n", g.error), 1;
    const sched::MetricsSnapshot& m = g.metrics;
    int64_t total = static_cast<int64_t>(m.generated_tokens);
    if (!o.quiet)
      for (int32_t i = 0; i < o.n_parallel; ++i) fmt::print("sequence {}:\n{}{}\n\n", i, o.prompt, text[i]);
    const double prompt_ms = first_ms >= 0 ? first_ms : g.wall_ms;
    const double gen_ms = g.wall_ms - prompt_ms;
    fmt::print(stderr, "batched: n_parallel {}, prompt {} tokens, {} steps, threads {}\n", o.n_parallel, n_prompt, m.steps,
               ctx.pool().n_threads());
    fmt::print(stderr, "batched: prompt eval   {:10.2f} ms / {:5d} tokens ({:8.2f} tokens/s; to the first token)\n",
               prompt_ms, n_prompt, 1000.0 * n_prompt / prompt_ms);
    fmt::print(stderr, "batched: generation    {:10.2f} ms / {:5d} tokens ({:8.2f} tokens/s aggregate)\n", gen_ms, total,
               gen_ms > 0 ? 1000.0 * total / gen_ms : 0.0);
    for (int32_t i = 0; i < o.n_parallel; ++i)
      fmt::print(stderr, "batched: sequence {:3d}  {:5d} tokens in {:9.2f} ms ({:8.2f} tokens/s)\n", i, n_gen[i],
                 done_ms[i], done_ms[i] > 0 ? 1000.0 * n_gen[i] / done_ms[i] : 0.0);
    fmt::print(stderr, "batched: speculation   {} draft tokens, {} accepted ({:.1f}%); {:.2f} tokens/step per sequence\n",
               m.draft_tokens, m.draft_accepted, 100.0 * m.draft_acceptance(), m.tokens_per_seq_step());
    const KvStats kv = ctx.kv().stats();
    fmt::print(stderr, "batched: KV used       peak {} of {} blocks ({} tokens/block; {} cells needed unshared)\n",
               m.kv_peak_blocks_used, kv.n_blocks, bs, n_kv_req);
  } else if (!o.quiet) {
    for (int32_t i = 0; i < o.n_parallel; ++i) fmt::print("sequence {}:\n{}\n\n", i, o.prompt);
  }
  return 0;
}

UBATCH_REGISTER_COMMAND("batched", "decode a prompt once and generate N sequences from it together",
                        [](CLI::App& sub) -> std::function<int()> {
  auto o = std::make_shared<BatchedOptions>();
  add_model_options(sub, o->model);
  add_sampling_options(sub, o->sampling);
  add_spec_options(sub, o->engine);
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
