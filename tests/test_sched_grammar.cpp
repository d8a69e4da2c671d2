// Grammar-constrained requests through the engine on a real (tiny) model: every sample is a
// sentence of its grammar and ends with `stop` when the grammar completes, `length` when
// max_tokens cuts it short (the text then a valid but unfinished prefix); samples of one
// request (n > 1, prompt KV forked) each carry their own grammar state; outputs are the
// same alone, batched with other requests, and across preemptions (batch invariance).
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "context/context.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "grammar_helpers.h"
#include "sched/engine.h"
#include "support.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::sched {
namespace {

struct GrammarFixture {
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Context> ctx;
};

GrammarFixture load_grammar(const std::string& rel, int32_t n_ctx) {
  GrammarFixture f;
  Result<std::unique_ptr<gguf::File>> file = gguf::File::open(test::reference_path(rel));
  EXPECT_TRUE(file.is_ok());
  f.file = std::shared_ptr<const gguf::File>(std::move(file.value()));
  Result<std::unique_ptr<Model>> m = Model::load(f.file);
  EXPECT_TRUE(m.is_ok());
  f.model = std::shared_ptr<Model>(std::move(m.value()));
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::from_gguf(*f.file);
  EXPECT_TRUE(t.is_ok());
  f.tok = std::move(t.value());
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_batch = 256;
  p.n_ubatch = 64;
  p.n_threads = 2;
  Result<std::unique_ptr<Context>> c = Context::create(f.model, p);
  EXPECT_TRUE(c.is_ok());
  f.ctx = std::move(c.value());
  return f;
}

struct GrammarOutcome {
  std::vector<std::vector<int32_t>> tokens;  // per sample
  std::vector<std::string> text;
  std::vector<FinishReason> finish;
  std::vector<std::string> error;
  bool done = false;
};

GrammarOutcome collect_grammar(Stream& s, int n = 1) {
  GrammarOutcome o;
  o.tokens.resize(static_cast<size_t>(n));
  o.text.resize(static_cast<size_t>(n));
  o.finish.resize(static_cast<size_t>(n), FinishReason::Error);
  o.error.resize(static_cast<size_t>(n));
  Event e;
  while (!o.done) {
    if (!s.next(e, std::chrono::seconds(120))) {
      ADD_FAILURE() << "request " << s.id() << " hung";
      break;
    }
    const auto i = static_cast<size_t>(e.index);
    switch (e.kind) {
      case Event::Kind::Token:
        if (e.token >= 0) o.tokens[i].push_back(e.token);
        o.text[i] += e.text;
        break;
      case Event::Kind::Finish:
        o.finish[i] = e.finish;
        o.error[i] = e.error;
        break;
      case Event::Kind::Done: o.done = true; break;
    }
  }
  return o;
}

// Bounded, so every sample completes well within max_tokens.
constexpr const char* kExpr = R"G(root ::= term (("+" | "-" | "*") term){0,3}
term ::= [1-9] [0-9]{0,2} | "(" [0-9]{1,2} ")")G";

Request seeded(const std::vector<int32_t>& prompt, uint64_t seed) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = 64;
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = seed;
  return r;
}

TEST(SchedGrammar, SamplesAreSentencesAndEndWithStop) {
  UBATCH_REQUIRE_REFERENCE();
  GrammarFixture f = load_grammar("models/tiny-llama-q8_0.gguf", 2048);
  EngineConfig cfg;
  cfg.n_parallel = 4;
  Engine engine(*f.ctx, *f.tok, cfg);
  auto g = engine.grammars().get(grammar::GrammarKind::Gbnf, kExpr);
  ASSERT_TRUE(g.is_ok()) << g.message();
  Request r = seeded({1, 20, 30, 40}, 11);
  r.n = 4;
  r.grammar = g.value();
  Engine::Submitted s = engine.submit(r);
  ASSERT_TRUE(s.ok()) << s.error_message;
  const GrammarOutcome o = collect_grammar(*s.stream, 4);
  std::set<std::string> distinct;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(o.finish[i], FinishReason::Stop) << o.text[i] << " " << o.error[i];
    EXPECT_TRUE(test::matches(g.value(), o.text[i])) << "sample " << i << ": '" << o.text[i] << "'";
    distinct.insert(o.text[i]);
  }
  EXPECT_GE(distinct.size(), 2u);  // each sample has its own seed and its own grammar state
  const MetricsSnapshot m = engine.metrics();
  EXPECT_GT(m.grammar_rows, 0u);
  EXPECT_GT(m.grammar_ms, 0.0);
}

TEST(SchedGrammar, MaxTokensMidStructureEndsWithLength) {
  UBATCH_REQUIRE_REFERENCE();
  GrammarFixture f = load_grammar("models/tiny-llama-q8_0.gguf", 2048);
  Engine engine(*f.ctx, *f.tok, EngineConfig{});
  auto g = engine.grammars().get(grammar::GrammarKind::JsonObject, "");
  ASSERT_TRUE(g.is_ok()) << g.message();
  Request r = seeded({1, 5, 6}, 3);
  r.max_tokens = 4;
  r.grammar = g.value();
  r.ignore_eos = true;
  Engine::Submitted s = engine.submit(r);
  ASSERT_TRUE(s.ok()) << s.error_message;
  const GrammarOutcome o = collect_grammar(*s.stream);
  EXPECT_EQ(o.finish[0], FinishReason::Length);
  EXPECT_EQ(o.tokens[0].size(), 4u);
  // The text is what the grammar allows so far, not completed or repaired.
  grammar::Matcher m(g.value());
  EXPECT_TRUE(m.accept_bytes(o.text[0])) << o.text[0];
  EXPECT_FALSE(m.can_end()) << o.text[0];
  EXPECT_EQ(o.text[0][0], '{');
}

