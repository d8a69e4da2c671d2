// Speculative decoding in the scheduler, on the fake runner (virtual clock, real paged KV
// cache): outputs identical with and without speculation (greedy, stop strings, EOG inside a
// draft, max_tokens, n > 1, preemption), drafts counted in the n_batch budget, KV accounting
// after rollbacks, per-request opt-out, and back-off (drafts that fail, compute-bound steps).
// Also the parts: prompt-lookup drafting, the n-gram table, the step-time model fit and the
// choice of draft lengths.
#include <gtest/gtest.h>

#include <random>

#include "sched/ngram_draft.h"
#include "sched/spec_policy.h"
#include "sched/step_time_model.h"
#include "sched_harness.h"

namespace ubatch::sched {
namespace {

// ---- the parts ----

TEST(NgramDrafter, ProposesWhatFollowedTheLongestMostRecentMatch) {
  NgramDrafter d(3);
  d.append({1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3});
  Draft out;
  d.draft(4, 1, out);
  // Suffix "1 2 3" last occurred at the start, followed by 4 5 9 2.
  EXPECT_EQ(out.n_match, 3);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4, 5, 9, 2}));
  d.append(6);  // "3 6" / "6": no earlier occurrence
  d.draft(4, 1, out);
  EXPECT_EQ(out.n_match, 0);
  EXPECT_TRUE(out.tokens.empty());
  d.append(2);  // "2" occurred at 11 (most recent), followed by 3, 6, 2
  d.draft(8, 1, out);
  EXPECT_EQ(out.n_match, 1);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{3, 6, 2}));
  d.draft(8, 2, out);  // n_min 2: "6 2" never occurred before
  EXPECT_EQ(out.n_match, 0);
}

TEST(NgramDrafter, RunsOfOneTokenDraftTheRun) {
  NgramDrafter d(2);
  d.append({5, 5, 5, 5});
  Draft out;
  d.draft(8, 1, out);
  EXPECT_EQ(out.n_match, 2);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{5}));  // only what followed the latest earlier "5 5"
}

TEST(NgramDrafter, AgreesWithABruteForceSearch) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t n_max = 1 + static_cast<int32_t>(rng() % 4), vocab = 2 + static_cast<int32_t>(rng() % 20);
    NgramDrafter d(n_max);
    std::vector<int32_t> seq;
    for (int i = 0; i < 400; ++i) {
      const int32_t t = static_cast<int32_t>(rng() % vocab);
      seq.push_back(t);
      d.append(t);
      const int32_t k = 1 + static_cast<int32_t>(rng() % 6);
      Draft got;
      d.draft(k, 1, got);
      // Brute force: longest n, then the latest earlier end j < m with the same n tokens.
      const auto m = static_cast<int32_t>(seq.size()) - 1;
      Draft want;
      for (int32_t n = std::min(n_max, m); n >= 1 && want.n_match == 0; --n)
        for (int32_t j = m - 1; j >= n - 1; --j)
          if (std::equal(seq.begin() + (m - n + 1), seq.begin() + m + 1, seq.begin() + (j - n + 1))) {
            want.n_match = n;
            for (int32_t p = j + 1; p <= m && static_cast<int32_t>(want.tokens.size()) < k; ++p) want.tokens.push_back(seq[p]);
            break;
          }
      ASSERT_EQ(got.n_match, want.n_match) << "trial " << trial << " at " << i;
      ASSERT_EQ(got.tokens, want.tokens) << "trial " << trial << " at " << i;
    }
  }
}

TEST(NgramTable, RemembersContinuationsAndStaysBounded) {
  NgramTable t(64, 2, 4);
  EXPECT_EQ(t.bytes(), 64 * 16 + 64 * 4 * 4u);
  t.add({1, 2, 3, 4, 5, 6, 7}, 2);
  Draft out;
  t.lookup({9, 9, 1, 2}, 8, out);
  EXPECT_EQ(out.n_match, 2);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{3, 4, 5, 6}));  // at most k_max
  t.lookup({4, 5}, 1, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{6}));
  t.lookup({7, 1}, 4, out);
  EXPECT_TRUE(out.tokens.empty());
  NgramTable off(0, 2, 4);
  off.add({1, 2, 3}, 0);
  off.lookup({1, 2}, 4, out);
  EXPECT_TRUE(out.tokens.empty());
}

