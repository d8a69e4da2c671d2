// The tiny hybrid reference models (qwen35: Gated DeltaNet + gated attention; lfm2: short
// convolutions + attention) served over HTTP: their recurrent state goes through every batching
// feature with the same greedy text — a repeated prompt hits the prefix cache (state snapshot),
// a request alone, batched with seven others, and with n = 3 gives the same text, a request
// preempted for memory resumes identically, and speculation on and off agree; a prompt of many
// 16-position chunks gives the same log-probabilities whatever the step budget. A parameter ending
// in "@bf16" runs the model with a BF16 recurrent state (--state-type bf16).
#include <chrono>
#include <future>
#include <thread>
#include <tuple>

#include "test_server_fixture.h"

namespace ubatch::test {
namespace {

class ServerHybrid : public ::testing::TestWithParam<const char*> {
 protected:
  std::string param() const { return GetParam(); }
  std::string path() const {
    return reference_path("hybrid/models/" + param().substr(0, param().find('@')) + ".gguf");
  }
  // Serve options with this parameter's state type.
  ServeOptions options() const {
    ServeOptions o;
    if (param().ends_with("@bf16")) o.state_type = TensorType::BF16;
    return o;
  }
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

std::string hybrid_text(const Reply& r, int choice = 0) {
  json j = r.parsed();
  return j["choices"][choice]["text"].get<std::string>();
}

TEST_P(ServerHybrid, PrefixCacheBatchAndSamplesGiveTheSameText) {
  UBATCH_REQUIRE_REFERENCE();
  ServeOptions o = options();
  o.engine.n_parallel = 8;
  o.engine.n_batch = 128;
  o.n_ctx = 2048;
  std::unique_ptr<ServedModel> s = serve_model(path(), o);
  ASSERT_TRUE(s);
  const json body = request(0);
  Reply alone = post(s->port, "/v1/completions", body.dump());
  ASSERT_EQ(alone.status, 200) << alone.body;
  const std::string text = hybrid_text(alone);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(alone.parsed()["usage"]["completion_tokens"], 24);

  // The same prompt again: its prefix comes from the cache (a state snapshot), same text.
  Reply again = post(s->port, "/v1/completions", body.dump());
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(hybrid_text(again), text);
  const json usage = again.parsed()["usage"];
  ASSERT_TRUE(usage.contains("prompt_tokens_details")) << usage.dump();
  EXPECT_GT(usage["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << usage.dump();
  std::map<std::string, double> m = metrics(s->port);
  EXPECT_GT(m["ubatch_state_snapshots"], 0);
  EXPECT_GT(m["ubatch_state_snapshot_bytes"], 0);

  // Batched with seven other requests in the same steps.
  std::vector<std::future<Reply>> others;
  for (int k = 1; k <= 7; ++k) {
    const std::string other = request(k, 20 + k).dump();
    others.push_back(std::async(std::launch::async, [&, other] { return post(s->port, "/v1/completions", other); }));
  }
  json fresh = body;
  fresh["prompt"][1] = body["prompt"][1].get<int>() + 1;  // no prefix to reuse: computed in the mix
  Reply mixed_alone_ref = post(s->port, "/v1/completions", fresh.dump());
  for (auto& f : others) EXPECT_EQ(f.get().status, 200);
  std::vector<std::future<Reply>> again_mix;
  for (int k = 1; k <= 7; ++k) {
    json other = request(k + 10, 24);
    again_mix.push_back(std::async(std::launch::async, [&, other] { return post(s->port, "/v1/completions", other.dump()); }));
  }
  json fresh2 = body;
  fresh2["prompt"][2] = body["prompt"][2].get<int>() + 1;
  Reply in_mix = post(s->port, "/v1/completions", fresh2.dump());
  for (auto& f : again_mix) EXPECT_EQ(f.get().status, 200);
  ASSERT_EQ(in_mix.status, 200);
  Reply alone2 = post(s->port, "/v1/completions", fresh2.dump());  // alone (prefix cached by now)
  EXPECT_EQ(hybrid_text(in_mix), hybrid_text(alone2)) << "the text changed with the batch";
  EXPECT_EQ(mixed_alone_ref.status, 200);

  // n = 3 greedy samples fork the prompt's state: each gives the text of the request alone.
  json three = body;
  three["n"] = 3;
  three["prompt"][3] = body["prompt"][3].get<int>() + 1;
  json one = three;
  one.erase("n");
  Reply r3 = post(s->port, "/v1/completions", three.dump());
  ASSERT_EQ(r3.status, 200) << r3.body;
  Reply r1 = post(s->port, "/v1/completions", one.dump());
  ASSERT_EQ(r1.status, 200);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(hybrid_text(r3, c), hybrid_text(r1)) << "sample " << c;
}

TEST_P(ServerHybrid, APreemptedRequestResumesWithTheSameText) {
  UBATCH_REQUIRE_REFERENCE();
  ServeOptions o = options();
  o.engine.n_parallel = 2;
  o.engine.n_batch = 64;
  o.n_ctx = 256;  // 16 blocks: two requests of 40 + 150 tokens cannot both stay
  std::shared_ptr<sched::StepGate> gate = std::make_shared<sched::StepGate>();
  o.engine.step_gate = gate;
  std::unique_ptr<ServedModel> s = serve_model(path(), o);
  ASSERT_TRUE(s);
  json a = request(3, 150), b = request(4, 150);
  a["logprobs"] = 1;  // compared bit for bit: a resumed request prefills its generated tokens
  b["logprobs"] = 1;  // again step by step, as they were decoded (only the prompt chunk-wise)
  Reply ra = post(s->port, "/v1/completions", a.dump());
  Reply rb = post(s->port, "/v1/completions", b.dump());
  ASSERT_EQ(ra.status, 200) << ra.body;
  ASSERT_EQ(rb.status, 200) << rb.body;
  std::map<std::string, double> before = metrics(s->port);
  // Both must be in the engine together, however fast the tiny model runs the first one: the
  // test holds the step gate until the engine has both requests, so neither can finish alone.
  gate->enter();
  auto fa = std::async(std::launch::async, [&] { return post(s->port, "/v1/completions", a.dump()); });
  auto fb = std::async(std::launch::async, [&] { return post(s->port, "/v1/completions", b.dump()); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s->engine->queued() < 2 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(s->engine->queued(), 2) << "the two requests did not reach the engine";
  gate->leave();
  Reply ca = fa.get(), cb = fb.get();
  ASSERT_EQ(ca.status, 200) << ca.body;
  ASSERT_EQ(cb.status, 200) << cb.body;
  EXPECT_EQ(hybrid_text(ca), hybrid_text(ra));
  EXPECT_EQ(hybrid_text(cb), hybrid_text(rb));
  EXPECT_EQ(ca.parsed()["choices"][0]["logprobs"], ra.parsed()["choices"][0]["logprobs"]);
  EXPECT_EQ(cb.parsed()["choices"][0]["logprobs"], rb.parsed()["choices"][0]["logprobs"]);
  std::map<std::string, double> after = metrics(s->port);
  EXPECT_GE(after["ubatch_preemptions_total{cause=\"memory\"}"] - before["ubatch_preemptions_total{cause=\"memory\"}"], 1)
      << "the test meant to preempt one of the two";
}

TEST_P(ServerHybrid, SpeculationOnAndOffGiveTheSameText) {
  UBATCH_REQUIRE_REFERENCE();
  ServeOptions o = options();
  o.engine.n_parallel = 2;
  o.engine.n_batch = 64;
  o.n_ctx = 1024;
  o.engine.spec_always = true;
  std::unique_ptr<ServedModel> s = serve_model(path(), o);
  ASSERT_TRUE(s);
  // The prompt, its own greedy continuation, and the prompt again: prompt lookup drafts the
  // continuation, some of which the model accepts (and some it rejects: a state rollback).
  const json first = {{"prompt", prompt(7, 12)}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  Reply rf = post(s->port, "/v1/completions", first.dump());
  ASSERT_EQ(rf.status, 200) << rf.body;
  Reply rt = post(s->port, "/tokenize", json{{"content", hybrid_text(rf)}}.dump());
  ASSERT_EQ(rt.status, 200) << rt.body;
  json ids = prompt(7, 12);
  for (int rep = 0; rep < 2; ++rep) {
    for (const json& t : rt.parsed()["tokens"]) ids.push_back(t);
    for (const json& t : prompt(7, 12)) ids.push_back(t);
  }
  const json base = {{"prompt", ids}, {"max_tokens", 48}, {"temperature", 0}, {"ignore_eos", true}};
  json on = base, off = base;
  off["speculative"] = false;
  on["speculative"] = true;
  Reply ro = post(s->port, "/v1/completions", off.dump());
  ASSERT_EQ(ro.status, 200) << ro.body;
  std::map<std::string, double> m0 = metrics(s->port);
  Reply rs = post(s->port, "/v1/completions", on.dump());
  ASSERT_EQ(rs.status, 200) << rs.body;
  EXPECT_EQ(hybrid_text(rs), hybrid_text(ro));
  std::map<std::string, double> m = metrics(s->port);
  EXPECT_GT(m["ubatch_spec_draft_tokens_total"] - m0["ubatch_spec_draft_tokens_total"], 0) << "nothing was drafted";
  std::printf("%s: %g draft tokens, %g accepted\n", GetParam(), m["ubatch_spec_draft_tokens_total"],
              m["ubatch_spec_draft_accepted_total"]);
}

// A prompt of many chunks (qwen35 prefills its prompt's whole 16-position chunks chunk-wise) gives
// the same tokens and the same log-probabilities, bit for bit, whatever the step budget cuts it
// into (n_batch 512, 20, 37: pieces end on chunk boundaries or wait), among other requests, from
// the prefix cache, and as each of n = 2 samples.
TEST_P(ServerHybrid, ManyChunkPromptsGiveTheSameLogprobsWhateverTheBudget) {
  UBATCH_REQUIRE_REFERENCE();
  const json body = {{"prompt", prompt(21, 150)}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true},
                     {"logprobs", 2}};
  auto run = [&](int32_t n_batch, int n_others, int n) {
    ServeOptions o = options();
    o.engine.n_parallel = 8;
    o.engine.n_batch = n_batch;
    o.n_ctx = 4096;
    std::unique_ptr<ServedModel> s = serve_model(path(), o);
    std::vector<json> out;
    if (!s) return out;
    std::vector<std::future<Reply>> others;
    for (int k = 0; k < n_others; ++k) {
      const json other = {{"prompt", prompt(40 + k, 60 + 13 * k)}, {"max_tokens", 20}, {"temperature", 0}, {"ignore_eos", true}};
      others.push_back(std::async(std::launch::async, [&, other] { return post(s->port, "/v1/completions", other.dump()); }));
    }
    json b = body;
    if (n > 1) b["n"] = n;
    for (int rep = 0; rep < 2; ++rep) {  // the second time from the prefix cache
      Reply r = post(s->port, "/v1/completions", b.dump());
      EXPECT_EQ(r.status, 200) << r.body;
      if (r.status != 200) return out;
      for (int c = 0; c < n; ++c) out.push_back(r.parsed()["choices"][c]["logprobs"]);
    }
    for (auto& f : others) EXPECT_EQ(f.get().status, 200);
    return out;
  };
  const std::vector<json> ref = run(512, 0, 1);
  ASSERT_EQ(ref.size(), 2u);
  EXPECT_EQ(ref[1], ref[0]) << "a prefix-cache hit changed the log-probabilities";
  for (auto [n_batch, n_others, n] : {std::tuple{20, 0, 1}, std::tuple{37, 5, 1}, std::tuple{64, 3, 2}}) {
    SCOPED_TRACE("n_batch " + std::to_string(n_batch) + ", " + std::to_string(n_others) + " others, n " + std::to_string(n));
    const std::vector<json> got = run(n_batch, n_others, n);
    ASSERT_EQ(got.size(), size_t(2 * n));
    for (const json& g : got) EXPECT_EQ(g, ref[0]);
  }
}

INSTANTIATE_TEST_SUITE_P(TinyHybrid, ServerHybrid,
                         ::testing::Values("tiny-qwen35-q8_0", "tiny-lfm2-q4_k_m", "tiny-qwen35-q8_0@bf16"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-' || c == '@') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace ubatch::test