// Request::stop_when ends each sample at the first token after which its own text so far
// satisfies the predicate (the server's end of a tool-call reply that repeats a call).
TEST(SchedGrammar, StopWhenEndsASampleAtItsFirstMatch) {
  UBATCH_REQUIRE_REFERENCE();
  GrammarFixture f = load_grammar("models/tiny-llama-q8_0.gguf", 2048);
  Engine engine(*f.ctx, *f.tok, EngineConfig{});
  Request r = seeded({1, 5, 6}, 5);
  r.n = 2;
  r.max_tokens = 48;
  r.ignore_eos = true;
  r.stop_when = [](std::string_view text) { return text.size() >= 12; };
  Engine::Submitted s = engine.submit(r);
  ASSERT_TRUE(s.ok()) << s.error_message;
  const GrammarOutcome o = collect_grammar(*s.stream, 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(o.finish[i], FinishReason::Stop) << o.text[i];
    EXPECT_GE(o.text[i].size(), 12u);
    ASSERT_FALSE(o.tokens[i].empty());
    EXPECT_LT(o.tokens[i].size(), 48u);
    // One token earlier the text was shorter: the sample ended at its first match.
    std::string before;
    for (size_t k = 0; k + 1 < o.tokens[i].size(); ++k) before += f.tok->token_to_piece(o.tokens[i][k]);
    EXPECT_LT(before.size(), 12u) << o.text[i];
  }
}

TEST(SchedGrammar, SameOutputAloneBatchedAndPreempted) {
  UBATCH_REQUIRE_REFERENCE();
  GrammarFixture f = load_grammar("models/tiny-llama-q8_0.gguf", 2048);
  const char* kList = R"G(root ::= "[" item ("," item){0,40} "]"
item ::= [a-z]{1,4} | [0-9]{1,3})G";
  std::vector<Request> constrained;
  {
    Engine probe(*f.ctx, *f.tok, EngineConfig{});
    auto g = probe.grammars().get(grammar::GrammarKind::Gbnf, kList);
    ASSERT_TRUE(g.is_ok()) << g.message();
    for (int i = 0; i < 4; ++i) {
      Request r = seeded({1, static_cast<int32_t>(50 + i), 60, 70}, 100 + static_cast<uint64_t>(i));
      if (i % 2 == 0) r.sampling.temperature = 0;  // greedy
      r.max_tokens = 120;
      r.grammar = g.value();
      r.ignore_eos = true;
      constrained.push_back(r);
    }
  }
  auto solo = [&](const Request& r) {
    f.ctx->kv().clear();
    EngineConfig cfg;
    cfg.n_parallel = 1;
    cfg.n_batch = 64;
    Engine engine(*f.ctx, *f.tok, cfg);
    Engine::Submitted s = engine.submit(r);
    EXPECT_TRUE(s.ok()) << s.error_message;
    return s.ok() ? collect_grammar(*s.stream) : GrammarOutcome{};
  };
  std::vector<GrammarOutcome> want;
  for (const Request& r : constrained) want.push_back(solo(r));
  f.ctx->kv().clear();

  // Together with unconstrained requests, two slots, urgent arrivals displacing them.
  EngineConfig cfg;
  cfg.n_parallel = 2;
  cfg.n_batch = 64;
  cfg.preempt_min_run_ms = 0;
  Engine engine(*f.ctx, *f.tok, cfg);
  std::vector<std::shared_ptr<Stream>> streams;
  for (const Request& r : constrained) {
    Engine::Submitted s = engine.submit(r);
    ASSERT_TRUE(s.ok()) << s.error_message;
    streams.push_back(s.stream);
  }
  for (int i = 0; i < 6; ++i) {
    for (int k = 0; k < 5000 && engine.metrics().generated_tokens < static_cast<uint64_t>(8 * (i + 1)); ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Request urgent = seeded({1, static_cast<int32_t>(200 + i)}, 7);
    urgent.max_tokens = 6;
    urgent.priority = 10;
    urgent.ignore_eos = true;
    Engine::Submitted s = engine.submit(urgent);
    ASSERT_TRUE(s.ok());
    collect_grammar(*s.stream);
  }
  for (size_t i = 0; i < constrained.size(); ++i) {
    const GrammarOutcome o = collect_grammar(*streams[i]);
    EXPECT_EQ(o.tokens[0], want[i].tokens[0]) << "request " << i;
    EXPECT_EQ(o.text[0], want[i].text[0]) << "request " << i;
    EXPECT_EQ(o.finish[0], want[i].finish[0]) << "request " << i;
  }
  EXPECT_GT(engine.metrics().preemptions, 0u);
}

TEST(SchedGrammar, GrammarForAnotherVocabularyIsInvalid) {
  UBATCH_REQUIRE_REFERENCE();
  GrammarFixture f = load_grammar("models/tiny-llama-q8_0.gguf", 256);
  Engine engine(*f.ctx, *f.tok, EngineConfig{});
  Request r;
  r.prompt = {1, 2, 3};
  r.grammar = test::compile_gbnf("root ::= \"a\"\n");  // a 257-token byte vocabulary
  Engine::Submitted s = engine.submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error_code, SubmitError::Code::Invalid);
  EXPECT_NE(s.error_message.find("compiled for a vocabulary of 257 tokens"), std::string::npos) << s.error_message;
}

}  // namespace
}  // namespace ubatch::sched
