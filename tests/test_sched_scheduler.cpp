// Scheduler behaviour on the fake runner (virtual clock, real paged KV cache): budgets,
// chunked prefill without decode stalls, priorities, deadlines, aging, preemption with
// unchanged output, cancellation, n samples, and the three policies.
#include <gtest/gtest.h>

#include <map>

#include "sched_harness.h"

namespace ubatch::sched {
namespace {

TEST(Scheduler, BudgetIsNeverExceededAndEverythingFinishes) {
  Harness h(config(Policy::UBatch, 6, 32));
  for (int i = 0; i < 20; ++i) h.submit(make_request(5 + i * 7, 3 + i % 9, i));
  h.run_all();
  EXPECT_EQ(h.done.size(), 20u);
  MetricsSnapshot m = h.sched.metrics();
  EXPECT_LE(m.step_tokens, m.steps * 32);  // also checked inside every step
  EXPECT_EQ(m.requests_finished, 20u);
  EXPECT_EQ(h.runner.kv().stats().n_blocks_used, 0);
  h.runner.kv().check_invariants();
}

TEST(Scheduler, DecodesNeverStallWhileALongPromptIsPrefilled) {
  Harness h(config(Policy::UBatch, 8, 64), 8192);
  std::vector<uint64_t> short_ids;
  for (int i = 0; i < 4; ++i) short_ids.push_back(h.submit(make_request(8, 200, i)));
  for (int i = 0; i < 3; ++i) h.step();  // all four decoding now
  const uint64_t long_id = h.submit(make_request(4000, 4, 99));
  h.run_all();
  ASSERT_TRUE(h.done.count(long_id));
  // Once decoding, each short sequence got a token at every step until it finished.
  for (uint64_t id : short_ids) {
    const auto& st = h.token_step[id][0];
    ASSERT_EQ(st.size(), 200u);
    for (size_t i = 1; i < st.size(); ++i) ASSERT_EQ(st[i], st[i - 1] + 1) << "request " << id << " token " << i;
  }
  // The long prompt was chunked: it needed many steps.
  EXPECT_GE(h.done[long_id].timings.ttft_ms, 4000.0 / 64 * sim::CostModel{}.a_ms * 0.5);
}

TEST(Scheduler, HigherPriorityIsAdmittedFirst) {
  Harness h(config(Policy::UBatch, 1, 64));
  const uint64_t low = h.submit(make_request(10, 5, 1, 0));
  const uint64_t high = h.submit(make_request(10, 5, 2, 5));
  h.run_all();
  EXPECT_LT(h.token_step[high][0].front(), h.token_step[low][0].front());
  EXPECT_LT(h.done[high].timings.total_ms, h.done[low].timings.total_ms);
}

TEST(Scheduler, EarlierDeadlineIsAdmittedFirstAtEqualPriority) {
  Harness h(config(Policy::UBatch, 1, 64));
  Request a = make_request(10, 5, 1), b = make_request(10, 5, 2), c = make_request(10, 5, 3);
  b.deadline_ms = 5000;
  c.deadline_ms = 1000;
  const uint64_t ia = h.submit(a), ib = h.submit(b), ic = h.submit(c);
  h.run_all();
  EXPECT_LT(h.token_step[ic][0].front(), h.token_step[ib][0].front());
  EXPECT_LT(h.token_step[ib][0].front(), h.token_step[ia][0].front());
}

TEST(Scheduler, AgingPreventsStarvationOfLowPriority) {
  EngineConfig cfg = config(Policy::UBatch, 1, 64);
  cfg.aging_ms = 200;
  Harness h(cfg);
  const uint64_t low = h.submit(make_request(10, 3, 1, 0));
  // A sustained stream of priority-3 requests: one arrives every step.
  for (int i = 0; i < 400 && !h.done.count(low); ++i) {
    h.submit(make_request(10, 3, 100 + i, 3));
    h.step();
  }
  ASSERT_TRUE(h.done.count(low)) << "low priority starved";
  // With aging 200 ms, the low request catches up 3 levels after ~600-800 ms of waiting.
  EXPECT_LT(h.done[low].timings.queue_ms, 1500.0);
  h.run_all();
}

TEST(Scheduler, PreemptedSequencesFinishWithTheSameOutput) {
  // Reference: each request alone with plenty of KV.
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(make_request(20 + i * 3, 40, i, i % 3));
  std::vector<std::vector<int32_t>> want;
  for (const Request& r : reqs) {
    Harness solo(config(Policy::UBatch, 8, 64), 4096);
    const uint64_t id = solo.submit(r);
    solo.run_all();
    want.push_back(solo.tokens[id][0]);
  }
  // Tight KV: 12 blocks of 16 for 6 sequences of up to ~75 tokens each.
  Harness h(config(Policy::UBatch, 6, 64), 12 * 16);
  std::vector<uint64_t> ids;
  for (const Request& r : reqs) ids.push_back(h.submit(r));
  h.run_all();
  EXPECT_GT(h.sched.metrics().preemptions, 0u);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(h.done.count(ids[i]));
    EXPECT_EQ(h.tokens[ids[i]][0], want[i]) << "request " << i;
    EXPECT_EQ(h.finish[ids[i]][0], FinishReason::Length);
  }
  EXPECT_EQ(h.runner.kv().stats().n_blocks_used, 0);
  h.runner.kv().check_invariants();
}

TEST(Scheduler, CancelFreesKvAndEndsTheRequest) {
  Harness h(config());
  const uint64_t a = h.submit(make_request(40, 1000, 1));
  const uint64_t b = h.submit(make_request(40, 5, 2));
  for (int i = 0; i < 5; ++i) h.step();
  EXPECT_GT(h.runner.kv().stats().n_blocks_used, 0);
  h.sched.cancel(a);
  h.drain();
  ASSERT_TRUE(h.done.count(a));
  EXPECT_EQ(h.finish[a][0], FinishReason::Cancelled);
  h.run_all();
  ASSERT_TRUE(h.done.count(b));
  EXPECT_EQ(h.runner.kv().stats().n_blocks_used, 0);
  EXPECT_EQ(h.sched.metrics().requests_cancelled, 1u);
}

TEST(Scheduler, SamplesShareThePromptAndCompleteWithFewSlots) {
  // n = 5 with n_parallel = 2: completes; greedy samples are identical.
  Harness h(config(Policy::UBatch, 2, 64));
  Request r = make_request(37, 12, 3);
  r.n = 5;
  const uint64_t id = h.submit(r);
  h.run_all();
  ASSERT_TRUE(h.done.count(id));
  ASSERT_EQ(h.tokens[id].size(), 5u);
  for (int i = 1; i < 5; ++i) EXPECT_EQ(h.tokens[id][i], h.tokens[id][0]);
  EXPECT_EQ(h.done[id].usage.completion_tokens, 60);
  EXPECT_EQ(h.done[id].usage.prompt_tokens, 37);
  // The prompt was computed once plus one recomputed token per forked sample, and
  // full blocks reused from the prefix cache for samples admitted after the leader ended.
  EXPECT_LT(h.sched.metrics().prompt_tokens, 37u * 2);
}

TEST(Scheduler, ForkingSamplesIntoATightCacheNeverFailsADecode) {
  // 16 samples of a 99-token prompt in a 16-block cache with 16 slots: forking a sample shares
  // the leader's partial last block, so the leader's planned decode then needs a copy-on-write
  // block; the plan must count it (preempting or waiting), never run a batch the cache cannot
  // hold (which would fail the samples with finish_reason error).
  for (int32_t n_batch : {16, 128}) {
    Harness h(config(Policy::UBatch, 16, n_batch), 16 * 16);
    Request r = make_request(99, 150, 5);
    r.n = 16;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = 7;
    const uint64_t id = h.submit(r);
    h.run_all();
    ASSERT_TRUE(h.done.count(id));
    ASSERT_EQ(h.finish[id].size(), 16u);
    for (const auto& [index, reason] : h.finish[id])
      EXPECT_EQ(reason, FinishReason::Length) << "sample " << index << ", n_batch " << n_batch;
    EXPECT_EQ(h.done[id].usage.completion_tokens, 16 * 150);
    EXPECT_EQ(h.runner.kv().stats().n_blocks_used, 0);
    h.runner.kv().check_invariants();
  }
}

// Answers "no KV space" to the first `failures` batches that hold several sequences, as a
// decode would if a plan ever under-counted blocks; otherwise the fake runner.
class NoKvSpaceRunner : public Runner {
 public:
  NoKvSpaceRunner(int failures) : inner_(1000, 4096, 16, sim::CostModel{}), failures_(failures) {}
  KvCache& kv() override { return inner_.kv(); }
  int32_t n_vocab() const override { return inner_.n_vocab(); }
  DecodeResult run(const Batch& batch, std::vector<RowSample>& rows) override {
    bool several = false;
    for (int32_t i = 1; i < batch.n_tokens(); ++i) several = several || batch.seq_ids[i][0] != batch.seq_ids[0][0];
    if (several && failures_ > 0) {
      --failures_;
      return DecodeResult{DecodeStatus::NoKvSpace, "kv: out of blocks (injected)"};
    }
    return inner_.run(batch, rows);
  }
  std::string token_to_piece(int32_t id) const override { return inner_.token_to_piece(id); }
  bool is_eog(int32_t id) const override { return inner_.is_eog(id); }
  double now_ms() const override { return inner_.now_ms(); }
  int failures_left() const { return failures_; }

