#include "sched/sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "sched/scheduler.h"

namespace ubatch::sched::sim {

CostModel fit_cost_model(const std::vector<std::array<double, 3>>& samples) {
  // Weighted normal equations for ms ≈ a + b·tokens + c·sequences, minimising the squared
  // *relative* error: each sample is divided by its measured time, so a 20 ms decode step
  // counts as much as a 1 s prefill (plain least squares would fit the long prefills only).
  double m[3][4] = {};
  for (const auto& s : samples) {
    const double w = s[2] > 0 ? 1.0 / s[2] : 1.0;
    const double x[3] = {w, w * s[0], w * s[1]};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m[i][j] += x[i] * x[j];
      m[i][3] += x[i] * w * s[2];
    }
  }
  for (int i = 0; i < 3; ++i) {  // Gauss-Jordan with partial pivoting
    int p = i;
    for (int r = i + 1; r < 3; ++r)
      if (std::fabs(m[r][i]) > std::fabs(m[p][i])) p = r;
    for (int c = 0; c < 4; ++c) std::swap(m[i][c], m[p][c]);
    if (std::fabs(m[i][i]) < 1e-12) return CostModel{};
    for (int r = 0; r < 3; ++r) {
      if (r == i) continue;
      const double f = m[r][i] / m[i][i];
      for (int c = 0; c < 4; ++c) m[r][c] -= f * m[i][c];
    }
  }
  CostModel cm;
  cm.a_ms = std::max(0.0, m[0][3] / m[0][0]);
  cm.b_ms_per_token = std::max(0.0, m[1][3] / m[1][1]);
  cm.c_ms_per_seq = std::max(0.0, m[2][3] / m[2][2]);
  return cm;
}

FakeRunner::FakeRunner(int32_t n_vocab, int32_t n_ctx, int32_t block_size, const CostModel& cost)
    : n_vocab_(n_vocab), cost_(cost) {
  KvCacheConfig kc;
  kc.n_layer = 1;
  kc.n_embd_k = 32;
  kc.n_embd_v = 32;
  kc.n_cells = n_ctx;
  kc.block_size = block_size;
  kc.type = TensorType::F32;
  Result<std::unique_ptr<KvCache>> kv = KvCache::create(kc);
  UBATCH_CHECK_MSG(kv.is_ok(), kv.message().c_str());
  kv_ = std::move(kv.value());
}

int32_t FakeRunner::next_token(int32_t pos, int32_t token, int32_t n_vocab) {
  uint64_t h = static_cast<uint64_t>(static_cast<uint32_t>(pos)) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(static_cast<uint32_t>(token)) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<int32_t>(h % static_cast<uint64_t>(n_vocab));
}

int32_t FakeRunner::model_token(int32_t pos, int32_t token) const {
  if (surprise_every_ <= 0) return next_token(pos, token, n_vocab_);
  int32_t next = next_token(0, token, n_vocab_);
  if (pos % surprise_every_ != 0) return next;
  // A surprise skips 1 to 3 steps of f, chosen by position (so no n-gram of the sequence
  // predicts it), and lands back on f's path.
  const int32_t skip = 1 + next_token(pos, token, 3);
  for (int32_t i = 0; i < skip; ++i) next = next_token(0, next, n_vocab_);
  return next;
}

