// Sampler: greedy, each filter's effect, penalties arithmetic, logit bias, seeded draws and
// their statistics, log-probabilities. All draws use fixed seeds, so every test is
// deterministic (statistical bounds are generous, never flaky).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "sampling/sampler.h"

namespace ubatch {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams plain_params(float temperature = 1.0f, uint64_t seed = 1234) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int n_draws) {
  std::map<int32_t, int> h;
  for (int i = 0; i < n_draws; ++i) ++h[s.sample(logits.data())];
  return h;
}

std::vector<float> random_logits(int n, uint64_t seed, float stddev = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> l(static_cast<size_t>(n));
  for (float& x : l) x = dist(rng);
  return l;
}

TEST(Sampler, GreedyIsArgmaxWithTiesToLowestId) {
  Sampler s(plain_params(0.0f), 6);
  const std::vector<float> a = {0.1f, 3.0f, -1.0f, 2.9f, 3.0f, 0.0f};
  EXPECT_EQ(s.sample(a.data()), 1);
  const std::vector<float> b = {-5.0f, -4.0f, -4.0f, -9.0f, -4.5f, -7.0f};
  EXPECT_EQ(s.sample(b.data()), 1);
  const std::vector<float> c = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1e-6f};
  EXPECT_EQ(s.sample(c.data()), 5);
  Sampler neg(plain_params(-1.0f), 6);  // any temperature <= 0 is greedy
  EXPECT_EQ(neg.sample(a.data()), 1);
}

TEST(Sampler, GreedyOnLargeRandomVocab) {
  const int n = 50000;
  const std::vector<float> l = random_logits(n, 7);
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (l[static_cast<size_t>(i)] > l[static_cast<size_t>(best)]) best = i;
  Sampler s(plain_params(0.0f), n);
  EXPECT_EQ(s.sample(l.data()), best);
}

TEST(Sampler, TopK1IsGreedy) {
  const int n = 3000;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> l = random_logits(n, 100 + seed);
    Sampler greedy(plain_params(0.0f), n);
    SamplingParams p = plain_params(1.5f, seed);
    p.top_k = 1;
    Sampler topk(p, n);
    EXPECT_EQ(topk.sample(l.data()), greedy.sample(l.data())) << "seed " << seed;
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedsDiffer) {
  const int n = 1000;
  const std::vector<float> l = random_logits(n, 3, 1.0f);
  SamplingParams p = plain_params(1.0f, 42);
  p.top_k = 200;
  p.top_p = 0.9f;
  Sampler a(p, n), b(p, n);
  p.seed = 43;
  Sampler c(p, n);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 64; ++i) {
    ta.push_back(a.sample(l.data()));
    tb.push_back(b.sample(l.data()));
    tc.push_back(c.sample(l.data()));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

// The draw is specified exactly: u = (mt19937_64() >> 11) / 2^53, and the first candidate
// whose running weight sum exceeds u·total. With equal weights over n ids (listed in id
// order) that is floor(u·n) — the same on every platform, as mt19937_64 is fully specified.
TEST(Sampler, DrawIsSpecifiedByMt19937_64) {
  const int n = 1000;
  const std::vector<float> l(static_cast<size_t>(n), 0.0f);
  Sampler s(plain_params(1.0f, 987654321), n);
  std::mt19937_64 rng(987654321);
  for (int i = 0; i < 200; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    EXPECT_EQ(s.sample(l.data()), static_cast<int32_t>(std::floor(u * n))) << "draw " << i;
  }
}

TEST(Sampler, FrequenciesMatchProbabilities) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const std::vector<float> l = log_of(probs);
  Sampler s(plain_params(1.0f, 5), 4);
  const int n_draws = 20000;
  const auto h = histogram(s, l, n_draws);
  for (int i = 0; i < 4; ++i) {
    const double f = h.count(i) ? static_cast<double>(h.at(i)) / n_draws : 0.0;
    EXPECT_NEAR(f, probs[static_cast<size_t>(i)], 0.02) << "token " << i;
  }
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const std::vector<float> l = log_of(probs);
  const int n_draws = 20000;
  // T = 0.5 squares the probabilities: [1, 4, 9, 16] / 30.
  Sampler cold(plain_params(0.5f, 9), 4);
  auto h = histogram(cold, l, n_draws);
  const double expect_cold[4] = {1 / 30.0, 4 / 30.0, 9 / 30.0, 16 / 30.0};
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(static_cast<double>(h[i]) / n_draws, expect_cold[i], 0.02) << "token " << i;
  // A very high temperature makes it nearly uniform.
  Sampler hot(plain_params(1000.0f, 9), 4);
  h = histogram(hot, l, n_draws);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(static_cast<double>(h[i]) / n_draws, 0.25, 0.02);
}