 private:
  sim::FakeRunner inner_;
  int failures_;
};

TEST(Scheduler, ANoKvSpaceDecodePreemptsInsteadOfFailing) {
  NoKvSpaceRunner runner(3);
  Scheduler sched(runner, config(Policy::UBatch, 4, 64));
  std::vector<std::shared_ptr<Stream>> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(std::make_shared<Stream>(i + 1));
    sched.submit(i + 1, make_request(10 + i, 8, i), streams.back());
  }
  for (int i = 0; i < 1000 && sched.has_work(); ++i) sched.step();
  EXPECT_EQ(runner.failures_left(), 0);
  EXPECT_GE(sched.metrics().preemptions, 3u);
  for (auto& s : streams) {
    Event e;
    int64_t tokens = 0;
    bool done = false;
    FinishReason reason = FinishReason::Error;
    while (s->next(e, std::chrono::milliseconds(0))) {
      if (e.kind == Event::Kind::Token && e.token >= 0) ++tokens;
      if (e.kind == Event::Kind::Finish) reason = e.finish;
      if (e.kind == Event::Kind::Done) done = true;
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(reason, FinishReason::Length);
    EXPECT_EQ(tokens, 8);
  }
}

TEST(Scheduler, StopStringsAreHeldBackAndNeverEmitted) {
  Harness h(config());
  // Find what the fake model generates, then stop on a piece spanning two tokens.
  const uint64_t probe = h.submit(make_request(10, 30, 4));
  h.run_all();
  const std::string full = h.text[probe];
  ASSERT_GE(full.size(), 12u);
  const std::string stop = full.substr(8, 3);
  Request r = make_request(10, 30, 4);
  r.stop = {stop, "never-matches-xyz"};
  const uint64_t id = h.submit(r);
  h.run_all();
  EXPECT_EQ(h.text[id], full.substr(0, full.find(stop)));
  EXPECT_EQ(h.finish[id][0], FinishReason::Stop);
}

TEST(Scheduler, StaticPolicyRunsGroupsToCompletion) {
  Harness h(config(Policy::Static, 2, 64));
  const uint64_t a = h.submit(make_request(10, 20, 1)), b = h.submit(make_request(10, 20, 2));
  for (int i = 0; i < 3; ++i) h.step();
  const uint64_t c = h.submit(make_request(10, 5, 3));  // arrives while the group runs
  h.run_all();
  // c starts only after both a and b have finished.
  EXPECT_GT(h.token_step[c][0].front(), h.token_step[a][0].back());
  EXPECT_GT(h.token_step[c][0].front(), h.token_step[b][0].back());
}

TEST(Scheduler, UBatchPolicyAdmitsEveryStep) {
  Harness h(config(Policy::UBatch, 4, 64));
  const uint64_t a = h.submit(make_request(10, 20, 1));
  for (int i = 0; i < 3; ++i) h.step();
  const uint64_t c = h.submit(make_request(10, 5, 3));
  h.step();
  h.step();
  EXPECT_FALSE(h.token_step[c][0].empty());  // admitted and decoding right away
  EXPECT_LT(h.token_step[c][0].front(), h.token_step[a][0].back() + 1);
  h.run_all();
}

TEST(Scheduler, GroupedPolicyGroupsByPromptLengthBucket) {
  Harness h(config(Policy::Grouped, 4, 512));
  const uint64_t s1 = h.submit(make_request(10, 5, 1));    // bucket 3
  const uint64_t l1 = h.submit(make_request(300, 5, 2));   // bucket 8
  const uint64_t s2 = h.submit(make_request(12, 5, 3));    // bucket 3
  const uint64_t l2 = h.submit(make_request(290, 5, 4));   // bucket 8
  h.run_all();
  // The oldest request's bucket (short) runs first as one group, then the long ones.
  EXPECT_LT(h.token_step[s2][0].back(), h.token_step[l1][0].front());
  EXPECT_LT(h.token_step[s1][0].back(), h.token_step[l2][0].front());
}

TEST(Scheduler, RejectsRequestsThatCanNeverFit) {
  Harness h(config(), 256);
  Request r = make_request(200, 100, 1);
  auto err = h.sched.validate(r);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->code, SubmitError::Code::TooLong);
  r = make_request(0, 10);
  ASSERT_TRUE(h.sched.validate(r).has_value());
  r = make_request(5, 0);
  ASSERT_TRUE(h.sched.validate(r).has_value());
  r = make_request(5, 5);
  r.prompt[2] = 5000;  // outside the vocabulary of 1000
  ASSERT_TRUE(h.sched.validate(r).has_value());
}