TEST(StepTimeModel, RecoversALinearCostAndKeepsThePriorShapeUntilStepsVary) {
  StepTimeModel m(StepCost{1.0, 0.1, 0.1});
  // Only single-token decodes: the level is measured, the slopes keep the prior's shape.
  for (int i = 0; i < 20; ++i) m.observe(1, 1, 12.0);
  EXPECT_NEAR(m.predict(1, 1), 12.0, 1e-6);
  EXPECT_NEAR(m.cost().b_ms_per_token / m.cost().a_ms, 0.1, 0.02);
  // Steps of many sizes from a true cost 5 + 0.5·tokens + 2·rows: the measurements decide.
  const StepCost truth{5.0, 0.5, 2.0};
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    const int tokens = 1 + static_cast<int>(rng() % 64);
    const int rows = 1 + static_cast<int>(rng() % tokens);
    m.observe(tokens, rows, truth.ms(tokens, rows));
  }
  EXPECT_NEAR(m.cost().a_ms, 5.0, 0.3);
  EXPECT_NEAR(m.cost().b_ms_per_token, 0.5, 0.05);
  EXPECT_NEAR(m.cost().c_ms_per_row, 2.0, 0.1);
}

TEST(ChooseDrafts, DraftsWhenMemoryBoundAndBacksOffWhenComputeBound) {
  const StepCost cheap{10.0, 0.2, 0.2};  // a draft token costs 4% of a one-token step
  DraftChoice c = choose_drafts(cheap, 1, 1, {{8, 0.9}}, 64);
  EXPECT_EQ(c.len[0], 8);
  EXPECT_GT(c.rate(), 1.0 / cheap.ms(1, 1));
  c = choose_drafts(cheap, 1, 1, {{8, 0.02}}, 64);  // hopeless drafts
  EXPECT_EQ(c.len[0], 0);
  c = choose_drafts(cheap, 1, 1, {{8, 0.9}}, 3);  // the budget caps
  EXPECT_EQ(c.len[0], 3);
  // 32 decodes in the step: the same draft costs more than it gains, in expectation.
  const StepCost busy{10.0, 1.0, 1.0};
  c = choose_drafts(busy, 32, 32, {{8, 0.6}, {8, 0.6}}, 64);
  EXPECT_EQ(c.len[0] + c.len[1], 0);
  // The better draft gets the tokens first.
  c = choose_drafts(cheap, 2, 2, {{8, 0.3}, {8, 0.95}}, 4);
  EXPECT_EQ(c.len[1], 4);
  EXPECT_EQ(c.len[0], 0);
}

TEST(AcceptanceCounts, CountsVerifiedPositionsAndRelaxesTowardsThePrior) {
  AcceptanceCounts a;
  a.add(3, 5, 1.0);  // 3 accepted, the 4th rejected, the 5th never verified
  EXPECT_DOUBLE_EQ(a.accepted, 3);
  EXPECT_DOUBLE_EQ(a.verified, 4);
  a.add(4, 4, 1.0);
  EXPECT_DOUBLE_EQ(a.verified, 8);
  EXPECT_NEAR(a.estimate(0.5, 2.0), (7 + 1.0) / (8 + 2.0), 1e-12);
  for (int i = 0; i < 500; ++i) a.relax(0.98);
  EXPECT_NEAR(a.estimate(0.5, 2.0), 0.5, 1e-3);
}

// ---- the scheduler ----