TEST(Sampler, TopKKeepsTheKBest) {
  const std::vector<float> l = {0.0f, 1.0f, 0.5f, 2.0f, 1.5f, -1.0f, 0.9f, 1.2f};
  SamplingParams p = plain_params(5.0f, 11);  // flat: every kept token is drawn often
  p.top_k = 3;                                 // ids 3 (2.0), 4 (1.5), 7 (1.2)
  Sampler s(p, 8);
  const auto h = histogram(s, l, 3000);
  EXPECT_EQ(h.size(), 3u);
  EXPECT_GT(h.count(3), 0u);
  EXPECT_GT(h.count(4), 0u);
  EXPECT_GT(h.count(7), 0u);
}

TEST(Sampler, TopKBreaksTiesByLowestId) {
  const std::vector<float> l(100, 1.0f);
  SamplingParams p = plain_params(1.0f, 12);
  p.top_k = 10;
  Sampler s(p, 100);
  const auto h = histogram(s, l, 2000);
  for (const auto& [id, c] : h) EXPECT_LT(id, 10);
  EXPECT_EQ(h.size(), 10u);
}

TEST(Sampler, TopPKeepsTheNucleus) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  const std::vector<float> l = log_of(probs);
  SamplingParams p = plain_params(1.0f, 13);
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: keeps {0, 1}
  Sampler s(p, 4);
  const int n_draws = 10000;
  const auto h = histogram(s, l, n_draws);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_NEAR(static_cast<double>(h.at(0)) / n_draws, 0.5 / 0.8, 0.02);
  EXPECT_NEAR(static_cast<double>(h.at(1)) / n_draws, 0.3 / 0.8, 0.02);

  p.top_p = 0.45f;  // the first token alone reaches it
  Sampler one(p, 4);
  const auto h1 = histogram(one, l, 500);
  EXPECT_EQ(h1.size(), 1u);
  EXPECT_EQ(h1.begin()->first, 0);
}

// Without top-k the nucleus is found by sorting growing slices of the vocabulary; with 200
// equal best logits and top_p·Z reached after 120 of them, exactly ids 0..119 (ties by id)
// stay — more than one slice.
TEST(Sampler, TopPWithoutTopKOnLargeVocab) {
  const int n = 1000;
  std::vector<float> l(static_cast<size_t>(n), -3.0f);
  for (int i = 0; i < 200; ++i) l[static_cast<size_t>(i)] = 0.0f;
  const double w_low = std::exp(-3.0);
  const double z = 200.0 + 800.0 * w_low;
  SamplingParams p = plain_params(1.0f, 14);
  p.top_p = static_cast<float>(119.5 / z);  // cum reaches top_p·Z at the 120th token
  Sampler s(p, n);
  const auto h = histogram(s, l, 12000);
  for (const auto& [id, c] : h) EXPECT_LT(id, 120);
  EXPECT_EQ(h.size(), 120u);
}

TEST(Sampler, MinPRemovesTokensBelowThreshold) {
  const std::vector<double> probs = {0.4, 0.3, 0.15, 0.1, 0.05};
  const std::vector<float> l = log_of(probs);
  SamplingParams p = plain_params(1.0f, 15);
  p.min_p = 0.3f;  // keeps p >= 0.12: ids 0, 1, 2
  Sampler s(p, 5);
  const int n_draws = 10000;
  const auto h = histogram(s, l, n_draws);
  EXPECT_EQ(h.size(), 3u);
  EXPECT_EQ(h.count(3), 0u);
  EXPECT_EQ(h.count(4), 0u);
  EXPECT_NEAR(static_cast<double>(h.at(0)) / n_draws, 0.4 / 0.85, 0.02);

  p.min_p = 0.0f;  // off: every token appears
  Sampler all(p, 5);
  EXPECT_EQ(histogram(all, l, n_draws).size(), 5u);
}

TEST(Sampler, TopPThenMinPKeepsTheIntersection) {
  const std::vector<double> probs = {0.4, 0.3, 0.15, 0.1, 0.05};
  const std::vector<float> l = log_of(probs);
  SamplingParams p = plain_params(1.0f, 16);
  p.top_p = 0.8f;   // keeps {0, 1, 2} (0.85 >= 0.8)
  p.min_p = 0.5f;   // keeps p >= 0.2: {0, 1}
  Sampler s(p, 5);
  const auto h = histogram(s, l, 5000);
  EXPECT_EQ(h.size(), 2u);
  p.min_p = 0.2f;   // keeps p >= 0.08: {0..3}; top-p is then the tighter one
  Sampler t(p, 5);
  const auto h2 = histogram(t, l, 5000);
  EXPECT_EQ(h2.size(), 3u);
  EXPECT_EQ(h2.count(3), 0u);
}

