// The tiny mixture-of-experts reference models (qwen3moe; gpt-oss with MXFP4 experts, attention
// sinks, sliding window and YaRN), and a qwen35moe file built from the qwen35 one (hybrid layers,
// distinct experts, a gated shared expert: tests/qwen35moe_from_dense.h) served over HTTP: routing
// is per token and batch-invariant, so the same greedy request gives the same text alone, batched
// with seven others, repeated with a prefix-cache hit, and as each of n = 3 samples.
#include <cstdio>
#include <filesystem>
#include <future>

#include <unistd.h>

#include "qwen35moe_from_dense.h"
#include "test_server_fixture.h"

namespace ubatch::test {
namespace {

class ServerMoe : public ::testing::TestWithParam<const char*> {
 public:
  std::string path() const { return reference_path(std::string("moe/models/") + GetParam() + ".gguf"); }
  // A prompt of token ids (the tiny models' vocabulary has 512 entries).
  static json prompt(int salt, int n = 40) {
    json ids = json::array();
    ids.push_back(1);
    for (int i = 1; i < n; ++i) ids.push_back(3 + (i * 37 + salt * 101) % 500);
    return ids;
  }
  static json request(int salt, int max_tokens = 24) {
    return {{"prompt", prompt(salt)}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  }
};

std::string moe_text(const Reply& r, int choice = 0) {
  json j = r.parsed();
  return j["choices"][choice]["text"].get<std::string>();
}

void check_alone_batched_cached_sampled(const std::string& path);

TEST_P(ServerMoe, AloneBatchedCachedAndSampledGiveTheSameText) {
  UBATCH_REQUIRE_REFERENCE();
  check_alone_batched_cached_sampled(path());
}

TEST(ServerQwen35Moe, AloneBatchedCachedAndSampledGiveTheSameText) {
  UBATCH_REQUIRE_REFERENCE();
  Result<std::unique_ptr<gguf::File>> dense = gguf::File::open(reference_path("hybrid/models/tiny-qwen35-f32.gguf"));
  ASSERT_TRUE(dense.is_ok()) << dense.message();
  Qwen35MoeFromDense o;
  o.expert_down_scale = {0.5f, 1.5f, -1.0f, 2.0f};
  o.shared_down_scale = 1;
  o.shared_gate_scale = 0.1f;
  const std::vector<uint8_t> bytes = qwen35moe_from_qwen35(*dense.value(), o);
  ASSERT_FALSE(bytes.empty());
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ubatch_server_qwen35moe_" + std::to_string(getpid()) + ".gguf")).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_TRUE(f);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  check_alone_batched_cached_sampled(path);
  std::filesystem::remove(path);
}

void check_alone_batched_cached_sampled(const std::string& path) {
  ServeOptions o;
  o.engine.n_parallel = 8;
  o.engine.n_batch = 128;
  o.n_ctx = 2048;
  std::unique_ptr<ServedModel> s = serve_model(path, o);
  ASSERT_TRUE(s);
  const json body = ServerMoe::request(0);
  Reply alone = post(s->port, "/v1/completions", body.dump());
  ASSERT_EQ(alone.status, 200) << alone.body;
  const std::string text = moe_text(alone);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(alone.parsed()["usage"]["completion_tokens"], 24);

  // The same prompt again: its prefix comes from the KV cache, same text.
  Reply again = post(s->port, "/v1/completions", body.dump());
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(moe_text(again), text);
  const json usage = again.parsed()["usage"];
  ASSERT_TRUE(usage.contains("prompt_tokens_details")) << usage.dump();
  EXPECT_GT(usage["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << usage.dump();

  // Batched with seven other requests in the same steps (their tokens share the experts).
  std::vector<std::future<Reply>> others;
  for (int k = 1; k <= 7; ++k) {
    const std::string other = ServerMoe::request(k + 10, 24).dump();
    others.push_back(std::async(std::launch::async, [&, other] { return post(s->port, "/v1/completions", other); }));
  }
  json fresh = body;
  fresh["prompt"][2] = body["prompt"][2].get<int>() + 1;  // no prefix to reuse: computed in the mix
  Reply in_mix = post(s->port, "/v1/completions", fresh.dump());
  for (auto& f : others) EXPECT_EQ(f.get().status, 200);
  ASSERT_EQ(in_mix.status, 200) << in_mix.body;
  Reply alone2 = post(s->port, "/v1/completions", fresh.dump());  // alone (prefix cached by now)
  ASSERT_EQ(alone2.status, 200);
  EXPECT_EQ(moe_text(in_mix), moe_text(alone2)) << "the text changed with the batch";

  // n = 3 greedy samples: each gives the text of the request alone.
  json three = body;
  three["n"] = 3;
  three["prompt"][3] = body["prompt"][3].get<int>() + 1;
  json one = three;
  one.erase("n");
  Reply r3 = post(s->port, "/v1/completions", three.dump());
  ASSERT_EQ(r3.status, 200) << r3.body;
  Reply r1 = post(s->port, "/v1/completions", one.dump());
  ASSERT_EQ(r1.status, 200);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(moe_text(r3, c), moe_text(r1)) << "sample " << c;
}

INSTANTIATE_TEST_SUITE_P(TinyMoe, ServerMoe, ::testing::Values("tiny-qwen3moe-q4_k_m", "tiny-gptoss-mxfp4_moe"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace ubatch::test