// A runner that records each batch's size and checks the cache after every step.
class RecordingRunner final : public Runner {
 public:
  RecordingRunner(int32_t n_vocab, int32_t n_ctx, const sim::CostModel& cost) : fake(n_vocab, n_ctx, 16, cost) {}
  KvCache& kv() override { return fake.kv(); }
  int32_t n_vocab() const override { return fake.n_vocab(); }
  DecodeResult run(const Batch& batch, std::vector<RowSample>& rows) override {
    batch_tokens.push_back(batch.n_tokens());
    int32_t drafts = 0;
    for (const RowSample& r : rows) drafts += r.draft >= 0 ? 1 : 0;
    batch_drafts.push_back(drafts);
    DecodeResult r = fake.run(batch, rows);
    fake.kv().check_invariants();
    return r;
  }
  std::string token_to_piece(int32_t id) const override { return fake.token_to_piece(id); }
  bool is_eog(int32_t id) const override { return fake.is_eog(id); }
  double now_ms() const override { return fake.now_ms(); }

  sim::FakeRunner fake;
  std::vector<int32_t> batch_tokens, batch_drafts;
};

struct SpecUnitOutcome {
  std::map<uint64_t, std::map<int32_t, std::vector<int32_t>>> tokens;
  std::map<uint64_t, std::map<int32_t, FinishReason>> finish;
  std::map<uint64_t, std::map<int32_t, std::string>> text;  // per sample
  MetricsSnapshot metrics;
  int64_t steps = 0;
  std::vector<int32_t> batch_tokens, batch_drafts;
};

// Runs the requests (submitted at the given clock times) to completion.
SpecUnitOutcome run(const EngineConfig& cfg, const std::vector<std::pair<double, Request>>& reqs, int32_t surprise_every,
            int32_t eog = -1, int32_t n_ctx = 4096, const sim::CostModel& cost = sim::CostModel{}) {
  RecordingRunner runner(1000, n_ctx, cost);
  runner.fake.set_repetitive(surprise_every);
  runner.fake.set_eog(eog);
  Scheduler sched(runner, cfg);
  std::map<uint64_t, std::shared_ptr<Stream>> streams;
  SpecUnitOutcome out;
  size_t next = 0;
  for (int guard = 0; guard < 200000; ++guard) {
    while (next < reqs.size() && reqs[next].first <= runner.now_ms()) {
      const uint64_t id = next + 1;
      streams[id] = std::make_shared<Stream>(id);
      EXPECT_FALSE(sched.validate(reqs[next].second).has_value());
      EXPECT_FALSE(sched.submit(id, reqs[next].second, streams[id]).has_value());
      ++next;
    }
    if (!sched.has_work() && next == reqs.size()) break;
    if (sched.step()) ++out.steps;
    else runner.fake.advance_to(runner.now_ms() + 1.0);
    for (auto& [id, s] : streams) {
      Event e;
      while (s->next(e, std::chrono::milliseconds(0))) {
        if (e.kind == Event::Kind::Token) {
          if (e.token >= 0) out.tokens[id][e.index].push_back(e.token);
          out.text[id][e.index] += e.text;
        } else if (e.kind == Event::Kind::Finish) {
          out.finish[id][e.index] = e.finish;
        }
      }
    }
  }
  EXPECT_FALSE(sched.has_work());
  out.metrics = sched.metrics();
  out.batch_tokens = runner.batch_tokens;
  out.batch_drafts = runner.batch_drafts;
  EXPECT_EQ(runner.kv().stats().n_blocks_used, 0) << "blocks leaked";
  runner.kv().check_invariants();
  return out;
}

EngineConfig spec_config(int32_t k, int32_t n_parallel = 8, int32_t n_batch = 64) {
  EngineConfig c = config(Policy::UBatch, n_parallel, n_batch);
  c.spec_ngram = 3;
  c.spec_k = k;
  return c;
}

void expect_same_output(const SpecUnitOutcome& a, const SpecUnitOutcome& b) {
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.finish, b.finish);
  EXPECT_EQ(a.text, b.text);
}