TEST(Scheduler, OneSequenceStaysWithinItsContextLimit) {
  // A 4,096-token cache, but one sequence may hold at most 300 tokens (the trained context).
  EngineConfig c = config();
  c.n_ctx_seq = 300;
  Harness h(c, 4096);
  EXPECT_FALSE(h.sched.validate(make_request(200, 100, 1)).has_value());  // exactly 300
  auto err = h.sched.validate(make_request(200, 101, 1));
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->code, SubmitError::Code::TooLong);
  EXPECT_NE(err->message.find("300 tokens one sequence may hold"), std::string::npos) << err->message;
  err = h.sched.validate(make_request(301, 1, 1));
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->code, SubmitError::Code::TooLong);
}

TEST(Simulation, PoliciesCompareOnAHundredUsers) {
  sim::Workload w;
  w.n_users = 100;
  w.n_requests = 300;
  sim::CostModel cost;
  std::map<Policy, sim::SimResult> res;
  for (Policy p : {Policy::Static, Policy::Grouped, Policy::UBatch}) {
    EngineConfig c = config(p, 16, 512);
    c.batch_window_ms = p == Policy::UBatch ? 0 : 50;
    res[p] = sim::simulate(c, cost, w, 16384);
    EXPECT_EQ(res[p].completed, 300);
  }
  EXPECT_GT(res[Policy::UBatch].throughput_tps, res[Policy::Static].throughput_tps);
  EXPECT_LT(res[Policy::UBatch].ttft_p50_ms, res[Policy::Static].ttft_p50_ms);
}

TEST(Simulation, CostModelFitRecoversKnownCoefficients) {
  std::vector<std::array<double, 3>> samples;
  for (int t : {1, 4, 16, 64, 256})
    for (int s : {1, 2, 8})
      if (s <= t) samples.push_back({double(t), double(s), 3.0 + 0.25 * t + 0.75 * s});
  sim::CostModel m = sim::fit_cost_model(samples);
  EXPECT_NEAR(m.a_ms, 3.0, 1e-9);
  EXPECT_NEAR(m.b_ms_per_token, 0.25, 1e-9);
  EXPECT_NEAR(m.c_ms_per_seq, 0.75, 1e-9);
}

}  // namespace
}  // namespace ubatch::sched
