// `ubatch run`: generate text from a prompt with one sequence (the engine core end to end),
// optionally constrained by a grammar (--grammar FILE: GBNF, --json-schema FILE).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <fmt/format.h>

#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "tools/command.h"
#include "tools/options.h"

namespace ubatch::tools {
namespace {

struct RunOptions {
  ModelOptions model;
  SamplingParams sampling;
  std::string prompt = "The capital of France is";
  int32_t n_predict = 128;
  bool chat = false;
  bool perf = false;
  bool no_bos = false;
  std::string grammar_file;      // GBNF
  std::string json_schema_file;  // JSON Schema
  bool print_grammar = false;    // print the GBNF the constraint compiles from, and exit
};

// The constraint file's kind and text; false (printed) when it cannot be read.
bool read_constraint(const RunOptions& o, grammar::GrammarKind& kind, std::string& text) {
  const bool gbnf = !o.grammar_file.empty();
  const std::string& path = gbnf ? o.grammar_file : o.json_schema_file;
  std::ifstream in(path, std::ios::binary);
  if (!in) return fmt::print(stderr, "error: cannot read {}\n", path), false;
  std::stringstream text_in;
  text_in << in.rdbuf();
  kind = gbnf ? grammar::GrammarKind::Gbnf : grammar::GrammarKind::JsonSchema;
  text = text_in.str();
  return true;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int run_generate(const RunOptions& o) {
  const bool constrained = !o.grammar_file.empty() || !o.json_schema_file.empty();
  if (o.print_grammar) {
    grammar::GrammarKind kind{};
    std::string text;
    if (!constrained) return fmt::print(stderr, "error: --print-grammar needs --grammar or --json-schema\n"), 1;
    if (!read_constraint(o, kind, text)) return 1;
    Result<std::string> source = grammar::grammar_source(kind, text);
    if (!source) return fmt::print(stderr, "error: {}\n", source.message()), 1;
    fmt::print("{}", source.value());
    return 0;
  }
  Result<Loaded> loaded = load(o.model, true);
  if (!loaded) return fmt::print(stderr, "error: {}\n", loaded.message()), 1;
  Context& ctx = *loaded->context;
  const Tokenizer& tok = *loaded->tokenizer;

  // The prompt is plain text; --chat wraps it in the model's turn format, whose markup alone
  // becomes special tokens.
  SegmentedText text;
  text.content(o.prompt);
  if (o.chat) {
    Result<SegmentedText> chat = render_chat(chat_template_for(*loaded->model, tok), {{"user", o.prompt}}, true);
    if (!chat) return fmt::print(stderr, "error: --chat: {}\n", chat.message()), 1;
    text = std::move(chat.value());
  }
  std::vector<int32_t> prompt = tok.tokenize(text, tok.add_bos_default() && !o.no_bos);
  if (prompt.empty()) return fmt::print(stderr, "error: the prompt is empty\n"), 1;
  const int64_t need = static_cast<int64_t>(prompt.size()) + std::max(o.n_predict, 0);
  if (need > ctx.kv().n_cells())
    return fmt::print(stderr, "error: prompt ({} tokens) + n_predict ({}) exceeds the KV capacity (--n-ctx {})\n",
                      prompt.size(), o.n_predict, ctx.kv().n_cells()), 1;

  Sampler sampler(o.sampling, ctx.n_vocab());
  for (int32_t id : prompt) sampler.accept(id);

  // The grammar, when asked for.
  std::optional<grammar::Matcher> constraint;
  double compile_ms = 0.0;
  if (constrained) {
    grammar::GrammarKind kind{};
    std::string text;
    if (!read_constraint(o, kind, text)) return 1;
    grammar::GrammarCache grammars(tok);
    grammars.warm_up();  // the vocabulary, not timed as compilation
    const auto tc = Clock::now();
    auto g = grammars.get(kind, text);
    compile_ms = ms_since(tc);
    if (!g) return fmt::print(stderr, "error: {}: {}\n", o.grammar_file.empty() ? o.json_schema_file : o.grammar_file,
                              g.message()), 1;
    constraint.emplace(g.value());
  }

  // Prompt: fed in chunks of n_batch; logits only for the last row.
  const auto t_prompt = Clock::now();
  const int32_t n_batch = ctx.params().n_batch;
  Batch batch;
  int32_t last_row = 0;
  for (size_t start = 0; start < prompt.size(); start += n_batch) {
    batch.clear();
    const size_t end = std::min(prompt.size(), start + n_batch);
    for (size_t i = start; i < end; ++i) batch.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
    DecodeResult r = ctx.decode(batch);
    if (!r.ok()) return fmt::print(stderr, "error: {}\n", r.message), 1;
    last_row = static_cast<int32_t>(end - start - 1);
  }
  const double prompt_ms = ms_since(t_prompt);

  if (!o.chat) fmt::print("{}", o.prompt);
  std::fflush(stdout);
  Utf8StreamDecoder utf8;
  double sample_ms = 0.0, gen_ms = 0.0, grammar_ms = 0.0;
  int32_t n_gen = 0;
  const char* finish = "length";
  int32_t pos = static_cast<int32_t>(prompt.size());
  const float* logits = ctx.logits(last_row);
  for (; n_gen < o.n_predict; ++n_gen) {
    int32_t id = -1;
    if (constraint) {
      const auto tm = Clock::now();
      const std::shared_ptr<const grammar::TokenMask> mask = constraint->mask();
      if (mask->n_allowed == 0) {
        fmt::print(stderr, "\nerror: the grammar allows no token of the vocabulary here\n");
        return 1;
      }
      const float* masked = sampler.mask_logits(logits, mask->bits.data());
      grammar_ms += ms_since(tm);
      const auto ts = Clock::now();
      id = sampler.sample(masked, mask->bits.data());
      sample_ms += ms_since(ts);
      const auto ta = Clock::now();
      constraint->accept(id);
      grammar_ms += ms_since(ta);
    } else {
      const auto ts = Clock::now();
      id = sampler.sample(logits);
      sample_ms += ms_since(ts);
    }
    sampler.accept(id);
    if (tok.is_eog(id)) {
      finish = "stop";
      break;
    }
    fmt::print("{}", utf8.push(tok.token_to_piece(id)));
    std::fflush(stdout);
    if (constraint && constraint->is_complete()) {
      finish = "stop";
      ++n_gen;
      break;
    }
    if (n_gen + 1 == o.n_predict) { ++n_gen; break; }
    const auto tg = Clock::now();
    batch.clear();
    batch.add(id, pos++, 0, true);
    DecodeResult r = ctx.decode(batch);
    gen_ms += ms_since(tg);
    if (!r.ok()) return fmt::print(stderr, "\nerror: {}\n", r.message), 1;
    logits = ctx.logits(0);
  }
  fmt::print("{}\n", utf8.flush());
  if (constraint && std::string(finish) == "length")
    fmt::print(stderr, "note: -n {} reached before the grammar completed: the output is incomplete (finish reason "
               "length)\n", o.n_predict);

  if (o.perf) {
    const int32_t n_eval = std::max(n_gen - 1, 0);  // decode passes after the prompt
    fmt::print(stderr, "\nperf: load            {:10.2f} ms\n", loaded->load_ms);
    fmt::print(stderr, "{}", perf_weights_line(*loaded->model));
    fmt::print(stderr, "perf: prompt eval     {:10.2f} ms / {:5d} tokens ({:8.2f} ms/token, {:8.2f} tokens/s)\n",
               prompt_ms, prompt.size(), prompt_ms / prompt.size(), 1000.0 * prompt.size() / prompt_ms);
    fmt::print(stderr, "perf: generation      {:10.2f} ms / {:5d} decodes ({:8.2f} ms/token, {:8.2f} tokens/s; the first token comes from the prompt pass)\n",
               gen_ms, n_eval, n_eval ? gen_ms / n_eval : 0.0, gen_ms > 0 ? 1000.0 * n_eval / gen_ms : 0.0);
    fmt::print(stderr, "perf: sampling        {:10.2f} ms / {:5d} samples ({:8.3f} ms/sample)\n", sample_ms,
               n_gen, n_gen ? sample_ms / n_gen : 0.0);
    if (constraint) {
      const grammar::GrammarCacheStats st = constraint->grammar().stats();
      fmt::print(stderr, "perf: grammar         {:10.2f} ms / {:5d} samples ({:8.3f} ms/sample: masks, masking, advance; "
                 "{} masks computed, {} cached; compiled in {:.2f} ms)\n",
                 grammar_ms, n_gen, n_gen ? grammar_ms / n_gen : 0.0, st.masks_computed, st.mask_hits, compile_ms);
    }
    const KvStats kv = ctx.kv().stats();
    fmt::print(stderr, "perf: KV cache        {} of {} blocks used ({} tokens/block, {:.1f} MiB, {})\n",
               kv.n_blocks_used, kv.n_blocks, ctx.kv().block_size(),
               ctx.kv().storage_bytes() / 1048576.0, o.model.kv_type);
    fmt::print(stderr, "perf: threads         {}\n", ctx.pool().n_threads());
  }
  return 0;
}

UBATCH_REGISTER_COMMAND("run", "generate text from a prompt", [](CLI::App& sub) -> std::function<int()> {
  auto o = std::make_shared<RunOptions>();
  add_model_options(sub, o->model);
  add_sampling_options(sub, o->sampling);
  sub.add_option("-p,--prompt", o->prompt, "prompt text")->capture_default_str();
  sub.add_option("-n,--n-predict", o->n_predict, "tokens to generate")->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  sub.add_flag("--chat", o->chat, "wrap the prompt in the model's chat template (one user turn)");
  sub.add_flag("--no-bos", o->no_bos, "do not prepend BOS");
  sub.add_flag("--perf", o->perf, "print timings at exit");
  CLI::Option* g = sub.add_option("--grammar", o->grammar_file, "constrain the output to a GBNF grammar (file)");
  sub.add_option("--json-schema", o->json_schema_file, "constrain the output to JSON valid under a JSON Schema (file)")
      ->excludes(g);
  sub.add_flag("--print-grammar", o->print_grammar,
               "print the GBNF the --grammar / --json-schema constraint compiles from, and exit (no model is loaded)");
  return [o] { return run_generate(*o); };
});

}  // namespace
}  // namespace ubatch::tools