TEST(Sampler, LogitBiasMinusInfBansAToken) {
  std::vector<float> l = {5.0f, 1.0f, 0.5f, 0.0f};
  SamplingParams p = plain_params(0.0f);
  p.logit_bias = {{0, -kInf}};
  Sampler greedy(p, 4);
  EXPECT_EQ(greedy.sample(l.data()), 1);

  p = plain_params(2.0f, 17);
  p.logit_bias = {{0, -kInf}, {2, 1.5f}, {99, 3.0f}};  // out-of-range ids are ignored
  Sampler s(p, 4);
  const auto h = histogram(s, l, 5000);
  EXPECT_EQ(h.count(0), 0u);
  EXPECT_GT(h.at(2), h.at(1));  // 0.5 + 1.5 > 1.0
}

// A bias list sorted by id, each id once (as the server gives it), is merged with the penalised
// ids in one pass per step (linear in its size, issue 31); any other list is sorted at each
// step. Both give the same tokens and log-probabilities, with penalties that touch some of the
// biased ids and some others.
TEST(Sampler, SortedAndUnsortedLogitBiasAgree) {
  const int32_t n_vocab = 3000;
  std::mt19937 rng(7);
  std::vector<float> l(n_vocab);
  for (float& x : l) x = static_cast<float>(rng() % 1000) / 250.0f;
  SamplingParams p = plain_params(1.0f, 99);
  p.repeat_penalty = 1.3f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  SamplingParams sorted = p, shuffled = p;
  for (int32_t id = 0; id < n_vocab; id += 3) sorted.logit_bias.push_back({id, (id % 7) - 3.0f});
  sorted.logit_bias.push_back({n_vocab + 5, 50.0f});  // out of range: ignored by both
  shuffled.logit_bias = sorted.logit_bias;
  std::shuffle(shuffled.logit_bias.begin(), shuffled.logit_bias.end(), rng);
  Sampler a(sorted, n_vocab), b(shuffled, n_vocab);
  for (int step = 0; step < 300; ++step) {
    const int32_t ta = a.sample(l.data()), tb = b.sample(l.data());
    ASSERT_EQ(ta, tb) << "step " << step;
    EXPECT_EQ(a.logprob_of(l.data(), ta).logprob, b.logprob_of(l.data(), tb).logprob) << "step " << step;
    a.accept(ta);
    b.accept(tb);
  }
}

TEST(Sampler, EveryTokenBannedGivesLowestIdDeterministically) {
  const std::vector<float> l = {1.0f, 2.0f, 3.0f};
  SamplingParams p = plain_params(1.0f);
  p.logit_bias = {{0, -kInf}, {1, -kInf}, {2, -kInf}};
  Sampler s(p, 3);
  EXPECT_EQ(s.sample(l.data()), 0);
  p.top_k = 2;
  Sampler k(p, 3);
  EXPECT_EQ(k.sample(l.data()), 0);
}

TEST(Sampler, NanLogitsAreNeverChosen) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> l = {nan, 0.0f, nan, 0.5f};
  Sampler greedy(plain_params(0.0f), 4);
  EXPECT_EQ(greedy.sample(l.data()), 3);
  SamplingParams p = plain_params(1.0f, 18);
  p.top_k = 3;
  Sampler s(p, 4);
  const auto h = histogram(s, l, 2000);
  EXPECT_EQ(h.count(0), 0u);
  EXPECT_EQ(h.count(2), 0u);
}

// Penalties are checked through greedy decisions placed just either side of the expected
// adjusted logit.
int32_t greedy_after(SamplingParams p, const std::vector<int32_t>& accepted,
                     const std::vector<float>& logits) {
  p.temperature = 0.0f;
  Sampler s(p, static_cast<int32_t>(logits.size()));
  for (int32_t t : accepted) s.accept(t);
  return s.sample(logits.data());
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplingParams p = plain_params();
  p.repeat_penalty = 1.25f;
  // Positive: 2.0 / 1.25 = 1.6.
  EXPECT_EQ(greedy_after(p, {0}, {2.0f, 1.599f}), 0);
  EXPECT_EQ(greedy_after(p, {0}, {2.0f, 1.601f}), 1);
  // Negative: -1.0 * 1.25 = -1.25.
  EXPECT_EQ(greedy_after(p, {0}, {-1.0f, -1.251f}), 0);
  EXPECT_EQ(greedy_after(p, {0}, {-1.0f, -1.249f}), 1);
  // Once per distinct token, however often it repeats.
  EXPECT_EQ(greedy_after(p, {0, 0, 0}, {2.0f, 1.599f}), 0);
  // Off at 1.
  p.repeat_penalty = 1.0f;
  EXPECT_EQ(greedy_after(p, {0}, {2.0f, 1.9f}), 0);
}