DecodeResult FakeRunner::run(const Batch& batch, std::vector<RowSample>& rows) {
  const int32_t n = batch.n_tokens();
  std::vector<int32_t> seq(n);
  for (int32_t i = 0; i < n; ++i) seq[i] = batch.seq_ids[i][0];
  KvView view;
  Status s = kv_->place(batch.token.data(), batch.pos.data(), seq.data(), n, view);
  if (!s) return DecodeResult{s.message().rfind("kv: out of blocks", 0) == 0 ? DecodeStatus::NoKvSpace
                                                                                : DecodeStatus::InvalidBatch,
                              s.message()};
  // Cost: one `sequences` term per distinct sequence, and one more per extra logits row of a
  // sequence (speculative verification rows), so plain decoding costs what it always did.
  std::map<int32_t, int> seqs, rows_of;
  for (int32_t i = 0; i < n; ++i) {
    seqs[seq[i]] = 1;
    if (batch.logits[i]) ++rows_of[seq[i]];
  }
  int64_t extra_rows = 0;
  for (const auto& [id, r] : rows_of) extra_rows += r - 1;
  now_ms_ += cost_.step_ms(n, static_cast<int64_t>(seqs.size()) + extra_rows);
  ++n_runs_;
  std::vector<int32_t> batch_row;
  for (int32_t i = 0; i < n; ++i)
    if (batch.logits[i]) batch_row.push_back(i);
  UBATCH_CHECK(batch_row.size() == rows.size());
  sample_rows(rows, [&](size_t k, RowSample& row) {
    const int32_t i = batch_row[k];
    row.token = row.forced >= 0 ? row.forced : model_token(batch.pos[i], batch.token[i]);
    if (row.sampler) row.sampler->accept(row.token);
  });
  return {};
}

std::string FakeRunner::token_to_piece(int32_t id) const {
  std::string s(1, static_cast<char>('a' + id % 26));
  if (id % 5 == 0) s += ' ';
  return s;
}

bool is_urgent(const Workload& w, int32_t i) {
  if (w.urgent_share <= 0) return false;
  // Its own stream of draws (a hash of seed and index), so the rest of the mix is unchanged.
  uint64_t h = (w.seed ^ 0x7F4A7C15F39CC060ull) + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  return static_cast<double>(h >> 11) * 0x1.0p-53 < w.urgent_share;
}

std::vector<Request> workload_requests(const Workload& w, int32_t n_vocab) {
  std::mt19937_64 rng(w.seed);
  auto uniform = [&](int32_t lo, int32_t hi) {
    return lo + static_cast<int32_t>(rng() % static_cast<uint64_t>(std::max(1, hi - lo + 1)));
  };
  std::vector<Request> out;
  for (int32_t k = 0; k < w.n_requests; ++k) {
    Request r;
    const int32_t n_prompt = uniform(w.prompt_min, w.prompt_max);
    for (int32_t i = 0; i < n_prompt; ++i) r.prompt.push_back(1 + static_cast<int32_t>(rng() % (n_vocab - 1)));
    r.max_tokens = uniform(w.output_min, w.output_max);
    r.priority = w.priority_levels > 1 ? static_cast<int32_t>(rng() % w.priority_levels) : 0;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    if (is_urgent(w, k)) {
      r.priority = w.urgent_priority;
      r.deadline_ms = w.urgent_deadline_ms;
    }
    out.push_back(std::move(r));
  }
  return out;
}

