// What the scheduler and the engine expose for live views (the server's dashboard): the step
// log (a record per step: decode and prefill tokens against the budget), TTFT/ITL over the last
// minute, and the table of active requests with their states. Fake runner (virtual clock) for
// exact accounting; the tiny reference model for the engine's publishing.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <thread>

#include "context/context.h"
#include "sched/engine.h"
#include "sched_harness.h"
#include "support.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::sched {
namespace {

StepRecord record(uint64_t index) {
  StepRecord r;
  r.index = index;
  r.end_ms = static_cast<double>(index);
  r.n_decode = static_cast<int32_t>(index);
  return r;
}

std::vector<uint64_t> indices(const std::vector<StepRecord>& v) {
  std::vector<uint64_t> out;
  for (const StepRecord& r : v) out.push_back(r.index);
  return out;
}

TEST(StepLog, ReadsTheRecordsNotSeenYetOldestFirst) {
  StepLog log(4);
  std::vector<StepRecord> out;
  EXPECT_EQ(log.read(0, 100, out), 0u);
  EXPECT_TRUE(out.empty());
  for (uint64_t i = 1; i <= 3; ++i) log.push(record(i));
  EXPECT_EQ(log.read(0, 100, out), 3u);
  EXPECT_EQ(indices(out), (std::vector<uint64_t>{1, 2, 3}));
  out.clear();
  EXPECT_EQ(log.read(2, 100, out), 3u);
  EXPECT_EQ(indices(out), (std::vector<uint64_t>{3}));
  out.clear();
  EXPECT_EQ(log.read(3, 100, out), 3u);  // nothing new
  EXPECT_TRUE(out.empty());
}

TEST(StepLog, OverwrittenAndCappedRecordsAreSkippedNewestKept) {
  StepLog log(4);
  for (uint64_t i = 1; i <= 10; ++i) log.push(record(i));
  std::vector<StepRecord> out;
  EXPECT_EQ(log.read(0, 100, out), 10u);  // the ring holds 7..10
  EXPECT_EQ(indices(out), (std::vector<uint64_t>{7, 8, 9, 10}));
  EXPECT_EQ(out[0].n_decode, 7);
  out.clear();
  log.read(5, 2, out);  // at most 2: the newest
  EXPECT_EQ(indices(out), (std::vector<uint64_t>{9, 10}));
  EXPECT_EQ(log.n_steps(), 10u);
}

TEST(LatencyWindow, PercentilesAreExactToTheBin) {
  LatencyWindow w;
  for (int i = 1; i <= 100; ++i) w.observe(1000.0 + i, static_cast<double>(i));  // 1..100 ms
  const LatencySummary s = w.summary(1200.0);
  EXPECT_EQ(s.count, 100u);
  EXPECT_NEAR(s.p50_ms, 50.0, 50.0 * 0.023);
  EXPECT_NEAR(s.p99_ms, 99.0, 99.0 * 0.023);
  for (double v : {0.5, 3.0, 250.0, 12345.0}) EXPECT_NEAR(LatencyWindow::bin_value(LatencyWindow::bin_of(v)), v, v * 0.023);
  EXPECT_EQ(LatencyWindow::bin_of(0.0), 0);
  EXPECT_EQ(LatencyWindow::bin_of(1e12), LatencyWindow::kBins - 1);
  EXPECT_EQ(LatencySummary{}.count, LatencyWindow{}.summary(0).count);
}

TEST(LatencyWindow, ObservationsLeaveAfterAMinute) {
  LatencyWindow w;
  w.observe(0.0, 500.0);           // second 0
  w.observe(30'500.0, 10.0);       // second 30
  EXPECT_EQ(w.summary(59'999.0).count, 2u);
  const LatencySummary s = w.summary(60'000.0);  // second 60: second 0 has left the window
  EXPECT_EQ(s.count, 1u);
  EXPECT_NEAR(s.p99_ms, 10.0, 0.25);
  EXPECT_EQ(w.summary(95'000.0).count, 0u);
  EXPECT_EQ(w.summary(95'000.0).p50_ms, 0.0);
  w.observe(10'000'000.0, 7.0);  // a long gap: every slot is reused
  EXPECT_EQ(w.summary(10'000'000.0).count, 1u);
}

int64_t sum(const std::vector<StepRecord>& v, int32_t StepRecord::*field) {
  int64_t n = 0;
  for (const StepRecord& r : v) n += r.*field;
  return n;
}

TEST(SchedulerStepLog, EveryStepRecordsItsDecodeAndPrefillTokensAgainstTheBudget) {
  EngineConfig c = config(Policy::UBatch, 8, 64);
  c.spec_k = 0;  // one decode token per sequence and step (drafts: the next test)
  Harness h(c);
  for (int32_t seed : {1, 2, 3}) h.submit(make_request(seed == 1 ? 100 : 30 + seed, 8, seed));
  h.run_all();
  std::vector<StepRecord> steps;
  h.sched.step_log().read(0, 100000, steps);
  const MetricsSnapshot m = h.sched.metrics();
  ASSERT_EQ(steps.size(), m.steps);
  ASSERT_FALSE(steps.empty());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].index, i + 1);
    EXPECT_EQ(steps[i].n_budget, 64);
    EXPECT_LE(steps[i].n_decode + steps[i].n_prefill, steps[i].n_budget);
    EXPECT_GT(steps[i].n_decode + steps[i].n_prefill, 0);
    EXPECT_GT(steps[i].decode_ms, 0.0f);
    if (i > 0) {
      EXPECT_GE(steps[i].end_ms, steps[i - 1].end_ms);
    }
  }
  // The first step prefills a full budget; nothing is decoding yet.
  EXPECT_EQ(steps[0].n_prefill, 64);
  EXPECT_EQ(steps[0].n_decode, 0);
  EXPECT_EQ(sum(steps, &StepRecord::n_prefill) + sum(steps, &StepRecord::n_decode), static_cast<int64_t>(m.step_tokens));
  EXPECT_EQ(sum(steps, &StepRecord::n_prefill), static_cast<int64_t>(m.prompt_tokens));
  // Each request's first token comes from its last prefill chunk, the other 7 from decodes.
  EXPECT_EQ(sum(steps, &StepRecord::n_decode), 3 * 7);
  EXPECT_EQ(sum(steps, &StepRecord::n_sampled), static_cast<int64_t>(m.generated_tokens));
  EXPECT_EQ(steps.back().n_running + steps.back().n_waiting, 0);
  // Latencies of the last minute: one TTFT per request, one gap per later token.
  const LatencyLastMinute lat = h.sched.latency_last_minute(h.runner.now_ms());
  EXPECT_EQ(lat.ttft.count, 3u);
  EXPECT_EQ(lat.itl.count, 3u * 7);
  EXPECT_GT(lat.ttft.p99_ms, 0.0);
}

TEST(SchedulerStepLog, DraftTokensCountAsDecodeAndAcceptedOnesAsOutput) {
  EngineConfig c = config(Policy::UBatch, 4, 64);
  c.spec_always = true;  // draft whatever the n-gram drafter finds
  Harness h(c);
  // Prompts that continue the fake model's own chain: its next tokens repeat what came before.
  for (int32_t start : {5, 400}) {
    Request r = make_request(1, 60);
    r.prompt = {start};
    while (r.prompt.size() < 48) r.prompt.push_back(sim::FakeRunner::next_token(0, r.prompt.back(), 1000));
    r.ignore_eos = true;
    h.submit(r);
  }
  h.run_all();
  const MetricsSnapshot m = h.sched.metrics();
  ASSERT_GT(m.draft_tokens, 0u) << "nothing was drafted: the test needs a repetitive prompt";
  std::vector<StepRecord> steps;
  h.sched.step_log().read(0, 100000, steps);
  EXPECT_EQ(sum(steps, &StepRecord::n_draft), static_cast<int64_t>(m.draft_tokens));
  EXPECT_EQ(sum(steps, &StepRecord::n_prefill) + sum(steps, &StepRecord::n_decode), static_cast<int64_t>(m.step_tokens));
  EXPECT_EQ(sum(steps, &StepRecord::n_sampled), static_cast<int64_t>(m.generated_tokens));
  EXPECT_EQ(m.generated_tokens, 120u);
  for (const StepRecord& r : steps) {
    EXPECT_LE(r.n_draft, r.n_decode);
    EXPECT_LE(r.n_decode + r.n_prefill, r.n_budget);
  }
  // Fewer steps than tokens: accepted drafts gave some steps several output tokens.
  EXPECT_LT(static_cast<int64_t>(steps.size()), 120);
}

TEST(SchedulerStepLog, RecomputingAPreemptedSampleIsPrefill) {
  EngineConfig c = config(Policy::UBatch, 1, 64);
  c.preempt_min_run_ms = 50;
  Harness h(c);
  Request low = make_request(24, 200, 1);
  low.ignore_eos = true;
  h.submit(low);
  h.run_until(200);
  h.submit(make_request(16, 4, 2, 10));
  h.run_all();
  const MetricsSnapshot m = h.sched.metrics();
  ASSERT_EQ(m.preemptions_priority, 1u);
  std::vector<StepRecord> steps;
  h.sched.step_log().read(0, 100000, steps);
  // Prompt tokens, plus the preempted sample's prompt and generated tokens computed again.
  EXPECT_GT(sum(steps, &StepRecord::n_prefill), static_cast<int64_t>(m.prompt_tokens));
  EXPECT_EQ(sum(steps, &StepRecord::n_prefill) + sum(steps, &StepRecord::n_decode), static_cast<int64_t>(m.step_tokens));
  EXPECT_EQ(sum(steps, &StepRecord::n_sampled), static_cast<int64_t>(m.generated_tokens));
}

const ActiveRequest* find(const std::vector<ActiveRequest>& rows, uint64_t id) {
  for (const ActiveRequest& r : rows)
    if (r.id == id) return &r;
  return nullptr;
}

TEST(SchedulerActiveRequests, StatesFollowEachRequestThroughWaitingPrefillDecodeAndPreemption) {
  EngineConfig c = config(Policy::UBatch, 1, 16);
  c.preempt_min_run_ms = 50;
  Harness h(c);
  Request a_req = make_request(40, 300, 1);
  a_req.ignore_eos = true;
  a_req.deadline_ms = 100000;
  a_req.deadline_policy = DeadlinePolicy::BestEffort;
  const uint64_t a = h.submit(a_req);
  const uint64_t b = h.submit(make_request(10, 4, 2));
  std::vector<ActiveRequest> rows;
  h.sched.active_requests(h.runner.now_ms(), rows);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id, a);  // by arrival
  EXPECT_EQ(rows[0].state, RequestState::Waiting);
  EXPECT_EQ(rows[0].n_prompt, 40);
  EXPECT_EQ(rows[0].max_tokens, 300);
  EXPECT_EQ(rows[0].deadline_ms, 100000);
  EXPECT_FALSE(rows[0].strict_deadline);
  EXPECT_NEAR(rows[0].deadline_left_ms, 100000.0, 1.0);
  EXPECT_EQ(rows[0].ttft_ms, -1.0);

  h.step();  // A takes the only slot and prefills 16 of its 40 prompt tokens
  h.sched.active_requests(h.runner.now_ms(), rows);
  EXPECT_EQ(find(rows, a)->state, RequestState::Prefilling);
  EXPECT_EQ(find(rows, a)->n_computed, 16);
  EXPECT_EQ(find(rows, b)->state, RequestState::Waiting);
  EXPECT_GT(find(rows, b)->age_ms, 0.0);

  h.step();
  h.step();  // 40 prompt tokens: the first token comes with the third step
  h.sched.active_requests(h.runner.now_ms(), rows);
  EXPECT_EQ(find(rows, a)->state, RequestState::Decoding);
  EXPECT_EQ(find(rows, a)->n_generated, 1);
  EXPECT_GT(find(rows, a)->ttft_ms, 0.0);

  h.run_until(300);
  const uint64_t u = h.submit(make_request(12, 50, 3, 10));  // outranks A: preempts it
  h.step();
  h.sched.active_requests(h.runner.now_ms(), rows);
  EXPECT_EQ(find(rows, a)->state, RequestState::Preempted);
  EXPECT_EQ(find(rows, a)->n_preempted, 1);
  EXPECT_EQ(find(rows, u)->priority, 10);
  EXPECT_NE(find(rows, u)->state, RequestState::Waiting);

  h.run_all();
  h.sched.active_requests(h.runner.now_ms(), rows);
  EXPECT_TRUE(rows.empty());
  EXPECT_STREQ(request_state_name(RequestState::Preempted), "preempted");
}

// The engine on the tiny reference model: the request table is published while it is read,
// and emptied when the engine goes idle; the step log and the latency window fill.
TEST(EngineLiveView, PublishesTheRequestTableWhileItIsReadAndEmptiesItWhenIdle) {
  const std::string path = test::reference_path("models/tiny-llama-q8_0.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "reference model not found: " << path;
  Result<std::unique_ptr<gguf::File>> file = gguf::File::open(path);
  ASSERT_TRUE(file.is_ok());
  std::shared_ptr<const gguf::File> shared(std::move(file.value()));
  Result<std::unique_ptr<Model>> model = Model::load(shared);
  ASSERT_TRUE(model.is_ok());
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*shared);
  ASSERT_TRUE(tok.is_ok());
  ContextParams p;
  p.n_ctx = 8192;
  p.n_batch = 64;
  p.n_ubatch = 64;
  p.n_threads = 1;
  Result<std::unique_ptr<Context>> ctx = Context::create(std::shared_ptr<Model>(std::move(model.value())), p);
  ASSERT_TRUE(ctx.is_ok());
  EngineConfig cfg;
  cfg.n_parallel = 4;
  cfg.n_batch = 64;
  cfg.aging_ms = 0;         // the waiting two never outrank the running four,
  cfg.preempt_margin = 0;   // and nobody is preempted for priority
  Engine engine(*ctx.value(), *tok.value(), cfg);
  EXPECT_EQ(engine.info().n_threads, 1);
  EXPECT_EQ(engine.info().n_ubatch, 64);
  EXPECT_EQ(engine.info().kv_type, "f16");
  EXPECT_GT(engine.info().kv_blocks, 0);

  EXPECT_TRUE(engine.active_requests().rows.empty());  // marks interest
  std::vector<std::shared_ptr<Stream>> streams;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt_text = "Once upon a time " + std::to_string(i);
    r.max_tokens = 1900;  // 4 x 1900 fit the cache: nobody is preempted; cancelled long before the end
    r.ignore_eos = true;
    r.priority = -i;     // the first four submitted keep the slots
    Engine::Submitted s = engine.submit(r);
    ASSERT_TRUE(s.ok()) << s.error_message;
    streams.push_back(s.stream);
  }
  // Rows appear while the requests run (reads keep the interest alive). The requests run
  // until cancelled (however slowly this thread is scheduled): 4 decode, 2 wait for a slot.
  bool seen = false;
  for (int i = 0; i < 30000 && !seen; ++i) {
    const ActiveRequests t = engine.active_requests();
    seen = t.rows.size() == 6;
    if (seen) {
      int n_waiting = 0;
      for (size_t k = 0; k < t.rows.size(); ++k) {
        EXPECT_EQ(t.rows[k].id, streams[k]->id());
        EXPECT_EQ(t.rows[k].priority, -static_cast<int32_t>(k));
        n_waiting += t.rows[k].state == RequestState::Waiting;
      }
      EXPECT_EQ(n_waiting, 2);
      EXPECT_GT(t.published_ms, 0.0);
      EXPECT_LE(t.published_ms, engine.now_ms());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(seen) << "the table never showed the 6 requests";
  for (auto& s : streams) engine.cancel(s->id());
  for (auto& s : streams) {
    Event e;
    while (!s->finished()) ASSERT_TRUE(s->next(e, std::chrono::seconds(60)));
  }
  bool empty = false;
  for (int i = 0; i < 3000 && !empty; ++i) {
    empty = engine.active_requests().rows.empty();
    if (!empty) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(empty) << "the table was not emptied when the engine went idle";
  EXPECT_GT(engine.step_log().n_steps(), 0u);
  EXPECT_GT(engine.live_view_ms(), 0.0);
  const LatencyLastMinute lat = engine.latency_last_minute();
  EXPECT_GE(lat.ttft.count, 1u);
}

}  // namespace
}  // namespace ubatch::sched