// A prompt the repetitive fake model would itself continue: start, f(start), f(f(start)), …
// (f: the model's token-only transition), long enough to go round its cycle, so drafts from
// the prompt are right from the first decode.
std::vector<int32_t> chain(int32_t start, int32_t n) {
  std::vector<int32_t> out = {start};
  while (static_cast<int32_t>(out.size()) < n) out.push_back(sim::FakeRunner::next_token(0, out.back(), 1000));
  return out;
}

Request chain_request(int32_t start, int32_t n_prompt, int32_t max_tokens) {
  Request r = make_request(1, max_tokens);
  r.prompt = chain(start, n_prompt);
  r.ignore_eos = true;
  return r;
}

std::vector<std::pair<double, Request>> mixed_requests(int n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<std::pair<double, Request>> out;
  for (int i = 0; i < n; ++i) {
    Request r = make_request(4 + static_cast<int32_t>(rng() % 120), 8 + static_cast<int32_t>(rng() % 150),
                             static_cast<int32_t>(rng() % 50), static_cast<int32_t>(rng() % 2));
    if (rng() % 2 == 0) {  // half continue a chain of the repetitive model after a random head
      const std::vector<int32_t> tail = chain(static_cast<int32_t>(rng() % 1000), 100);
      r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    }
    r.ignore_eos = rng() % 2 == 0;
    r.speculative = rng() % 5 != 0;  // some opt out
    if (rng() % 4 == 0) r.n = 2;
    out.push_back({static_cast<double>(rng() % 400), std::move(r)});
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

TEST(SchedSpec, SameOutputAsPlainDecodingWithFewerSteps) {
  const auto reqs = mixed_requests(24, 1);
  for (int32_t surprise : {1000, 13, 3}) {
    SCOPED_TRACE("surprise every " + std::to_string(surprise));
    const SpecUnitOutcome plain = run(spec_config(0), reqs, surprise, 7);
    const SpecUnitOutcome spec = run(spec_config(8), reqs, surprise, 7);
    expect_same_output(plain, spec);
    EXPECT_EQ(plain.metrics.draft_tokens, 0u);
    EXPECT_GT(spec.metrics.draft_tokens, 0u);
    EXPECT_EQ(plain.metrics.generated_tokens, spec.metrics.generated_tokens);
    if (surprise == 1000) {
      EXPECT_GT(spec.metrics.draft_acceptance(), 0.5);
      EXPECT_GT(spec.metrics.tokens_per_seq_step(), 1.5);
      EXPECT_LT(spec.steps, plain.steps);
    }
  }
}

TEST(SchedSpec, RandomMixesGiveTheSameOutput) {
  for (uint64_t seed = 2; seed < 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const auto reqs = mixed_requests(16, seed);
    const int32_t n_batch = 16 + static_cast<int32_t>(seed * 11 % 80);
    const int32_t k = 1 + static_cast<int32_t>(seed % 10);
    const int32_t surprise = static_cast<int32_t>(2 + seed * 5);
    const SpecUnitOutcome plain = run(spec_config(0, 6, n_batch), reqs, surprise, static_cast<int32_t>(seed));
    const SpecUnitOutcome spec = run(spec_config(k, 6, n_batch), reqs, surprise, static_cast<int32_t>(seed));
    expect_same_output(plain, spec);
    EXPECT_GT(spec.metrics.draft_accepted, 0u);
  }
}

TEST(SchedSpec, DraftsCountInTheBudgetAndNeverExceedK) {
  const auto reqs = mixed_requests(12, 9);
  for (int32_t n_batch : {8, 24}) {
    const SpecUnitOutcome o = run(spec_config(6, 4, n_batch), reqs, 1000);
    ASSERT_FALSE(o.batch_tokens.empty());
    for (size_t i = 0; i < o.batch_tokens.size(); ++i) {
      EXPECT_LE(o.batch_tokens[i], n_batch);
      EXPECT_LE(o.batch_drafts[i], 6 * 4);
    }
    EXPECT_GT(o.metrics.draft_tokens, 0u);
  }
  // One sequence, budget 4: at most 3 drafts ride with its token.
  std::vector<std::pair<double, Request>> one = {{0.0, make_request(40, 60)}};
  one[0].second.ignore_eos = true;
  const SpecUnitOutcome o = run(spec_config(8, 4, 4), one, 1000);
  for (size_t i = 1; i < o.batch_drafts.size(); ++i) EXPECT_LE(o.batch_drafts[i], 3);
  EXPECT_EQ(o.tokens.at(1).at(0).size(), 60u);
}

TEST(SchedSpec, StopsExactlyAtMaxTokensAndAtAnEogInsideADraft) {
  for (int32_t max_tokens : {1, 2, 3, 9, 40}) {
    std::vector<std::pair<double, Request>> one = {{0.0, chain_request(5, 100, max_tokens)}};
    const SpecUnitOutcome plain = run(spec_config(0), one, 1000);
    const SpecUnitOutcome spec = run(spec_config(8), one, 1000);
    expect_same_output(plain, spec);
    EXPECT_EQ(spec.tokens.at(1).at(0).size(), static_cast<size_t>(max_tokens));
    EXPECT_EQ(spec.finish.at(1).at(0), FinishReason::Length);
  }
  // An end-of-generation token that the prompt's chain holds: generation reaches it inside an
  // accepted draft and stops there, as without drafts.
  std::vector<std::pair<double, Request>> one = {{0.0, chain_request(17, 120, 200)}};
  one[0].second.ignore_eos = false;
  const std::vector<int32_t> prompt = one[0].second.prompt;
  const SpecUnitOutcome probe = run(spec_config(0), one, 1000);
  const std::vector<int32_t>& gen = probe.tokens.at(1).at(0);
  ASSERT_GT(gen.size(), 30u);
  const int32_t eog = gen[25];
  ASSERT_EQ(std::find(gen.begin(), gen.end(), eog) - gen.begin(), 25) << "the chain repeats sooner: pick another start";
  const SpecUnitOutcome plain = run(spec_config(0), one, 1000, eog);
  const SpecUnitOutcome spec = run(spec_config(8), one, 1000, eog);
  expect_same_output(plain, spec);
  EXPECT_EQ(spec.finish.at(1).at(0), FinishReason::Stop);
  EXPECT_EQ(spec.tokens.at(1).at(0).size(), 25u);  // the end-of-generation token is not streamed
  EXPECT_GT(spec.metrics.draft_accepted, 0u);
}

TEST(SchedSpec, StopStringsMatchAcrossAcceptedDrafts) {
  std::vector<std::pair<double, Request>> one = {{0.0, chain_request(17, 120, 200)}};
  const SpecUnitOutcome probe = run(spec_config(0), one, 1000);
  const std::string& text = probe.text.at(1).at(0);
  ASSERT_GT(text.size(), 120u);
  one[0].second.stop = {text.substr(100, 3), "zzzzzzzzzzzz"};
  const SpecUnitOutcome plain = run(spec_config(0), one, 1000);
  const SpecUnitOutcome spec = run(spec_config(8), one, 1000);
  expect_same_output(plain, spec);
  EXPECT_EQ(spec.finish.at(1).at(0), FinishReason::Stop);
  EXPECT_GT(spec.metrics.draft_accepted, 0u);
}

TEST(SchedSpec, PerRequestOptOutNeverDrafts) {
  std::vector<std::pair<double, Request>> one = {{0.0, make_request(30, 100)}};
  one[0].second.ignore_eos = true;
  one[0].second.speculative = false;
  const SpecUnitOutcome o = run(spec_config(8), one, 1000);
  EXPECT_EQ(o.metrics.draft_tokens, 0u);
  EXPECT_EQ(o.tokens.at(1).at(0).size(), 100u);
}

TEST(SchedSpec, PreemptionUnderKvPressureKeepsTheOutput) {
  // A cache that cannot hold every sequence at full length: decodes preempt, drafts squeeze
  // into what is left, rollbacks free blocks.
  const auto reqs = mixed_requests(20, 21);
  const SpecUnitOutcome plain = run(spec_config(0, 8, 64), reqs, 9, -1, 640);
  const SpecUnitOutcome spec = run(spec_config(8, 8, 64), reqs, 9, -1, 640);
  expect_same_output(plain, spec);
  EXPECT_GT(spec.metrics.preemptions, 0u);
  EXPECT_GT(spec.metrics.draft_accepted, 0u);
}

TEST(SchedSpec, ServerWideTableDraftsFromFinishedOutputs) {
  // The default fake model never repeats itself, so a sequence's own tokens propose nothing
  // useful; the same request again finds its continuation in the table the first one filled.
  Request r = make_request(24, 120);
  r.ignore_eos = true;
  const std::vector<std::pair<double, Request>> twice = {{0.0, r}, {5000.0, r}};
  EngineConfig with = spec_config(8, 4, 64);
  with.spec_table = 4096;
  const SpecUnitOutcome plain = run(spec_config(0, 4, 64), twice, 0);
  const SpecUnitOutcome table = run(with, twice, 0);
  const SpecUnitOutcome own = run(spec_config(8, 4, 64), twice, 0);
  expect_same_output(plain, table);
  EXPECT_EQ(plain.tokens.at(1), plain.tokens.at(2));
  EXPECT_GT(table.metrics.draft_accepted, 100u);  // nearly all of the second request
  EXPECT_LT(own.metrics.draft_accepted, 10u);
  EXPECT_LT(table.steps, own.steps);
}

TEST(SchedSpec, BacksOffWhenDraftsFail) {
  // The default fake model never repeats itself: prompt-lookup drafts (single-token matches)
  // are wrong; after the first tries, few steps carry drafts.
  std::vector<std::pair<double, Request>> one = {{0.0, make_request(200, 400)}};
  one[0].second.ignore_eos = true;
  const SpecUnitOutcome o = run(spec_config(8), one, 0);
  ASSERT_GT(o.batch_drafts.size(), 300u);
  int32_t late = 0;
  for (size_t i = o.batch_drafts.size() - 200; i < o.batch_drafts.size(); ++i) late += o.batch_drafts[i];
  EXPECT_LT(late, 20) << "drafts in the last 200 steps";
  EXPECT_LT(o.metrics.draft_acceptance(), 0.1);
}

TEST(SchedSpec, BacksOffWhenStepsAreComputeBound) {
  // Every 4th position surprises the drafts (acceptance near 0.75). A token costs half a
  // one-token step: alone, a sequence's drafts pay; in a step of 16 decodes they cannot.
  const sim::CostModel compute_bound{4.0, 1.0, 1.0};
  EngineConfig cfg = spec_config(8, 16, 64);
  cfg.step_cost_prior = StepCost{4.0, 1.0, 1.0};  // the machine's shape (ubatch sim passes its cost model)
  std::vector<std::pair<double, Request>> many;
  for (int i = 0; i < 16; ++i) many.push_back({0.0, chain_request(100 + i, 80, 300)});
  const SpecUnitOutcome busy = run(cfg, many, 4, -1, 16384, compute_bound);
  std::vector<std::pair<double, Request>> one(many.begin(), many.begin() + 1);
  const SpecUnitOutcome alone = run(cfg, one, 4, -1, 16384, compute_bound);
  EXPECT_GT(alone.metrics.draft_accepted, 50u);
  EXPECT_LT(alone.steps, 300);
  // While at least twelve decode (after the first prefills), almost no drafts.
  int32_t crowded = 0, crowded_drafts = 0;
  for (size_t i = 10; i < busy.batch_drafts.size(); ++i)
    if (busy.batch_tokens[i] - busy.batch_drafts[i] >= 12) {
      ++crowded;
      crowded_drafts += busy.batch_drafts[i];
    }
  EXPECT_GT(crowded, 100);
  EXPECT_LT(crowded_drafts, crowded / 10);
}

}  // namespace
}  // namespace ubatch::sched
