// Statistics of bench/stats.h on data with known answers, the rate and roofline arithmetic of
// bench/llm_bench.h and bench/roofline.h on synthetic timings, and the load summary.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/llm_bench.h"
#include "loadgen/load_driver.h"
#include "bench/roofline.h"
#include "bench/stats.h"

namespace ubatch::bench {

using namespace ::ubatch::loadgen;
namespace {

TEST(BenchStats, MeanAndSampleSd) {
  EXPECT_DOUBLE_EQ(mean({}), 0.0);
  EXPECT_DOUBLE_EQ(mean({4.0}), 4.0);
  EXPECT_DOUBLE_EQ(mean({1, 2, 3, 4}), 2.5);
  // 2,4,4,4,5,5,7,9: mean 5, squared deviations sum 32, sample variance 32/7.
  EXPECT_DOUBLE_EQ(stddev({2, 4, 4, 4, 5, 5, 7, 9}), std::sqrt(32.0 / 7.0));
  EXPECT_DOUBLE_EQ(stddev({3.0}), 0.0);
  EXPECT_DOUBLE_EQ(stddev({}), 0.0);
  EXPECT_DOUBLE_EQ(stddev({5, 5, 5}), 0.0);
}

TEST(BenchStats, PercentilesInterpolateBetweenClosestRanks) {
  const std::vector<double> x = {4, 1, 3, 2};  // any order
  EXPECT_DOUBLE_EQ(percentile(x, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(x, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile(x, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(x, 25), 1.75);   // h = 0.75
  EXPECT_NEAR(percentile(x, 90), 3.7, 1e-12);  // h = 2.7
  EXPECT_DOUBLE_EQ(percentile(x, -5), 1.0);    // clamped
  EXPECT_DOUBLE_EQ(percentile(x, 150), 4.0);
  EXPECT_DOUBLE_EQ(percentile({7.0}, 99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
  // 1..100: p99 at h = 98.01 → 99.01; p95 → 95.05; p50 → 50.5.
  std::vector<double> h;
  for (int i = 100; i >= 1; --i) h.push_back(i);
  EXPECT_NEAR(percentile(h, 99), 99.01, 1e-9);
  EXPECT_NEAR(percentile(h, 95), 95.05, 1e-9);
  EXPECT_NEAR(percentile(h, 50), 50.5, 1e-9);
}

TEST(BenchStats, Summary) {
  Summary s = summarize({10, 20, 30, 40, 50});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 30);
  EXPECT_DOUBLE_EQ(s.sd, std::sqrt(250.0));
  EXPECT_DOUBLE_EQ(s.min, 10);
  EXPECT_DOUBLE_EQ(s.max, 50);
  EXPECT_DOUBLE_EQ(s.p50, 30);
  EXPECT_NEAR(s.p90, 46, 1e-9);
  EXPECT_NEAR(s.p95, 48, 1e-9);
  EXPECT_NEAR(s.p99, 49.6, 1e-9);
  Summary e = summarize({});
  EXPECT_EQ(e.n, 0u);
  EXPECT_DOUBLE_EQ(e.p99, 0);
}

TEST(BenchStats, RatesFromRepetitionTimes) {
  BenchResult r;
  r.test = {100, 50, 4, true};
  r.prompt_s = {1.0, 2.0};  // 400 and 200 prompt tokens/s
  r.gen_s = {2.0, 1.0};     // 100 and 200 generated tokens/s
  compute_rates(r);
  EXPECT_DOUBLE_EQ(r.prompt_tps.mean, 300);
  EXPECT_DOUBLE_EQ(r.prompt_tps.sd, std::sqrt(20000.0));
  EXPECT_DOUBLE_EQ(r.gen_tps.mean, 150);
  EXPECT_DOUBLE_EQ(r.total_tps.mean, 200);  // 600 tokens in 3 s, both reps
  EXPECT_DOUBLE_EQ(r.total_tps.sd, 0);

  BenchResult tg;
  tg.test = {0, 128, 1, false};
  tg.prompt_s = {0, 0};
  tg.gen_s = {1.0, 0.5};
  compute_rates(tg);
  EXPECT_EQ(tg.prompt_tps.n, 0u);
  EXPECT_DOUBLE_EQ(tg.gen_tps.mean, 192);
}

ModelCost toy_cost() {
  ModelCost c;
  c.weight_bytes = 1000000000;
  c.streamed_bytes = 500000000;
  c.layer_params = 1000;
  c.output_params = 100;
  c.n_layer = 2;
  c.n_head = 2;
  c.head_dim_k = 3;
  c.head_dim_v = 2;
  c.layer_is_swa = {false, false};
  return c;
}

TEST(BenchStats, PromptMacsFormula) {
  ModelCost c = toy_cost();
  // 1 seq, 4 tokens: 4·1000 + layers 2 × Σ(p+1)=10 × n_head·(hk+hv)=10 + 100.
  EXPECT_DOUBLE_EQ(prompt_macs(c, 4, 1), 4000 + 2 * 10 * 10 + 100);
  EXPECT_DOUBLE_EQ(prompt_macs(c, 4, 3), 3 * (4000 + 2 * 10 * 10 + 100));
  EXPECT_DOUBLE_EQ(prompt_macs(c, 0, 3), 0);
  // Sliding window 2 on layer 0: keys 1, 2, 2, 2 = 7 instead of 10.
  c.sliding_window = 2;
  c.layer_is_swa = {true, false};
  EXPECT_DOUBLE_EQ(prompt_macs(c, 4, 1), 4000 + (7 + 10) * 10 + 100);
  // A recurrent layer 1 has no keys; experts: 8 of 32 run per token, 3200 elements in all.
  c.layer_is_recurrent = {false, true};
  EXPECT_DOUBLE_EQ(prompt_macs(c, 4, 1), 4000 + 7 * 10 + 100);
  c.n_expert = 32;
  c.n_expert_used = 8;
  c.expert_params = 3200;
  EXPECT_DOUBLE_EQ(prompt_macs(c, 4, 2), 2 * (4 * (1000 + 800) + 7 * 10 + 100));
}

TEST(BenchStats, RooflineShares) {
  const ModelCost c = toy_cost();
  BenchResult r;
  r.test = {4, 10, 1, false};
  r.prompt_s = {0.001};
  r.gen_s = {2.0};  // 5 steps/s × 0.5 GB = 2.5 GB/s
  apply_roofline(r, c, 10.0, 0.0);
  EXPECT_DOUBLE_EQ(r.gen_gbps, 2.5);
  EXPECT_DOUBLE_EQ(r.gen_bw_share, 0.25);
  EXPECT_DOUBLE_EQ(r.prompt_gflops, 2.0 * 4300 / 0.001 / 1e9);
  EXPECT_DOUBLE_EQ(r.prompt_peak_share, 0.0);  // peak unknown
  apply_roofline(r, c, 0.0, 0.0086);
  EXPECT_DOUBLE_EQ(r.gen_bw_share, 0.0);
  EXPECT_NEAR(r.prompt_peak_share, 1.0, 1e-12);
}

TEST(BenchStats, StepBytesCountTouchedExpertsAndStateTraffic) {
  ModelCost c = toy_cost();  // 0.5 GB streamed, dense, no state
  EXPECT_DOUBLE_EQ(step_bytes(c, 1), 5e8);
  EXPECT_DOUBLE_EQ(step_bytes(c, 8), 5e8);  // the weights once per step, whatever the batch
  // 0.4 GB of it experts, 8 of which a token uses out of 128: one sequence reads 1/16 of them.
  c.expert_bytes = 400000000;
  c.n_expert = 128;
  c.n_expert_used = 8;
  EXPECT_DOUBLE_EQ(step_bytes(c, 1), 1e8 + 4e8 / 16);
  // Two sequences touch 128 · (1 − (15/16)²) = 15.5 experts in expectation.
  EXPECT_NEAR(step_bytes(c, 2), 1e8 + 4e8 * 15.5 / 128, 1.0);
  EXPECT_LT(step_bytes(c, 1000), 5e8 + 1.0);  // never more than all of them
  // A recurrent state of 1 MB per sequence is read and written once per step.
  c.state_bytes = 1000000;
  EXPECT_NEAR(step_bytes(c, 2), 1e8 + 4e8 * 15.5 / 128 + 4e6, 1.0);
  // The roofline share uses it.
  BenchResult r;
  r.test = {0, 10, 2, true};
  r.prompt_s = {0.0};
  r.gen_s = {1.0};
  apply_roofline(r, c, 10.0, 0.0);
  EXPECT_NEAR(r.gen_gbps, step_bytes(c, 2) * 10 / 1e9, 1e-9);
}

RequestResult ok_request(int64_t i, double ttft, double e2e, int64_t tokens, std::vector<double> itl) {
  RequestResult r;
  r.index = i;
  r.ok = true;
  r.status = 200;
  r.ttft_ms = ttft;
  r.e2e_ms = e2e;
  r.n_output_tokens = tokens;
  r.itl_ms = std::move(itl);
  return r;
}

TEST(BenchStats, LoadSummary) {
  std::vector<RequestResult> q;
  q.push_back(ok_request(0, 100, 400, 4, {100, 100, 100}));  // TPOT 100
  q.push_back(ok_request(1, 300, 300, 1, {}));               // one token: no TPOT
  RequestResult bad;
  bad.error_kind = "http_503";
  bad.error = "HTTP 503: busy";
  q.push_back(bad);
  bad.error_kind = "connect";
  q.push_back(bad);
  q.push_back(bad);
  LoadReport r = summarize_requests(q, 2.0);
  EXPECT_EQ(r.n_started, 5);
  EXPECT_EQ(r.n_completed, 2);
  EXPECT_EQ(r.n_errors, 3);
  EXPECT_EQ(r.errors["http_503"], 1);
  EXPECT_EQ(r.errors["connect"], 2);
  EXPECT_EQ(r.error_examples["http_503"], "HTTP 503: busy");
  EXPECT_EQ(r.n_output_tokens, 5);
  EXPECT_DOUBLE_EQ(r.output_tps, 2.5);
  EXPECT_DOUBLE_EQ(r.request_rate, 1.0);
  EXPECT_DOUBLE_EQ(r.ttft_ms.p50, 200);
  EXPECT_EQ(r.itl_ms.n, 3u);
  EXPECT_EQ(r.tpot_ms.n, 1u);
  EXPECT_DOUBLE_EQ(r.tpot_ms.mean, 100);
  EXPECT_DOUBLE_EQ(r.e2e_ms.max, 400);
  EXPECT_EQ(r.requests.size(), 5u);
}

}  // namespace
}  // namespace ubatch::bench