TEST(Sampler, RepetitionPenaltyLooksBackRepeatLastN) {
  SamplingParams p = plain_params();
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  const std::vector<float> l = {2.0f, 1.5f, 0.0f, 0.0f};
  EXPECT_EQ(greedy_after(p, {0, 2, 3}, l), 0);  // 0 left the window
  EXPECT_EQ(greedy_after(p, {2, 0, 3}, l), 1);  // still inside: 2.0 → 1.0
  p.repeat_last_n = 0;                          // 0: off
  EXPECT_EQ(greedy_after(p, {0}, l), 0);
  p.repeat_last_n = -1;                         // -1: every accepted token
  std::vector<int32_t> long_history = {0};
  for (int i = 0; i < 500; ++i) long_history.push_back(2);
  EXPECT_EQ(greedy_after(p, long_history, l), 1);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplingParams p = plain_params();
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  // Token 0 accepted 3 times: 3.0 − 0.5 − 3·0.25 = 1.75.
  EXPECT_EQ(greedy_after(p, {0, 1, 0, 0}, {3.0f, 0.0f, 1.74f}), 0);
  EXPECT_EQ(greedy_after(p, {0, 1, 0, 0}, {3.0f, 0.0f, 1.76f}), 2);
  // Token 1 accepted once: 2.0 − 0.5 − 0.25 = 1.25.
  EXPECT_EQ(greedy_after(p, {1}, {0.0f, 2.0f, 1.24f}), 1);
  EXPECT_EQ(greedy_after(p, {1}, {0.0f, 2.0f, 1.26f}), 2);
  // Negative penalties encourage.
  p.presence_penalty = -1.0f;
  p.frequency_penalty = 0.0f;
  EXPECT_EQ(greedy_after(p, {1}, {1.5f, 0.6f, 0.0f}), 1);
}

TEST(Sampler, BiasAppliesBeforeRepetitionPenalty) {
  SamplingParams p = plain_params();
  p.logit_bias = {{0, 2.0f}};
  p.repeat_penalty = 2.0f;
  // (1.0 + 2.0) / 2 = 1.5 (penalty after bias), not 1.0/2 + 2.0 = 2.5.
  EXPECT_EQ(greedy_after(p, {0}, {1.0f, 1.49f}), 0);
  EXPECT_EQ(greedy_after(p, {0}, {1.0f, 1.51f}), 1);
}

TEST(Sampler, LogprobOfAtTemperature) {
  const std::vector<float> l = {1.0f, 2.0f, 3.0f};
  Sampler s(plain_params(1.0f), 3);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  TokenLogprob lp = s.logprob_of(l.data(), 1);
  EXPECT_EQ(lp.id, 1);
  EXPECT_NEAR(lp.logprob, 2.0 - lse, 1e-6);

  Sampler hot(plain_params(2.0f), 3);
  const double lse2 = std::log(std::exp(0.5) + std::exp(1.0) + std::exp(1.5));
  EXPECT_NEAR(hot.logprob_of(l.data(), 2).logprob, 1.5 - lse2, 1e-6);

  Sampler greedy(plain_params(0.0f), 3);  // greedy: temperature 1
  EXPECT_NEAR(greedy.logprob_of(l.data(), 0).logprob, 1.0 - lse, 1e-6);
}

TEST(Sampler, TopLogprobsOrderedWithTiesByLowestId) {
  const std::vector<float> l = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f};
  Sampler s(plain_params(1.0f), 5);
  const std::vector<TokenLogprob> top = s.top_logprobs(l.data(), 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 2);
  EXPECT_FLOAT_EQ(top[0].logprob, top[1].logprob);
  EXPECT_NEAR(top[2].logprob, s.logprob_of(l.data(), 2).logprob, 1e-7);
  double total = 0.0;
  for (const TokenLogprob& t : s.top_logprobs(l.data(), 10)) total += std::exp(t.logprob);
  EXPECT_NEAR(total, 1.0, 1e-6);  // n_top clamped to the vocabulary: all mass
  EXPECT_TRUE(s.top_logprobs(l.data(), 0).empty());
}

