// What the scheduler keeps per request and per sample while a request is live: its
// sequences' tokens, samplers, stop matchers, drafters, ranks and timings. Internal to sched/:
// the scheduler state (sched_state.h) owns them, the step stages (step_planner.h,
// step_output.h) read and advance them. Times are milliseconds on the runner clock.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "sched/ngram_draft.h"
#include "sched/request.h"
#include "sched/spec_policy.h"
#include "sched/stop_matcher.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::sched {

struct Req;

// One sample of a request: a token stream with its own KV sequence while running.
struct Seq {
  Req* req = nullptr;
  int32_t index = 0;                // sample index within the request
  int32_t seq_id = -1;              // KV sequence while running
  std::vector<int32_t> tokens;      // prompt, then generated
  int32_t n_prompt = 0;
  int32_t n_computed = 0;           // tokens whose KV is in the cache
  int32_t n_generated = 0;
  bool done = false;
  bool admitted_once = false;
  Sampler sampler;
  std::optional<grammar::Matcher> grammar;  // with a grammar: its state after the tokens generated so far
  Utf8StreamDecoder utf8;
  StopMatcher stop;
  std::unique_ptr<NgramDrafter> drafter;  // indexes tokens when the sequence may speculate
  AcceptanceCounts acceptance;            // its drafts' record
  double last_token_ms = -1;
  // Waiting and rank (rank.h): time waited in earlier waits, the start of the current one,
  // and while running the rank it was admitted with.
  double waited_ms = 0;
  double wait_since_ms = 0;
  double rank = 0;
  double admitted_ms = -1;         // last (re)admission
  double preempted_at_ms = -1;     // while preempted: when
  double readmitted_from_ms = -1;  // the preemption its last admission ended (undone by unadmit)
  // Embedding requests: the pooled final hidden states of the tokens computed since the last
  // admission (mean: their sum in token order; cls, last: the one row), [n_embd].
  std::vector<double> pool_sum;
  // Thinking budget (Request::reasoning_budget): inside the open block, the tokens generated in
  // it, the index of the next forced closing token (-1: not forcing), and the block's last
  // bytes (to find the closer across tokens).
  bool in_reasoning = false;
  int32_t reasoning_tokens = 0;
  int32_t forcing = -1;
  std::string reasoning_tail;
  std::string text;  // the text emitted so far, kept only for Request::stop_when
  Seq(const SamplingParams& sp, int32_t n_vocab, std::vector<std::string> stops)
      : sampler(sp, n_vocab), stop(std::move(stops)) {}
  int32_t remaining() const { return static_cast<int32_t>(tokens.size()) - n_computed; }
  Pooling pooling() const;
};

// One request: its samples, stream, timings and usage.
struct Req {
  uint64_t id = 0;
  Request request;
  std::shared_ptr<Stream> stream;
  double arrival_ms = 0, deadline_abs_ms = std::numeric_limits<double>::infinity();
  double first_sched_ms = -1, first_token_ms = -1, last_token_ms = -1;
  std::vector<std::unique_ptr<Seq>> seqs;
  int32_t n_done = 0;
  bool waiting = true;      // counted in SchedState::n_waiting_requests
  Usage usage;
  bool failed = false;
  bool cancelled = false;
  bool strict_deadline = false;  // deadline_ms > 0 with DeadlinePolicy::Strict
  int32_t n_preempted = 0;
  double preempted_ms = 0;
  std::string error;
  std::vector<float> embedding;  // embedding requests: the pooled vector, once computed
};

inline Pooling Seq::pooling() const { return req->request.pooling; }

}  // namespace ubatch::sched