SimResult simulate(const EngineConfig& config, const CostModel& cost, const Workload& w, int32_t n_ctx,
                   int32_t n_vocab) {
  FakeRunner runner(n_vocab, n_ctx, 16, cost);
  Scheduler sched(runner, config);
  const std::vector<Request> requests = workload_requests(w, n_vocab);
  std::mt19937_64 rng(w.seed ^ 0xA5A5A5A5ull);  // arrival times

  // Arrival schedule: (time, user). Closed loop: each user starts at 0 and sends its next
  // request when the previous one ends (+ think time). Open loop: Poisson arrivals.
  std::multimap<double, int32_t> arrivals;
  int32_t issued = 0;
  if (w.rate_per_s > 0) {
    std::exponential_distribution<double> gap(w.rate_per_s / 1000.0);
    double t = 0;
    for (int32_t i = 0; i < w.n_requests; ++i) {
      arrivals.emplace(t, -1);
      t += gap(rng);
    }
  } else {
    for (int32_t u = 0; u < std::min(w.n_users, w.n_requests); ++u) arrivals.emplace(0.0, u);
  }
  struct Live {
    std::shared_ptr<Stream> stream;
    int32_t user;
    bool urgent;
    bool has_deadline;
    bool missed = false;
  };
  std::vector<Live> live;
  std::vector<double> ttft, tpot, e2e, urgent_ttft;
  SimResult res;
  uint64_t next_id = 1;
  for (;;) {
    while (!arrivals.empty() && arrivals.begin()->first <= runner.now_ms()) {
      const int32_t user = arrivals.begin()->second;
      arrivals.erase(arrivals.begin());
      if (issued >= w.n_requests) continue;
      ++issued;
      Request r = requests[static_cast<size_t>(issued - 1)];
      auto stream = std::make_shared<Stream>(next_id);
      if (sched.validate(r)) continue;  // cannot fit this cache: skipped
      const bool urgent = is_urgent(w, issued - 1), has_deadline = r.deadline_ms > 0;
      (void)sched.submit(next_id++, std::move(r), stream);  // a refusal ends the stream at once
      live.push_back({stream, user, urgent, has_deadline});
      res.urgent += urgent ? 1 : 0;
      res.with_deadline += has_deadline ? 1 : 0;
    }
    bool ran = sched.step();
    // Collect finished requests.
    for (size_t i = 0; i < live.size();) {
      Event e;
      bool done = false;
      while (live[i].stream->next(e, std::chrono::milliseconds(0))) {
        if (e.kind == Event::Kind::Finish && e.finish == FinishReason::Deadline) live[i].missed = true;
        if (e.kind == Event::Kind::Done && e.rejection) {
          done = true;
          ++res.rejected;
          ++res.deadline_missed;
        } else if (e.kind == Event::Kind::Done) {
          done = true;
          if (live[i].missed) ++res.deadline_missed;
          if (live[i].urgent && e.usage.completion_tokens > 0) urgent_ttft.push_back(e.timings.ttft_ms);
          ++res.completed;
          res.generated_tokens += e.usage.completion_tokens;
          res.prompt_tokens += e.usage.prompt_tokens;
          if (e.usage.completion_tokens > 0) ttft.push_back(e.timings.ttft_ms);
          tpot.push_back(e.timings.tpot_ms);
          e2e.push_back(e.timings.total_ms);
        }
      }
      if (done) {
        if (live[i].user >= 0 && issued < w.n_requests) arrivals.emplace(runner.now_ms() + w.think_ms, live[i].user);
        live.erase(live.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    if (ran) continue;
    if (!sched.has_work() && arrivals.empty()) break;
    double next = arrivals.empty() ? std::numeric_limits<double>::infinity() : arrivals.begin()->first;
    next = std::min(next, sched.next_event_ms());
    if (!std::isfinite(next)) {
      if (!sched.has_work()) break;
      next = runner.now_ms() + 1.0;  // blocked on KV: let time pass (nothing else can free it)
    }
    runner.advance_to(std::max(next, runner.now_ms() + 1e-6));
  }
  res.makespan_ms = runner.now_ms();
  res.throughput_tps = res.makespan_ms > 0 ? 1000.0 * res.generated_tokens / res.makespan_ms : 0.0;
  auto pct = [](std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t i = static_cast<size_t>(std::clamp(std::ceil(p / 100.0 * v.size()), 1.0, double(v.size()))) - 1;
    return v[i];
  };
  res.ttft_p50_ms = pct(ttft, 50);
  res.ttft_p99_ms = pct(ttft, 99);
  res.tpot_p50_ms = pct(tpot, 50);
  res.tpot_p99_ms = pct(tpot, 99);
  res.e2e_p50_ms = pct(e2e, 50);
  res.e2e_p99_ms = pct(e2e, 99);
  res.urgent_ttft_p50_ms = pct(urgent_ttft, 50);
  res.urgent_ttft_p99_ms = pct(urgent_ttft, 99);
  const MetricsSnapshot m = sched.metrics();
  res.steps = static_cast<int64_t>(m.steps);
  res.batch_fill = m.batch_fill();
  res.preemptions = static_cast<int64_t>(m.preemptions);
  res.preemptions_memory = static_cast<int64_t>(m.preemptions_memory);
  res.preemptions_priority = static_cast<int64_t>(m.preemptions_priority);
  return res;
}

}  // namespace ubatch::sched::sim
