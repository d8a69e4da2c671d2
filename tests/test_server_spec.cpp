// Speculative decoding through the HTTP server: the "speculative" request field (false opts a
// request out; the output is the same either way), its validation, and the /metrics lines
// (draft tokens and acceptance, tokens per step per sequence, the step-time model).
#include "test_server_fixture.h"

namespace ubatch::test {
namespace {

TEST(ServerSpec, SpeculativeFieldAndMetrics) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.engine.n_parallel = 2;
  o.engine.n_batch = 64;
  o.n_ctx = 1024;
  o.engine.spec_always = true;  // the tiny model is compute-bound: the step-time decision would rarely draft
  std::unique_ptr<ServedModel> s = serve_model(tiny_model(), o);
  ASSERT_TRUE(s);
  // A prompt that repeats itself: prompt lookup finds drafts; greedy tiny models loop.
  json ids = json::array();
  for (int rep = 0; rep < 4; ++rep)
    for (int i = 0; i < 12; ++i) ids.push_back(100 + 7 * i);
  const json base = {{"prompt", ids}, {"max_tokens", 48}, {"temperature", 0}, {"ignore_eos", true}};
  json on = base, off = base;
  off["speculative"] = false;
  on["speculative"] = true;
  Reply a = post(s->port, "/v1/completions", off.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  std::map<std::string, double> m0 = metrics(s->port);
  EXPECT_EQ(m0["ubatch_spec_draft_tokens_total"], 0) << "an opted-out request drafted";
  Reply b = post(s->port, "/v1/completions", on.dump());
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.parsed()["choices"][0]["text"], b.parsed()["choices"][0]["text"]);
  EXPECT_EQ(a.parsed()["usage"]["completion_tokens"], b.parsed()["usage"]["completion_tokens"]);

  std::map<std::string, double> m = metrics(s->port);
  EXPECT_GT(m["ubatch_spec_draft_tokens_total"], 0);
  EXPECT_GE(m["ubatch_spec_draft_tokens_total"], m["ubatch_spec_draft_accepted_total"]);
  EXPECT_GE(m["ubatch_spec_steps_total"], 1);
  EXPECT_GE(m["ubatch_tokens_per_sequence_step"], 1.0);
  EXPECT_NEAR(m["ubatch_tokens_per_sequence_step"],
              m["ubatch_generated_tokens_total"] / m["ubatch_sampling_sequence_steps_total"], 1e-9);
  EXPECT_TRUE(m.count("ubatch_spec_acceptance_ratio"));
  EXPECT_TRUE(m.count("ubatch_step_model_ms{term=\"per_token\"}"));

  Reply bad = post(s->port, "/v1/completions", R"({"prompt": "a", "speculative": "no"})");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(bad.parsed()["error"]["param"], "speculative") << bad.body;
}

}  // namespace
}  // namespace ubatch::test
