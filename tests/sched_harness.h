// Shared by the test_sched_*.cpp files that drive the scheduler on the fake runner (virtual
// clock, real paged KV cache): a harness that submits, steps and records every event.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sched/scheduler.h"
#include "sched/sim.h"

namespace ubatch::sched {

struct Harness {
  sim::FakeRunner runner;
  Scheduler sched;
  uint64_t next_id = 1;
  std::map<uint64_t, std::shared_ptr<Stream>> streams;
  std::map<uint64_t, std::map<int32_t, std::vector<int32_t>>> tokens;  // request -> sample -> ids
  std::map<uint64_t, std::map<int32_t, std::vector<int64_t>>> token_step;
  std::map<uint64_t, std::map<int32_t, std::vector<double>>> token_ms;  // clock time of each token
  std::map<uint64_t, std::string> text;
  std::map<uint64_t, Event> done;
  std::map<uint64_t, double> done_ms;  // clock time the Done event was seen
  std::map<uint64_t, std::map<int32_t, FinishReason>> finish;
  std::map<uint64_t, std::map<int32_t, std::string>> finish_error;
  std::map<uint64_t, SubmitError> refused;  // refused at submit (admission)
  int64_t steps = 0;

  Harness(const EngineConfig& cfg, int32_t n_ctx = 4096, int32_t n_vocab = 1000)
      : runner(n_vocab, n_ctx, 16, sim::CostModel{}), sched(runner, cfg) {}

  uint64_t submit(Request r) {
    EXPECT_FALSE(sched.validate(r).has_value());
    const uint64_t id = next_id++;
    streams[id] = std::make_shared<Stream>(id);
    if (std::optional<SubmitError> e = sched.submit(id, std::move(r), streams[id])) refused.emplace(id, *e);
    drain();
    return id;
  }
  bool step() {
    const bool ran = sched.step();
    if (ran) ++steps;
    drain();
    return ran;
  }
  // Steps (letting time pass when nothing runs) until the clock reaches t.
  void run_until(double t) {
    while (runner.now_ms() < t)
      if (!step()) runner.advance_to(std::min(t, runner.now_ms() + 1.0));
  }
  void drain() {
    for (auto& [id, s] : streams) {
      Event e;
      while (s->next(e, std::chrono::milliseconds(0))) {
        if (e.kind == Event::Kind::Token) {
          if (e.token >= 0) {
            tokens[id][e.index].push_back(e.token);
            token_step[id][e.index].push_back(steps);
            token_ms[id][e.index].push_back(runner.now_ms());
          }
          text[id] += e.text;
        } else if (e.kind == Event::Kind::Finish) {
          finish[id][e.index] = e.finish;
          finish_error[id][e.index] = e.error;
        } else {
          done[id] = e;
          done_ms[id] = runner.now_ms();
        }
      }
    }
  }
  void run_all(int max_steps = 100000) {
    for (int i = 0; i < max_steps && sched.has_work(); ++i)
      if (!step()) runner.advance_to(runner.now_ms() + 1.0);
    drain();
  }
};

inline Request make_request(int32_t n_prompt, int32_t max_tokens, int32_t seed = 0, int32_t priority = 0) {
  Request r;
  for (int32_t i = 0; i < n_prompt; ++i) r.prompt.push_back(1 + (i * 31 + seed * 97) % 900);
  r.max_tokens = max_tokens;
  r.priority = priority;
  r.sampling.temperature = 0;
  return r;
}

inline EngineConfig config(Policy p = Policy::UBatch, int32_t n_parallel = 8, int32_t n_batch = 64) {
  EngineConfig c;
  c.policy = p;
  c.n_parallel = n_parallel;
  c.n_batch = n_batch;
  return c;
}

}  // namespace ubatch::sched
