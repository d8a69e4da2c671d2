// End-to-end checks on the embedded default model (Gemma 3 270M Q4_K_M): greedy generation
// through the CLI, batched == run, seeds, and batch invariance on the real weights.
// Skipped, visibly, when the model is not installed (scripts/setup.sh installs it).
#include <gtest/gtest.h>

#include <cstring>
#include <regex>

#include "context/context.h"
#include "support.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

std::string run(const std::string& args, int* status = nullptr) {
  return test::run_command(test::ubatch_command() + " " + args + " 2>/dev/null", status);
}

TEST(RealModel, GreedyRunGivesASensibleContinuation) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  int status = -1;
  const std::string out = run("run -m " + test::default_model() + " -p 'The capital of France is' -n 12 --temp 0", &status);
  ASSERT_EQ(status, 0) << out;
  ASSERT_EQ(out.rfind("The capital of France is", 0), 0u) << out;
  const std::string cont = out.substr(std::strlen("The capital of France is"));
  EXPECT_GT(cont.size(), 10u) << out;
  // Plain words, not byte soup: mostly letters and spaces.
  size_t letters = 0;
  for (char c : cont) letters += std::isalpha(static_cast<unsigned char>(c)) || c == ' ' ? 1 : 0;
  EXPECT_GT(letters, cont.size() * 3 / 4) << out;
  // Deterministic.
  EXPECT_EQ(run("run -m " + test::default_model() + " -p 'The capital of France is' -n 12 --temp 0"), out);
}

TEST(RealModel, BatchedGreedyEqualsRunAndSeedsDiffer) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  const std::string prompt = "'Once upon a time'";
  const std::string solo = run("run -m " + test::default_model() + " -p " + prompt + " -n 10 --temp 0");
  int status = -1;
  const std::string batched = run("batched -m " + test::default_model() + " -p " + prompt + " -np 4 -n 10 --temp 0", &status);
  ASSERT_EQ(status, 0) << batched;
  // Four identical continuations, each equal to the single-sequence run.
  std::string trimmed = solo.substr(0, solo.find_last_not_of('\n') + 1);
  for (int i = 0; i < 4; ++i) {
    const std::string block = "sequence " + std::to_string(i) + ":\n" + trimmed + "\n";
    EXPECT_NE(batched.find(block), std::string::npos) << "sequence " << i << "\n" << batched << "\nvs run:\n" << solo;
  }
  // With sampling, sequences (seeded seed+i) differ.
  const std::string sampled = run("batched -m " + test::default_model() + " -p " + prompt +
                                  " -np 4 -n 24 --temp 1.0 --top-k 0 --top-p 1 --min-p 0 --seed 7");
  std::regex seq_re("sequence \\d+:\\n([^\\n]*)\\n");
  std::set<std::string> texts;
  for (auto it = std::sregex_iterator(sampled.begin(), sampled.end(), seq_re); it != std::sregex_iterator(); ++it)
    texts.insert((*it)[1]);
  EXPECT_GE(texts.size(), 3u) << sampled;
}

TEST(RealModel, LogitsAreBatchInvariant) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  Result<std::unique_ptr<Model>> m = Model::load_file(test::default_model());
  ASSERT_TRUE(m.is_ok()) << m.message();
  std::shared_ptr<Model> model(std::move(m.value()));
  auto make = [&](int32_t n_ubatch) {
    ContextParams p;
    p.n_ctx = 1024;
    p.n_ubatch = n_ubatch;
    Result<std::unique_ptr<Context>> c = Context::create(model, p);
    EXPECT_TRUE(c.is_ok());
    return std::move(c.value());
  };
  const std::vector<int32_t> a = {2, 818, 5279, 529, 7001, 563, 506, 5279, 529};
  const std::vector<int32_t> b = {2, 9259, 3324, 496, 990, 236764, 1009, 1};
  const int32_t n_vocab = model->hparams().n_vocab;
  // a alone, one chunk.
  auto solo = make(512);
  Batch batch;
  for (size_t i = 0; i < a.size(); ++i) batch.add(a[i], static_cast<int32_t>(i), 0, true);
  ASSERT_TRUE(solo->decode(batch).ok());
  std::vector<float> want(solo->logits(static_cast<int32_t>(a.size()) - 1),
                          solo->logits(static_cast<int32_t>(a.size()) - 1) + n_vocab);
  // a in chunks of 3, sharing every batch with b, ubatches of 4 rows.
  auto mixed = make(4);
  size_t ia = 0, ib = 0;
  const float* last = nullptr;
  while (ia < a.size()) {
    batch.clear();
    int32_t row_a_last = -1;
    for (int k = 0; k < 2 && ib < b.size(); ++k, ++ib) batch.add(b[ib], static_cast<int32_t>(ib), 1, true);
    for (int k = 0; k < 3 && ia < a.size(); ++k, ++ia) {
      row_a_last = batch.n_tokens();
      batch.add(a[ia], static_cast<int32_t>(ia), 0, ia + 1 == a.size());
    }
    ASSERT_TRUE(mixed->decode(batch).ok());
    if (ia == a.size()) last = mixed->logits(row_a_last);
  }
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(std::memcmp(want.data(), last, sizeof(float) * n_vocab), 0) << "logits differ with batch composition";
}

TEST(RealModel, TokenizerRoundTripsText) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  Result<std::unique_ptr<gguf::File>> f = gguf::File::open(test::default_model());
  ASSERT_TRUE(f.is_ok());
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*f.value());
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  for (const std::string s : {"Hello, world!", "Café déjà vu — naïve", "東京は日本の首都です。", "emoji 🙂🚀 ok",
                              "tab\there  and   spaces\n\nnew lines"}) {
    std::vector<int32_t> ids = (*tok)->tokenize(s, false, false);
    EXPECT_EQ((*tok)->detokenize(ids), s);
  }
}

}  // namespace
}  // namespace ubatch
