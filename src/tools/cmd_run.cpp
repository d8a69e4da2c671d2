// `ubatch run`: generate text from a prompt with one sequence, through the scheduler on this
// thread (tools/generate.h): the same sampling, grammar constraint (--grammar FILE: GBNF,
// --json-schema FILE) and speculative decoding (--spec-*) as one request of `ubatch serve`.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <fmt/format.h>

#include "chat/chat_renderer.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "tools/command.h"
#include "tools/generate.h"
#include "tools/options.h"

namespace ubatch::tools {
namespace {

struct RunOptions {
  ModelOptions model;
  SamplingParams sampling;
  sched::EngineConfig engine;  // the speculation fields (--spec-*)
  std::string prompt = "The capital of France is";
  std::string prompt_file;
  int32_t n_predict = 128;
  bool chat = false;
  bool show_prompt = false;      // --chat: print the rendered prompt and exit
  std::string chat_template;     // --chat-template FILE|NAME
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

int run_generate(RunOptions o) {
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
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) return fmt::print(stderr, "error: cannot read --file {}\n", o.prompt_file), 1;
    o.prompt.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  Result<Loaded> loaded = load(o.model, true);
  if (!loaded) return fmt::print(stderr, "error: {}\n", loaded.message()), 1;
  Context& ctx = *loaded->context;
  const Tokenizer& tok = *loaded->tokenizer;

  // The prompt is plain text; --chat wraps it in the model's turn format, whose markup alone
  // becomes special tokens.
  SegmentedText text;
  text.content(o.prompt);
  bool chat_bos = tok.add_bos_default();  // --chat: no BOS when the template wrote it
  if (o.chat) {
    std::string source = chat_template_for(*loaded->model, tok);
    if (!o.chat_template.empty()) {
      Result<std::string> t = read_chat_template_option(o.chat_template);
      if (!t) return fmt::print(stderr, "error: {}\n", t.message()), 1;
      source = std::move(t.value());
    }
    const std::string bos = tok.bos() >= 0 ? tok.token_to_piece(tok.bos(), true) : "";
    const std::string eos = tok.eos() >= 0 ? tok.token_to_piece(tok.eos(), true) : "";
    auto renderer = chat::ChatRenderer::create(source, tok.chat_template_tool_use(), bos, eos);
    if (!renderer) return fmt::print(stderr, "error: --chat: {}\n", renderer.message()), 1;
    chat::ChatRenderInput in;
    in.messages.push_back({{"role", "user"}, {"content", o.prompt}});
    Result<SegmentedText> chat = renderer.value()->render(in);
    if (!chat) return fmt::print(stderr, "error: --chat: {}\n", chat.message()), 1;
    text = std::move(chat.value());
    chat_bos = renderer.value()->add_bos(text, tok.add_bos_default());
    if (o.show_prompt) {
      fmt::print("{}", text.text);
      return 0;
    }
  } else if (o.show_prompt) {
    return fmt::print(stderr, "error: --show-prompt needs --chat\n"), 1;
  }
  std::vector<int32_t> prompt = tok.tokenize(text, chat_bos && !o.no_bos);
  if (prompt.empty()) return fmt::print(stderr, "error: the prompt is empty\n"), 1;
  const int64_t need = static_cast<int64_t>(prompt.size()) + std::max(o.n_predict, 0);
  if (need > ctx.kv().n_cells())
    return fmt::print(stderr, "error: prompt ({} tokens) + n_predict ({}) exceeds the KV capacity (--n-ctx {})\n",
                      prompt.size(), o.n_predict, ctx.kv().n_cells()), 1;

  // The grammar, when asked for.
  sched::Request req;
  std::shared_ptr<const grammar::CompiledGrammar> compiled;  // for its stats after the run
  double compile_ms = 0.0;
  if (constrained) {
    grammar::GrammarKind kind{};
    std::string gtext;
    if (!read_constraint(o, kind, gtext)) return 1;
    grammar::GrammarCache grammars(tok);
    grammars.warm_up();  // the vocabulary, not timed as compilation
    const auto tc = Clock::now();
    auto g = grammars.get(kind, gtext);
    compile_ms = ms_since(tc);
    if (!g) return fmt::print(stderr, "error: {}: {}\n", o.grammar_file.empty() ? o.json_schema_file : o.grammar_file,
                              g.message()), 1;
    compiled = g.value();
    req.grammar = compiled;
  }

  if (!o.chat) fmt::print("{}", o.prompt);
  std::fflush(stdout);
  if (o.n_predict == 0) {  // nothing to generate: just evaluate the prompt
    const auto t0 = Clock::now();
    Batch batch;
    for (size_t start = 0; start < prompt.size(); start += ctx.params().n_batch) {
      batch.clear();
      const size_t end = std::min(prompt.size(), start + ctx.params().n_batch);
      for (size_t i = start; i < end; ++i) {
        batch.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
        if (i + 1 < prompt.size()) batch.mark_chunkable();  // as the scheduler flags a prompt
      }
      if (DecodeResult r = ctx.decode(batch); !r.ok()) return fmt::print(stderr, "error: {}\n", r.message), 1;
    }
    fmt::print("\n");
    if (o.perf)
      fmt::print(stderr, "\nperf: prompt eval     {:10.2f} ms / {:5d} tokens\n", ms_since(t0), prompt.size());
    return 0;
  }