TEST(Sampler, DefaultParamsOnGemmaSizedVocab) {
  const int n = 262144;
  const std::vector<float> l = random_logits(n, 21, 2.0f);
  SamplingParams p;  // defaults: T 0.8, top-k 40, top-p 0.95, min-p 0.05
  p.seed = 77;
  Sampler a(p, n), b(p, n);
  // The 40 best ids: every draw must be one of them.
  std::vector<std::pair<float, int32_t>> sorted;
  for (int i = 0; i < n; ++i) sorted.push_back({l[static_cast<size_t>(i)], i});
  std::partial_sort(sorted.begin(), sorted.begin() + 40, sorted.end(),
                    [](const auto& x, const auto& y) { return x.first > y.first; });
  std::set<int32_t> top40;
  for (int i = 0; i < 40; ++i) top40.insert(sorted[static_cast<size_t>(i)].second);
  for (int i = 0; i < 50; ++i) {
    const int32_t t = a.sample(l.data());
    EXPECT_TRUE(top40.count(t)) << t;
    EXPECT_EQ(t, b.sample(l.data()));
    a.accept(t);
    b.accept(t);
  }
}

// An allowed-token mask (a grammar's) applies before everything else.
std::vector<uint64_t> mask_of(int n, std::initializer_list<int32_t> ids) {
  std::vector<uint64_t> m(static_cast<size_t>((n + 63) / 64), 0);
  for (int32_t id : ids) m[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  return m;
}

TEST(Sampler, MaskRestrictsGreedyAndDraws) {
  const int n = 300;
  const std::vector<float> l = random_logits(n, 5);
  const std::vector<uint64_t> m = mask_of(n, {3, 70, 71, 128, 299});
  int32_t best = 3;
  for (int32_t id : {3, 70, 71, 128, 299})
    if (l[static_cast<size_t>(id)] > l[static_cast<size_t>(best)]) best = id;
  Sampler greedy(plain_params(0.0f), n);
  EXPECT_EQ(greedy.sample(l.data(), m.data()), best);
  SamplingParams p = plain_params(1.5f, 9);
  p.top_k = 2;  // top-k over the allowed tokens only
  Sampler s(p, n);
  std::set<int32_t> seen;
  for (int i = 0; i < 400; ++i) seen.insert(s.sample(l.data(), m.data()));
  std::vector<int32_t> allowed = {3, 70, 71, 128, 299};
  std::sort(allowed.begin(), allowed.end(), [&](int32_t a, int32_t b) { return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)]; });
  EXPECT_EQ(seen, (std::set<int32_t>{allowed[0], allowed[1]}));
}

TEST(Sampler, MaskBeatsLogitBiasAndPenalties) {
  const std::vector<float> l = {0.0f, 1.0f, 2.0f, 3.0f};
  SamplingParams p = plain_params(0.0f);
  p.logit_bias = {{3, 100.0f}};      // a masked token stays masked
  p.presence_penalty = 2.0f;
  Sampler s(p, 4);
  s.accept(1);
  const std::vector<uint64_t> m = mask_of(4, {0, 1});
  EXPECT_EQ(s.sample(l.data(), m.data()), 0);  // 1 - 2 (presence) < 0
}

TEST(Sampler, MaskWithOnlyMinusInfLogitsStillPicksAnAllowedToken) {
  const std::vector<float> l = {5.0f, -kInf, -kInf, 4.0f};
  const std::vector<uint64_t> m = mask_of(4, {1, 2});
  for (float t : {0.0f, 1.0f}) {
    Sampler s(plain_params(t), 4);
    EXPECT_EQ(s.sample(l.data(), m.data()), 1);
  }
}

TEST(Sampler, MaskLogitsCopyIsReusedBySample) {
  const int n = 200;
  const std::vector<float> l = random_logits(n, 8);
  const std::vector<uint64_t> m = mask_of(n, {10, 150});
  Sampler a(plain_params(1.0f, 3), n), b(plain_params(1.0f, 3), n);
  const float* masked = a.mask_logits(l.data(), m.data());
  EXPECT_EQ(masked[10], l[10]);
  EXPECT_EQ(masked[11], -kInf);
  for (int i = 0; i < 20; ++i) {
    const float* mm = a.mask_logits(l.data(), m.data());
    EXPECT_EQ(a.sample(mm, m.data()), b.sample(l.data(), m.data()));
  }
}

}  // namespace
}  // namespace ubatch