  sched::EngineConfig cfg = o.engine;
  cfg.n_parallel = 1;
  cfg.n_batch = ctx.params().n_batch;
  req.prompt = std::move(prompt);
  req.sampling = o.sampling;
  req.max_tokens = o.n_predict;
  const int32_t n_prompt = static_cast<int32_t>(req.prompt.size());
  double first_ms = -1, last_ms = 0;
  int32_t n_gen = 0;
  sched::FinishReason finish = sched::FinishReason::Length;
  std::string error;
  Generated g = generate(ctx, tok, cfg, std::move(req), [&](const sched::Event& e, double ms) {
    if (e.kind == sched::Event::Kind::Finish) {
      finish = e.finish;
      error = e.error;
    }
    if (e.kind != sched::Event::Kind::Token) return;
    if (e.token >= 0) {
      if (first_ms < 0) first_ms = ms;
      last_ms = ms;
      ++n_gen;
    }
    fmt::print("{}", e.text);
    std::fflush(stdout);
  });
  if (!g.error.empty()) return fmt::print(stderr, "error: {}\n", g.error), 1;
  fmt::print("\n");
  if (finish == sched::FinishReason::Error) return fmt::print(stderr, "error: {}\n", error), 1;
  if (constrained && finish == sched::FinishReason::Length)
    fmt::print(stderr, "note: -n {} reached before the grammar completed: the output is incomplete (finish reason "
               "length)\n", o.n_predict);

  if (o.perf) {
    const sched::MetricsSnapshot& m = g.metrics;
    const double prompt_ms = first_ms >= 0 ? first_ms : g.wall_ms;  // the first token comes from the prompt pass
    const double gen_ms = first_ms >= 0 ? last_ms - first_ms : 0.0;
    const int32_t n_after = std::max(n_gen - 1, 0);
    fmt::print(stderr, "\nperf: load            {:10.2f} ms\n", loaded->load_ms);
    fmt::print(stderr, "{}", perf_weights_line(*loaded->model));
    fmt::print(stderr, "perf: prompt eval     {:10.2f} ms / {:5d} tokens ({:8.2f} ms/token, {:8.2f} tokens/s; to the first token)\n",
               prompt_ms, n_prompt, prompt_ms / n_prompt, 1000.0 * n_prompt / prompt_ms);
    fmt::print(stderr, "perf: generation      {:10.2f} ms / {:5d} tokens after the first ({:8.2f} ms/token, {:8.2f} tokens/s)\n",
               gen_ms, n_after, n_after ? gen_ms / n_after : 0.0, gen_ms > 0 ? 1000.0 * n_after / gen_ms : 0.0);
    fmt::print(stderr, "perf: steps           {} ({:.2f} tokens per decode step)\n", m.steps, m.tokens_per_seq_step());
    fmt::print(stderr, "perf: speculation     {} draft tokens in {} steps, {} accepted ({:.1f}%)\n", m.draft_tokens,
               m.spec_steps, m.draft_accepted, 100.0 * m.draft_acceptance());
    fmt::print(stderr, "perf: step model      {:.3f} ms + {:.4f} ms/token + {:.4f} ms/logits row\n", m.step_cost.a_ms,
               m.step_cost.b_ms_per_token, m.step_cost.c_ms_per_row);
    if (compiled) {
      const grammar::GrammarCacheStats st = compiled->stats();
      fmt::print(stderr, "perf: grammar         {:10.2f} ms / {:5d} rows ({:8.3f} ms/row: masks, masking, advance; "
                 "{} masks computed, {} cached; compiled in {:.2f} ms)\n",
                 m.grammar_ms, m.grammar_rows, m.grammar_rows ? m.grammar_ms / m.grammar_rows : 0.0, st.masks_computed,
                 st.mask_hits, compile_ms);
    }
    const KvStats kv = ctx.kv().stats();
    fmt::print(stderr, "perf: KV cache        peak {} of {} blocks used ({} tokens/block, {:.1f} MiB, {})\n",
               m.kv_peak_blocks_used, kv.n_blocks, ctx.kv().block_size(), ctx.kv().storage_bytes() / 1048576.0,
               o.model.kv_type);
    fmt::print(stderr, "perf: threads         {}\n", ctx.pool().n_threads());
  }
  return 0;
}

UBATCH_REGISTER_COMMAND("run", "generate text from a prompt", [](CLI::App& sub) -> std::function<int()> {
  auto o = std::make_shared<RunOptions>();
  add_model_options(sub, o->model);
  add_sampling_options(sub, o->sampling);
  add_spec_options(sub, o->engine);
  sub.add_option("-p,--prompt", o->prompt, "prompt text")->capture_default_str();
  sub.add_option("-f,--file", o->prompt_file, "read the prompt from this file (instead of -p)");
  sub.add_option("-n,--n-predict", o->n_predict, "tokens to generate")->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  sub.add_flag("--chat", o->chat, "wrap the prompt in the model's chat template (one user turn)");
  sub.add_flag("--show-prompt", o->show_prompt, "with --chat: print the prompt the model would see, and exit");
  sub.add_option("--chat-template", o->chat_template,
                 "with --chat: a family (gemma, llama3, chatml, llama2, phi3), a template file, or a template's text");
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
