#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fmt/format.h>

#include "grammar/matcher.h"
#include "sched/admission.h"
#include "sched/preemption.h"

namespace ubatch::sched {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
// Draft acceptance estimates (spec_policy.h): per n-gram match length, server-wide, starting
// at kAcceptPrior; each sequence's own record shrunk towards that with kSeqPriorWeight
// pseudo-positions. Decays: per draft verified (server-wide, sequence); per step a sequence
// could have drafted but did not (back towards the server-wide estimate), and per step that
// offered drafts (server-wide, back towards kAcceptPrior) — so estimates that stopped drafting
// are retried after a while (about 50 steps for a sequence, 700 server-wide).
constexpr double kAcceptPrior = 0.5, kAcceptPriorWeight = 2.0, kGlobalDecay = 0.995, kGlobalRelax = 0.999;
constexpr double kSeqPriorWeight = 4.0, kSeqDecay = 0.9, kSeqRelax = 0.98;
}

// One sample of a request: a token stream with its own KV sequence while running.
struct Scheduler::Seq {
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
  Seq(const SamplingParams& sp, int32_t n_vocab, std::vector<std::string> stops)
      : sampler(sp, n_vocab), stop(std::move(stops)) {}
  int32_t remaining() const { return static_cast<int32_t>(tokens.size()) - n_computed; }
  Pooling pooling() const;
};

struct Scheduler::Req {
  uint64_t id = 0;
  Request request;
  std::shared_ptr<Stream> stream;
  double arrival_ms = 0, deadline_abs_ms = kInf;
  double first_sched_ms = -1, first_token_ms = -1, last_token_ms = -1;
  std::vector<std::unique_ptr<Seq>> seqs;
  int32_t n_done = 0;
  bool waiting = true;      // counted in n_waiting_requests_
  Usage usage;
  bool failed = false;
  bool cancelled = false;
  bool strict_deadline = false;  // deadline_ms > 0 with DeadlinePolicy::Strict
  int32_t n_preempted = 0;
  double preempted_ms = 0;
  std::string error;
  std::vector<float> embedding;  // embedding requests: the pooled vector, once computed
};

Pooling Scheduler::Seq::pooling() const { return req->request.pooling; }

namespace {
// Whether batch row `i` (a prompt position) of an embedding sequence needs its hidden state.
bool pools_row(Pooling p, int32_t i, int32_t n_tokens) {
  switch (p) {
    case Pooling::Mean: return true;
    case Pooling::Cls: return i == 0;
    case Pooling::Last: return i + 1 == n_tokens;
    case Pooling::None: return false;
  }
  return false;
}
}  // namespace

Scheduler::Scheduler(Runner& runner, const EngineConfig& config)
    : runner_(runner),
      cfg_(config),
      step_model_(config.step_cost_prior),
      accept_by_match_(static_cast<size_t>(std::max(0, config.spec_ngram)) + 1),
      spec_table_(config.spec_ngram > 0 && config.spec_k > 0 ? static_cast<size_t>(std::max(0, config.spec_table)) : 0,
                  config.spec_ngram, config.spec_k) {
  metrics_.kv_blocks_total = runner_.kv().n_blocks();
  metrics_.kv_block_size = runner_.kv().block_size();
  metrics_.step_cost = step_model_.cost();
}

Scheduler::~Scheduler() = default;

std::optional<SubmitError> Scheduler::validate(const Request& r) const {
  auto invalid = [](std::string m) { return SubmitError{SubmitError::Code::Invalid, std::move(m)}; };
  if (r.prompt.empty()) return invalid("the prompt is empty");
  const int32_t n_vocab = runner_.n_vocab();
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab)
      return invalid(fmt::format("prompt token {} at index {} is outside the vocabulary [0, {})", r.prompt[i], i, n_vocab));
  if (r.pooling != Pooling::None) return validate_embedding(r);
  if (r.max_tokens < 1) return invalid(fmt::format("max_tokens must be >= 1, got {}", r.max_tokens));
  if (r.max_tokens > cfg_.max_tokens_cap)
    return invalid(fmt::format("max_tokens {} is above the limit {}", r.max_tokens, cfg_.max_tokens_cap));
  if (r.n < 1) return invalid(fmt::format("n must be >= 1, got {}", r.n));
  for (const auto& [id, bias] : r.sampling.logit_bias)
    if (id < 0 || id >= n_vocab) return invalid(fmt::format("logit_bias token {} is outside the vocabulary [0, {})", id, n_vocab));
  if (r.grammar && r.grammar->vocabulary().n_vocab() != n_vocab)
    return invalid(fmt::format("the grammar was compiled for a vocabulary of {} tokens, the model has {}",
                               r.grammar->vocabulary().n_vocab(), n_vocab));
  const KvCache& kv = runner_.kv();
  const int64_t n_prompt = static_cast<int64_t>(r.prompt.size());
  if (n_prompt > kv.n_cells())
    return SubmitError{SubmitError::Code::TooLong,
                       fmt::format("the prompt has {} tokens but the context holds {}", n_prompt, kv.n_cells())};
  if (cfg_.n_ctx_seq > 0 && n_prompt + r.max_tokens > cfg_.n_ctx_seq)
    return SubmitError{SubmitError::Code::TooLong,
                       fmt::format("prompt ({} tokens) + max_tokens ({}) = {} tokens is above the {} tokens one sequence "
                                   "may hold",
                                   n_prompt, r.max_tokens, n_prompt + r.max_tokens, cfg_.n_ctx_seq)};
  // One sequence must be able to hold its prompt and every token it may generate.
  const int64_t need_tokens = n_prompt + r.max_tokens;
  const int64_t need_blocks = (need_tokens + kv.block_size() - 1) / kv.block_size();
  if (need_blocks > kv.n_blocks())
    return SubmitError{SubmitError::Code::TooLong,
                       fmt::format("prompt ({} tokens) + max_tokens ({}) = {} tokens can never fit the KV cache of {} tokens",
                                   n_prompt, r.max_tokens, need_tokens, kv.n_cells())};
  return std::nullopt;
}

std::optional<SubmitError> Scheduler::submit(uint64_t id, Request request, std::shared_ptr<Stream> stream) {
  auto r = std::make_unique<Req>();
  r->id = id;
  r->stream = std::move(stream);
  r->arrival_ms = runner_.now_ms();
  if (request.deadline_ms > 0) r->deadline_abs_ms = r->arrival_ms + static_cast<double>(request.deadline_ms);
  r->strict_deadline = request.deadline_ms > 0 && request.deadline_policy == DeadlinePolicy::Strict;
  r->usage.prompt_tokens = static_cast<int32_t>(request.prompt.size());
  r->request = std::move(request);
  if (std::optional<SubmitError> refused = check_deadline(*r, r->arrival_ms)) {
    note_rejected(refused->code);
    Event done;
    done.kind = Event::Kind::Done;
    done.usage = r->usage;
    done.rejection = refused;
    r->stream->push(std::move(done));
    return refused;
  }
  const int32_t n_vocab = runner_.n_vocab();
  for (int32_t i = 0; i < r->request.n; ++i) {
    SamplingParams sp = r->request.sampling;
    sp.seed += static_cast<uint64_t>(i);  // samples of one request differ
    auto s = std::make_unique<Seq>(sp, n_vocab, r->request.stop);
    s->req = r.get();
    s->index = i;
    s->tokens = r->request.prompt;
    s->n_prompt = static_cast<int32_t>(s->tokens.size());
    s->wait_since_ms = r->arrival_ms;
    for (int32_t t : s->tokens) s->sampler.accept(t);
    if (r->request.grammar) s->grammar.emplace(r->request.grammar);  // each sample from the start
    if (r->request.reasoning_budget >= 0 && !r->request.reasoning_close_tokens.empty()) {
      s->in_reasoning = true;
      if (r->request.reasoning_budget == 0) s->forcing = 0;
    }
    if (speculates(*s) && !s->in_reasoning) {
      s->drafter = std::make_unique<NgramDrafter>(cfg_.spec_ngram);
      s->drafter->append(s->tokens);
    }
    waiting_.push_back(s.get());
    r->seqs.push_back(std::move(s));
  }
  ++n_waiting_requests_;
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.requests_submitted;
  }
  requests_.emplace(id, std::move(r));
  update_gauges();
  return std::nullopt;
}

// An embedding request: one prefill-only sequence that must fit one sequence's context.
std::optional<SubmitError> Scheduler::validate_embedding(const Request& r) const {
  if (runner_.n_embd() <= 0) return SubmitError{SubmitError::Code::Invalid, "this engine cannot compute embeddings"};
  if (r.n != 1) return SubmitError{SubmitError::Code::Invalid, fmt::format("an embedding request has n = 1, got {}", r.n)};
  const KvCache& kv = runner_.kv();
  const int64_t n_prompt = static_cast<int64_t>(r.prompt.size());
  const int64_t limit = cfg_.n_ctx_seq > 0 ? std::min<int64_t>(cfg_.n_ctx_seq, kv.n_cells()) : kv.n_cells();
  const int64_t need_blocks = (n_prompt + kv.block_size() - 1) / kv.block_size();
  if (n_prompt > limit || need_blocks > kv.n_blocks())
    return SubmitError{SubmitError::Code::TooLong,
                       fmt::format("the input has {} tokens, above the {} tokens one sequence may hold", n_prompt, limit)};
  return std::nullopt;
}

// Refuses a strict deadline the admission estimate says cannot be met (admission.h).
std::optional<SubmitError> Scheduler::check_deadline(const Req& r, double now) const {
  if (!r.strict_deadline || step_ms_ <= 0) return std::nullopt;
  AdmissionInputs in;
  in.step_ms = step_ms_;
  in.n_batch = cfg_.n_batch;
  in.n_prompt = static_cast<int32_t>(r.request.prompt.size());
  in.free_slots = std::max(0, cfg_.n_parallel - static_cast<int32_t>(running_.size()));
  in.group_running = cfg_.policy != Policy::UBatch && group_active_;
  const RankKey mine{static_cast<double>(r.request.priority), r.deadline_abs_ms, r.arrival_ms, 0};
  for (const Seq* s : waiting_)
    if (ranks_above(RankKey{effective_priority(*s, now), s->req->deadline_abs_ms, s->req->arrival_ms, s->index}, mine))
      ++in.ahead;
  for (const Seq* s : running_) {
    const Request& q = s->req->request;
    // Only a sequence that ignores end-of-generation and has no stop strings is sure to run
    // to max_tokens; any other may end at its next token.
    const bool runs_to_length = q.ignore_eos && q.stop.empty();
    int64_t steps = runs_to_length ? std::max(1, q.max_tokens - s->n_generated) : 1;
    if (cfg_.policy == Policy::UBatch && cfg_.preempt_margin > 0 && s->req->id != r.id &&
        r.request.priority >= s->rank + cfg_.preempt_margin) {
      // It may preempt this one once the minimum run time is over.
      const double wait_ms = std::max(0.0, cfg_.preempt_min_run_ms - (now - s->admitted_ms));
      steps = std::min(steps, static_cast<int64_t>(std::ceil(wait_ms / step_ms_)));
    }
    in.steps_to_free.push_back(steps);
  }
  const double eta_ms = first_token_estimate_ms(in);
  const double deadline = static_cast<double>(r.request.deadline_ms);
  if (eta_ms <= deadline) return std::nullopt;
  return SubmitError{SubmitError::Code::DeadlineUnattainable,
                     fmt::format("the deadline of {} ms cannot be met: the first token is estimated at {:.0f} ms at the "
                                 "earliest ({} steps of {:.1f} ms, {} sequences ahead, {} of {} slots free)",
                                 r.request.deadline_ms, eta_ms, steps_to_first_token(in), step_ms_, in.ahead,
                                 in.free_slots, cfg_.n_parallel)};
}

void Scheduler::cancel(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Req& r = *it->second;
  r.cancelled = true;
  for (auto& s : r.seqs)
    if (!s->done) finish_seq(*s, FinishReason::Cancelled);
  // finish_seq finished the request when the last sequence ended; its KV is free now.
  update_gauges();
}

void Scheduler::cancel_all(const std::string& why) {
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests_) ids.push_back(id);
  for (uint64_t id : ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    it->second->error = why;
    cancel(id);
  }
}

int32_t Scheduler::alloc_seq_id() {
  if (!free_seq_ids_.empty()) {
    const int32_t id = free_seq_ids_.back();
    free_seq_ids_.pop_back();
    return id;
  }
  return next_seq_id_++;
}

double Scheduler::effective_priority(const Seq& s, double now) const {
  // Aging: every aging_ms spent waiting (queued or preempted) raises the priority by one
  // level, so low-priority requests cannot starve under sustained load. A running sequence
  // keeps the rank it was admitted with.
  if (s.seq_id >= 0) return s.rank;
  return s.req->request.priority + aging_levels(s.waited_ms + now - s.wait_since_ms, cfg_.aging_ms);
}

RankKey Scheduler::rank_key(const Seq& s) const {
  return RankKey{s.seq_id >= 0 ? s.rank : static_cast<double>(s.req->request.priority), s.req->deadline_abs_ms,
                 s.req->arrival_ms, s.index};
}

// Samples i > 0 of a request wait until sample 0 has computed the prompt, then fork its KV.
bool Scheduler::admissible(const Seq& s) const {
  if (s.index == 0 || s.admitted_once) return true;
  const Seq& leader = *s.req->seqs[0];
  if (leader.done) return true;
  return leader.seq_id >= 0 && leader.n_computed >= s.n_prompt - 1;
}

// Gives s a KV sequence, reusing what it can: the leader's prompt (fork), else cached
// prefix blocks. Never allocates new blocks itself.
bool Scheduler::admit(Seq& s) {
  KvCache& kv = runner_.kv();
  s.seq_id = alloc_seq_id();
  s.n_computed = 0;
  const Seq& leader = *s.req->seqs[0];
  int32_t reused = 0;
  bool forked = false;
  if (&leader != &s && leader.seq_id >= 0 && leader.n_computed >= s.n_prompt - 1 && s.n_prompt > 1) {
    kv.seq_cp(leader.seq_id, s.seq_id);
    // Recompute the last prompt token for this sample's logits. A recurrent state goes back
    // only to a checkpoint (the leader keeps one there); without it, start from the prefix cache.
    forked = kv.seq_rm(s.seq_id, s.n_prompt - 1, -1);
    if (forked) reused = kv.seq_n_tokens(s.seq_id);
    else kv.seq_rm(s.seq_id, 0, -1);
  }
  if (!forked && s.pooling() != Pooling::Mean && s.pooling() != Pooling::Cls) {  // those need every row they pool
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    reused = kv.seq_reuse_prefix(s.seq_id, s.tokens.data(), n, n - 1);
    if (s.index == 0 && !s.admitted_once) s.req->usage.cached_tokens = std::min(reused, s.n_prompt);
  }
  s.n_computed = reused;
  if (s.pooling() != Pooling::None) s.pool_sum.assign(static_cast<size_t>(runner_.n_embd()), 0.0);
  const double now = runner_.now_ms();
  s.waited_ms += now - s.wait_since_ms;
  s.rank = s.req->request.priority + aging_levels(s.waited_ms, cfg_.aging_ms);
  s.admitted_ms = now;
  s.readmitted_from_ms = s.preempted_at_ms;
  if (s.preempted_at_ms >= 0) {
    s.req->preempted_ms += now - s.preempted_at_ms;
    s.preempted_at_ms = -1;
  }
  if (!s.admitted_once) {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    if (s.index == 0) metrics_.cached_prompt_tokens += static_cast<uint64_t>(std::min(reused, s.n_prompt));
  }
  s.admitted_once = true;
  Req& r = *s.req;
  if (r.first_sched_ms < 0) {
    r.first_sched_ms = now;
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    metrics_.queue_time.observe(r.first_sched_ms - r.arrival_ms);
  }
  if (r.waiting) {
    r.waiting = false;
    --n_waiting_requests_;
  }
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), &s));
  running_.push_back(&s);
  return true;
}

void Scheduler::release_kv(Seq& s) {
  if (s.seq_id < 0) return;
  runner_.kv().seq_rm(s.seq_id, 0, -1);  // full blocks stay cached for prefix reuse
  free_seq_ids_.push_back(s.seq_id);
  s.seq_id = -1;
  s.n_computed = 0;
}

void Scheduler::unadmit(Seq& s) {
  // Undo admit() in the same plan: the wait goes on (and the preemption it would have ended).
  s.wait_since_ms = s.admitted_ms;
  if (s.readmitted_from_ms >= 0) {
    s.req->preempted_ms -= s.admitted_ms - s.readmitted_from_ms;
    s.preempted_at_ms = s.readmitted_from_ms;
  }
  release_kv(s);
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  waiting_.push_back(&s);
}

void Scheduler::preempt(Seq& s, PreemptCause cause) {
  // Free its blocks and requeue it; it recomputes from its tokens (prompt + generated) and
  // continues with the same sampler state, so its output is unchanged.
  release_kv(s);
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  waiting_.push_back(&s);
  const double now = runner_.now_ms();
  s.wait_since_ms = now;
  s.preempted_at_ms = now;
  ++s.req->n_preempted;
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  ++metrics_.preemptions;
  ++(cause == PreemptCause::Memory ? metrics_.preemptions_memory : metrics_.preemptions_priority);
}

// The lowest-ranked running sequence not already planned this step (the requester itself
// may be chosen).
Scheduler::Seq* Scheduler::pick_victim(const std::vector<Entry>& planned, const Seq* requester) {
  Seq* victim = nullptr;
  for (Seq* s : running_) {
    bool in_plan = false;
    for (const Entry& e : planned) in_plan = in_plan || e.seq == s;
    if (in_plan && s != requester) continue;
    if (!victim || ranks_above(rank_key(*victim), rank_key(*s))) victim = s;
  }
  return victim;
}

// Ends every request whose strict deadline has passed: still queued, it is never prefilled.
void Scheduler::expire_deadlines(double now) {
  std::vector<Req*> expired;
  for (auto& [id, r] : requests_)
    if (r->strict_deadline && now >= r->deadline_abs_ms) expired.push_back(r.get());
  for (Req* r : expired) {
    const bool queued = r->first_sched_ms < 0;
    {
      std::lock_guard<std::mutex> lock(metrics_mutex_);
      ++(queued ? metrics_.deadline_misses_queued : metrics_.deadline_misses_running);
    }
    const std::string why =
        queued ? fmt::format("the deadline of {} ms passed while the request was queued ({:.0f} ms after arrival); "
                             "it was never scheduled",
                             r->request.deadline_ms, now - r->arrival_ms)
               : fmt::format("the deadline of {} ms passed ({:.0f} ms after arrival) after {} generated tokens",
                             r->request.deadline_ms, now - r->arrival_ms, r->usage.completion_tokens);
    for (auto& s : r->seqs)
      if (!s->done) finish_seq(*s, FinishReason::Deadline, why);
  }
}

Scheduler::Seq* Scheduler::priority_victim(const Seq& waiting, double now) {
  std::vector<RunningView> view;
  view.reserve(running_.size());
  for (const Seq* s : running_) view.push_back({rank_key(*s), now - s->admitted_ms, s->req->id});
  const int i = pick_priority_victim(view, waiting.req->request.priority, waiting.req->id, cfg_.preempt_margin,
                                     cfg_.preempt_min_run_ms);
  return i < 0 ? nullptr : running_[static_cast<size_t>(i)];
}

// Policy ubatch: a waiting request that finds no free slot (or too few KV blocks for its
// first chunk) displaces the lowest-ranked running sequence it outranks by the margin
// (preemption.h). Waiting requests are taken in admission order; free slots go to the first.
void Scheduler::preempt_for_priority(double now) {
  if (cfg_.policy != Policy::UBatch || cfg_.preempt_margin <= 0 || waiting_.empty() || running_.empty()) return;
  std::vector<Seq*> order;
  for (Seq* s : waiting_)
    if (admissible(*s)) order.push_back(s);
  std::vector<std::pair<double, Seq*>> keyed;
  for (Seq* s : order) keyed.push_back({effective_priority(*s, now), s});
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    if (a.second->req->deadline_abs_ms != b.second->req->deadline_abs_ms)
      return a.second->req->deadline_abs_ms < b.second->req->deadline_abs_ms;
    return a.second->req->arrival_ms < b.second->req->arrival_ms;
  });
  KvCache& kv = runner_.kv();
  int32_t free_slots = cfg_.n_parallel - static_cast<int32_t>(running_.size());
  for (const auto& [prio, w] : keyed) {
    const int32_t first_chunk = std::min(static_cast<int32_t>(w->tokens.size()), cfg_.n_batch);
    const int32_t need_blocks = (first_chunk + kv.block_size() - 1) / kv.block_size();
    bool slot = free_slots > 0;
    if (slot) --free_slots;
    while (!slot || need_blocks > kv.n_blocks_available()) {
      Seq* victim = priority_victim(*w, now);
      if (!victim) break;
      preempt(*victim, PreemptCause::Priority);
      slot = true;  // the victim's slot; the next waiting one finds none free
    }
  }
}

void Scheduler::plan_decodes(std::vector<Entry>& entries, int32_t& budget, int32_t& reserved) {
  KvCache& kv = runner_.kv();
  // Decode-ready: exactly one token to compute. Highest-ranked first, so preemption takes
  // from the bottom.
  std::vector<Seq*> ready;
  for (Seq* s : running_)
    if (s->remaining() == 1) ready.push_back(s);
  std::stable_sort(ready.begin(), ready.end(),
                   [this](const Seq* a, const Seq* b) { return ranks_above(rank_key(*a), rank_key(*b)); });
  for (Seq* s : ready) {
    if (s->seq_id < 0) continue;  // preempted earlier in this loop
    if (budget <= 0) break;
    int32_t need = kv.blocks_needed(s->seq_id, 1);
    bool preempted_self = false;
    while (need + reserved > kv.n_blocks_available()) {
      Seq* victim = pick_victim(entries, s);
      if (!victim) break;
      preempt(*victim, PreemptCause::Memory);
      if (victim == s) {
        preempted_self = true;
        break;
      }
      need = kv.blocks_needed(s->seq_id, 1);
    }
    if (preempted_self || need + reserved > kv.n_blocks_available()) continue;
    entries.push_back({s, 1, {}, 0});
    budget -= 1;
    reserved += need;
  }
}

double Scheduler::oldest_waiting_arrival() const {
  double oldest = kInf;
  for (const Seq* s : waiting_) oldest = std::min(oldest, s->req->arrival_ms);
  return oldest;
}

bool Scheduler::static_group_ready(double now) const {
  if (waiting_.empty()) return false;
  return static_cast<int32_t>(waiting_.size()) >= cfg_.n_parallel ||
         now - oldest_waiting_arrival() >= cfg_.batch_window_ms;
}

void Scheduler::plan_prefills(std::vector<Entry>& entries, int32_t& budget, int32_t& reserved, double now) {
  KvCache& kv = runner_.kv();
  hold_until_ms_ = kInf;

  // Candidates: running sequences with more than one token to compute, and waiting ones.
  std::vector<Seq*> cand;
  for (Seq* s : running_)
    if (s->remaining() > 1) cand.push_back(s);
  bool may_admit = true;
  std::vector<Seq*> admit_pool;
  if (cfg_.policy == Policy::UBatch) {
    // Collection window: with nothing running, hold a small batch until it fills or the
    // oldest request has waited batch_window_ms.
    if (running_.empty() && cfg_.batch_window_ms > 0 && !waiting_.empty() &&
        static_cast<int32_t>(waiting_.size()) < cfg_.n_parallel) {
      const double oldest = oldest_waiting_arrival();
      if (now - oldest < cfg_.batch_window_ms) {
        may_admit = false;
        hold_until_ms_ = oldest + cfg_.batch_window_ms;
      }
    }
    if (may_admit) admit_pool = waiting_;
  } else {
    // static / grouped: a group runs to completion; the next forms when all have finished.
    if (running_.empty()) group_active_ = false;
    if (!group_active_) {
      if (!static_group_ready(now)) {
        if (!waiting_.empty()) hold_until_ms_ = oldest_waiting_arrival() + cfg_.batch_window_ms;
      } else {
        std::vector<Seq*> order = waiting_;
        std::stable_sort(order.begin(), order.end(), [&](const Seq* a, const Seq* b) {
          const double pa = effective_priority(*a, now), pb = effective_priority(*b, now);
          if (pa != pb) return pa > pb;
          return a->req->arrival_ms < b->req->arrival_ms;
        });
        auto bucket = [](const Seq* s) {  // prompt-length bucket: floor(log2(n))
          return static_cast<int>(std::floor(std::log2(static_cast<double>(std::max<size_t>(1, s->tokens.size())))));
        };
        const int b0 = bucket(order.front());
        for (Seq* s : order) {
          if (static_cast<int32_t>(admit_pool.size()) >= cfg_.n_parallel) break;
          if (cfg_.policy == Policy::Grouped && bucket(s) != b0) continue;
          admit_pool.push_back(s);
        }
        // The whole group joins now: samples of one request are forked later, so only the
        // leaders and independent sequences are admitted here; the rest follow the leader.
        group_active_ = !admit_pool.empty();
      }
    }
  }
  for (Seq* s : admit_pool)
    if (admissible(*s)) cand.push_back(s);

  // Order (ubatch): effective priority, then earliest deadline, then the objective score,
  // then arrival. static/grouped: effective priority, then arrival.
  struct Keyed {
    Seq* s;
    double prio, deadline, score, arrival;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(cand.size());
  for (Seq* s : cand) {
    Keyed k{s, effective_priority(*s, now), s->req->deadline_abs_ms, 0.0, s->req->arrival_ms};
    if (cfg_.policy == Policy::UBatch) {
      // score = throughput − λ·latency_penalty + μ·cache_hit (docs/SCHEDULER.md):
      //   throughput      tokens it can run this step / n_batch                 (0..1)
      //   latency_penalty steps of prefill still needed after this one          (steps)
      //   cache_hit       share of its tokens already in the cache (computed,
      //                   or reusable from the prefix cache when admitted)       (0..1)
      const int32_t rem = s->remaining();
      const int32_t chunk = std::min(rem, std::max(budget, 1));
      const double throughput = static_cast<double>(chunk) / cfg_.n_batch;
      const double latency = std::ceil(static_cast<double>(rem - chunk) / cfg_.n_batch);
      const double hit = s->tokens.empty() ? 0.0 : static_cast<double>(s->n_computed) / s->tokens.size();
      k.score = throughput - cfg_.lambda * latency + cfg_.mu * hit;
    }
    keyed.push_back(k);
  }
  const bool ubatch = cfg_.policy == Policy::UBatch;
  std::sort(keyed.begin(), keyed.end(), [ubatch](const Keyed& a, const Keyed& b) {
    if (a.prio != b.prio) return a.prio > b.prio;
    if (ubatch && a.deadline != b.deadline) return a.deadline < b.deadline;
    if (ubatch && a.score != b.score) return a.score > b.score;
    return a.arrival < b.arrival;
  });

  // Blocks the entries planned so far need. Forking a sample shares its leader's partial
  // last block, so an entry already planned on the leader then needs a copy-on-write block
  // it did not reserve: after a fork the reservation is counted again.
  auto planned_need = [&] {
    int32_t need = 0;
    for (const Entry& e : entries) need += kv.blocks_needed(e.seq->seq_id, e.n_tokens);
    return need;
  };
  for (const Keyed& k : keyed) {
    if (budget <= 0) break;
    Seq& s = *k.s;
    bool admitted_now = false;
    if (s.seq_id < 0) {
      if (static_cast<int32_t>(running_.size()) >= cfg_.n_parallel) continue;
      if (!admissible(s)) continue;  // its leader was admitted later in this loop
      admit(s);
      admitted_now = true;
      if (s.index > 0) reserved = planned_need();
    }
    // Reviving cached prefix blocks takes them from the available pool: never below what
    // this step has already reserved. Prefills wait; they never preempt.
    const int32_t avail = kv.n_blocks_available() - reserved;
    int32_t chunk = avail < 0 ? 0 : std::min(s.remaining(), budget);
    while (chunk > 0 && kv.blocks_needed(s.seq_id, chunk) > avail) --chunk;
    if (chunk <= 0) {
      if (admitted_now) {
        unadmit(s);
        if (s.index > 0) reserved = planned_need();
      }
      continue;
    }
    const int32_t need = kv.blocks_needed(s.seq_id, chunk);
    entries.push_back({&s, chunk, {}, 0});
    budget -= chunk;
    reserved += need;
  }
}

bool Scheduler::speculates(const Seq& s) const {
  return cfg_.spec_k > 0 && cfg_.spec_ngram > 0 && s.req->request.speculative && s.pooling() == Pooling::None;
}

// Drafts for decode entries, into the budget and KV blocks the plan left: each sequence's
// prompt-lookup draft (else the server-wide table's), capped by spec_k, its remaining
// max_tokens and the KV room; then choose_drafts keeps the lengths that raise the step's
// expected tokens per ms under the step-time model. Drafts never preempt and never take
// budget from decodes or prefills.
void Scheduler::plan_drafts(std::vector<Entry>& entries, int32_t budget, int32_t reserved) {
  if (cfg_.spec_k <= 0 || cfg_.spec_ngram <= 0 || budget <= 0) return;
  KvCache& kv = runner_.kv();
  int64_t tokens = 0, rows = 0;
  for (const Entry& e : entries) {
    tokens += e.n_tokens;
    if (e.seq->n_computed + e.n_tokens == static_cast<int32_t>(e.seq->tokens.size()) && e.seq->pooling() == Pooling::None)
      ++rows;
  }
  int32_t avail = kv.n_blocks_available() - reserved;
  if (avail < 0) return;
  std::vector<size_t> which;
  std::vector<DraftOption> options;
  Draft d;
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    Seq& s = *e.seq;
    if (!s.drafter || e.n_tokens != 1 || s.remaining() != 1) continue;  // decodes only
    const int32_t cap = std::min(cfg_.spec_k, s.req->request.max_tokens - s.n_generated - 1);
    if (cap <= 0) continue;
    s.drafter->draft(cap, 1, d);
    if (d.tokens.empty()) spec_table_.lookup(s.tokens, cap, d);
    if (d.tokens.empty()) continue;
    int32_t len = static_cast<int32_t>(d.tokens.size());
    const int32_t base = kv.blocks_needed(s.seq_id, 1);
    while (len > 0 && kv.blocks_needed(s.seq_id, 1 + len) - base > avail) --len;
    if (len <= 0) continue;
    const size_t m = static_cast<size_t>(std::min<int32_t>(d.n_match, cfg_.spec_ngram));
    const double prior = accept_by_match_[m].estimate(kAcceptPrior, kAcceptPriorWeight);
    e.draft.assign(d.tokens.begin(), d.tokens.begin() + len);
    e.n_match = d.n_match;
    which.push_back(i);
    options.push_back({len, s.acceptance.estimate(prior, kSeqPriorWeight)});
  }
  if (options.empty()) return;
  for (AcceptanceCounts& a : accept_by_match_) a.relax(kGlobalRelax);
  DraftChoice choice = choose_drafts(step_model_.cost(), tokens, rows, options, budget, cfg_.spec_margin);
  if (cfg_.spec_always) {
    for (size_t j = 0; j < options.size(); ++j) {
      choice.len[j] = std::min(options[j].max_len, budget);
      budget -= choice.len[j];
    }
  }
  for (size_t j = 0; j < which.size(); ++j) {
    Entry& e = entries[which[j]];
    int32_t len = choice.len[j];
    // The lengths were capped one sequence at a time: keep their blocks within the room together.
    const int32_t base = kv.blocks_needed(e.seq->seq_id, 1);
    while (len > 0 && kv.blocks_needed(e.seq->seq_id, 1 + len) - base > avail) --len;
    avail -= kv.blocks_needed(e.seq->seq_id, 1 + len) - base;
    e.draft.resize(static_cast<size_t>(len));
    if (len == 0) e.seq->acceptance.relax(kSeqRelax);
  }
}

void Scheduler::plan(std::vector<Entry>& entries) {
  const double now = runner_.now_ms();
  expire_deadlines(now);
  preempt_for_priority(now);
  int32_t budget = cfg_.n_batch;
  int32_t reserved = 0;
  plan_decodes(entries, budget, reserved);
  plan_prefills(entries, budget, reserved, now);
  plan_drafts(entries, budget, reserved);
}

bool Scheduler::step() {
  finished_.clear();
  if (!has_work()) {
    update_gauges();
    return false;
  }
  std::vector<Entry> entries;
  plan(entries);
  update_gauges();
  if (entries.empty()) return false;

  Batch batch;
  std::vector<RowSample> rows;
  std::vector<Seq*> row_seq;
  std::vector<size_t> first_row(entries.size(), SIZE_MAX);  // each entry's first RowSample
  std::vector<std::pair<Seq*, int32_t>> embd_rows;  // embedding sequences' pooled rows: (sequence, batch row)
  int32_t n_tokens = 0;
  for (size_t k = 0; k < entries.size(); ++k) {
    const Entry& e = entries[k];
    Seq& s = *e.seq;
    auto add_row = [&](int32_t draft) {
      if (first_row[k] == SIZE_MAX) first_row[k] = rows.size();
      RowSample row;
      row.sampler = &s.sampler;
      row.grammar = s.grammar ? &*s.grammar : nullptr;
      row.top_logprobs = s.req->request.top_logprobs;
      row.draft = draft;
      if (s.forcing >= 0 && draft < 0) row.forced = s.req->request.reasoning_close_tokens[static_cast<size_t>(s.forcing)];
      rows.push_back(row);
      row_seq.push_back(&s);
    };
    const int32_t n_seq_tokens = static_cast<int32_t>(s.tokens.size());
    if (s.pooling() != Pooling::None) {  // prefill only: hidden states of the rows it pools, no logits
      for (int32_t i = s.n_computed; i < s.n_computed + e.n_tokens; ++i) {
        const bool pooled = pools_row(s.pooling(), i, n_seq_tokens);
        if (pooled) embd_rows.push_back({&s, batch.n_tokens()});
        batch.add(s.tokens[i], i, s.seq_id, false, pooled);
      }
      n_tokens += e.n_tokens;
      continue;
    }
    // Checkpoints (models with recurrent state; ignored otherwise) where the sequence may be cut
    // back to: before each draft (a rejected draft rolls back to just after the row before
    // it), and after the prompt's second-to-last token when other samples fork from it.
    const bool forked_from = s.index == 0 && s.req->seqs.size() > 1;
    for (int32_t i = s.n_computed; i < s.n_computed + e.n_tokens; ++i) {
      const bool last = i + 1 == n_seq_tokens;
      batch.add(s.tokens[i], i, s.seq_id, last);
      if ((!e.draft.empty() && i + 1 == s.n_computed + e.n_tokens) || (forked_from && i == s.n_prompt - 2))
        batch.mark_checkpoint();
      if (last) add_row(e.draft.empty() ? -1 : e.draft[0]);
    }
    // Draft tokens follow the sequence's last token, each with a logits row to verify the next.
    const auto n_draft = static_cast<int32_t>(e.draft.size());
    for (int32_t j = 0; j < n_draft; ++j) {
      batch.add(e.draft[j], s.n_computed + e.n_tokens + j, s.seq_id, true);
      if (j + 1 < n_draft) batch.mark_checkpoint();
      add_row(j + 1 < n_draft ? e.draft[j + 1] : -1);
    }
    n_tokens += e.n_tokens + n_draft;
  }
  // Always-on invariants of a plan.
  UBATCH_CHECK_MSG(n_tokens <= cfg_.n_batch, "scheduler: step exceeds the token budget");
  UBATCH_CHECK_MSG(static_cast<int32_t>(running_.size()) <= cfg_.n_parallel, "scheduler: too many running sequences");

  const double t0 = runner_.now_ms();
  DecodeResult res = runner_.run(batch, rows);
  const double t1 = runner_.now_ms();
  if (res.status == DecodeStatus::NoKvSpace && running_.size() > 1) {
    // Planning reserves KV before running, so this means the plan under-counted; the cache
    // is unchanged (decode checks before placing). Preempt the lowest-ranked sequence (it
    // recomputes later, same output) and plan again, rather than fail requests. Each retry
    // frees one sequence's blocks, and any one sequence fits the cache (validate()).
    preempt(*pick_victim({}, nullptr), PreemptCause::Memory);
    return true;
  }
  if (!res.ok()) {
    // An invalid batch is a bug or an invalid request: fail the requests in this batch with
    // the message rather than hang or crash.
    for (const Entry& e : entries)
      if (!e.seq->done) {
        e.seq->req->failed = true;
        finish_seq(*e.seq, FinishReason::Error, res.message);
      }
    return true;
  }
  // Embedding sequences: pool their rows, in token order (each sequence's rows are in order).
  for (const auto& [seq, row] : embd_rows) {
    const float* h = runner_.embedding(row);
    UBATCH_CHECK_MSG(h != nullptr, "scheduler: the runner returned no hidden state for a pooled row");
    if (seq->pooling() == Pooling::Mean) {
      for (size_t j = 0; j < seq->pool_sum.size(); ++j) seq->pool_sum[j] += static_cast<double>(h[j]);
    } else {
      for (size_t j = 0; j < seq->pool_sum.size(); ++j) seq->pool_sum[j] = static_cast<double>(h[j]);
    }
  }
  uint64_t prompt_tokens = 0, n_draft_tokens = 0, n_accepted = 0, n_spec_seqs = 0, n_sampling_seqs = 0;
  KvCache& kv = runner_.kv();
  StepRecord rec;
  for (size_t k = 0; k < entries.size(); ++k) {
    const Entry& e = entries[k];
    Seq& s = *e.seq;
    // Tokens up to the prompt's end are prompt processing; later ones generation.
    const int32_t from = s.n_computed, to = s.n_computed + e.n_tokens;
    if (from < s.n_prompt) prompt_tokens += static_cast<uint64_t>(std::min(to, s.n_prompt) - from);
    // A decode is one generated token's step (with the draft tokens it verifies); anything
    // else (prompt chunks, recomputing a preempted sample's tokens) is prefill.
    const auto n_step_draft = static_cast<int32_t>(e.draft.size());
    (e.n_tokens == 1 && from >= s.n_prompt ? rec.n_decode : rec.n_prefill) += e.n_tokens + n_step_draft;
    rec.n_draft += n_step_draft;
    s.n_computed = to;
    if (first_row[k] != SIZE_MAX) ++n_sampling_seqs;
    if (e.draft.empty()) continue;
    // Verified: the drafts up to the first mismatch. Their KV stays; the rest is rolled back.
    const auto n_draft = static_cast<int32_t>(e.draft.size());
    int32_t accepted = 0;
    while (accepted < n_draft && rows[first_row[k] + static_cast<size_t>(accepted)].token == e.draft[accepted]) ++accepted;
    if (accepted < n_draft) {
      const int32_t freed = kv.seq_rollback(s.seq_id, to + accepted);
      UBATCH_CHECK_MSG(freed >= 0, "scheduler: no checkpoint to roll a recurrent state back to");  // marked above
    }
    s.n_computed = to + accepted;
    s.acceptance.add(accepted, n_draft, kSeqDecay);
    accept_by_match_[static_cast<size_t>(std::min(e.n_match, cfg_.spec_ngram))].add(accepted, n_draft, kGlobalDecay);
    n_draft_tokens += static_cast<uint64_t>(n_draft);
    n_accepted += static_cast<uint64_t>(accepted);
    ++n_spec_seqs;
  }
  step_ms_ = step_ms_ > 0 ? 0.9 * step_ms_ + 0.1 * (t1 - t0) : t1 - t0;
  step_model_.observe(n_tokens, static_cast<int64_t>(rows.size()), t1 - t0);
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.steps;
    metrics_.step_tokens += static_cast<uint64_t>(n_tokens);
    metrics_.step_budget += static_cast<uint64_t>(cfg_.n_batch);
    metrics_.prompt_tokens += prompt_tokens;
    metrics_.busy_ms += t1 - t0;
    metrics_.sample_seq_steps += n_sampling_seqs;
    metrics_.spec_steps += n_spec_seqs > 0 ? 1 : 0;
    metrics_.spec_seq_steps += n_spec_seqs;
    metrics_.draft_tokens += n_draft_tokens;
    metrics_.draft_accepted += n_accepted;
    metrics_.step_cost = step_model_.cost();
  }
  double grammar_ms = 0;
  uint64_t grammar_rows = 0;
  for (const RowSample& row : rows)
    if (row.grammar) grammar_ms += row.grammar_ms, ++grammar_rows;
  if (grammar_rows > 0) {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    metrics_.grammar_ms += grammar_ms;
    metrics_.grammar_rows += grammar_rows;
  }
  // Embedding sequences whose prompt is computed are done: their vector goes out with Done.
  for (const Entry& e : entries) {
    Seq& s = *e.seq;
    if (s.pooling() == Pooling::None || s.done || s.remaining() > 0) continue;
    const double scale = s.pooling() == Pooling::Mean ? 1.0 / static_cast<double>(s.tokens.size()) : 1.0;
    s.req->embedding.resize(s.pool_sum.size());
    for (size_t j = 0; j < s.pool_sum.size(); ++j) s.req->embedding[j] = static_cast<float>(s.pool_sum[j] * scale);
    finish_seq(s, FinishReason::Stop);
  }
  // Stream the sampled tokens in order; a sequence that finishes drops the rest of its rows.
  for (size_t k = 0; k < entries.size(); ++k) {
    if (first_row[k] == SIZE_MAX) continue;
    Seq& s = *entries[k].seq;
    size_t end = first_row[k];
    while (end < rows.size() && row_seq[end] == &s && rows[end].sampled) ++end;
    const double burst = static_cast<double>(end - first_row[k]);
    const double itl_ms = s.last_token_ms >= 0 ? (t1 - s.last_token_ms) / burst : -1.0;
    const int32_t generated = s.n_generated;
    for (size_t r = first_row[k]; r < end && !s.done; ++r) on_token(s, rows[r], t1, itl_ms);
    rec.n_sampled += s.n_generated - generated;
  }
  for (const Entry& e : entries)
    if (!e.seq->done && e.seq->seq_id >= 0)
      UBATCH_CHECK_MSG(kv.seq_n_tokens(e.seq->seq_id) == e.seq->n_computed,
                       "scheduler: a sequence's KV does not hold exactly its computed tokens");
  update_gauges();
  rec.index = step_log_.n_steps() + 1;
  rec.end_ms = t1;
  rec.decode_ms = static_cast<float>(t1 - t0);
  rec.n_budget = cfg_.n_batch;
  rec.n_running = static_cast<int32_t>(running_.size());
  rec.n_waiting = static_cast<int32_t>(waiting_.size());
  step_log_.push(rec);
  return true;
}

void Scheduler::emit_text(Seq& s, const std::string& text, const RowSample* row) {
  Event e;
  e.kind = Event::Kind::Token;
  e.index = s.index;
  e.text = text;
  if (row) {
    e.token = row->token;
    e.logprob = row->logprob;
    e.top = row->top;
  }
  s.req->stream->push(std::move(e));
}

// itl_ms: the time per token to record in the TPOT histogram (the gap since the sequence's
// previous step, shared by the tokens this step gave it); < 0: none.
void Scheduler::on_token(Seq& s, const RowSample& row, double now, double itl_ms) {
  Req& r = *s.req;
  const int32_t id = row.token;
  if (id < 0) {  // the grammar allows no token of this vocabulary here
    finish_seq(s, FinishReason::Error, "grammar: no token of the vocabulary can continue the output here");
    return;
  }
  s.tokens.push_back(id);
  if (s.drafter) s.drafter->append(id);
  ++s.n_generated;
  ++r.usage.completion_tokens;
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.generated_tokens;
    if (r.first_token_ms < 0) {
      metrics_.ttft.observe(now - r.arrival_ms);
      ttft_window_.observe(now, now - r.arrival_ms);
    } else if (itl_ms >= 0) {
      metrics_.tpot.observe(itl_ms);
      itl_window_.observe(now, itl_ms);
    }
  }
  if (r.first_token_ms < 0) r.first_token_ms = now;
  r.last_token_ms = now;
  s.last_token_ms = now;

  if (runner_.is_eog(id) && !r.request.ignore_eos) {
    finish_seq(s, FinishReason::Stop);
    return;
  }
  bool stopped = false;
  std::string text = s.stop.push(s.utf8.push(runner_.token_to_piece(id)), &stopped);
  emit_text(s, text, &row);
  if (stopped) {
    finish_seq(s, FinishReason::Stop);
    return;
  }
  if (row.grammar && row.grammar_complete) {  // a complete sentence that nothing may extend (after this token)
    finish_seq(s, FinishReason::Stop);
    return;
  }
  if (s.in_reasoning) advance_reasoning(s, id);
  if (s.n_generated >= r.request.max_tokens) finish_seq(s, FinishReason::Length);
}

// The thinking budget's bookkeeping after token `id` (Request::reasoning_budget).
void Scheduler::advance_reasoning(Seq& s, int32_t id) {
  const Request& q = s.req->request;
  if (s.forcing >= 0) {  // a forced closing token
    if (++s.forcing >= static_cast<int32_t>(q.reasoning_close_tokens.size())) {
      s.forcing = -1;
      s.in_reasoning = false;
    }
    return;
  }
  ++s.reasoning_tokens;
  s.reasoning_tail += runner_.token_to_piece(id);
  if (!q.reasoning_close.empty() && s.reasoning_tail.find(q.reasoning_close) != std::string::npos) {
    s.in_reasoning = false;  // the model closed the block itself
    return;
  }
  if (s.reasoning_tail.size() > q.reasoning_close.size())
    s.reasoning_tail.erase(0, s.reasoning_tail.size() - q.reasoning_close.size());
  if (s.reasoning_tokens >= q.reasoning_budget) s.forcing = 0;
}

void Scheduler::finish_seq(Seq& s, FinishReason reason, const std::string& error) {
  if (s.done) return;
  Req& r = *s.req;
  if (reason == FinishReason::Stop || reason == FinishReason::Length || reason == FinishReason::Deadline) {
    // Release held-back text: no stop string matched it.
    bool stopped = false;
    std::string tail = s.stop.push(s.utf8.flush(), &stopped);
    if (!stopped) tail += s.stop.flush();
    if (!tail.empty()) emit_text(s, tail, nullptr);
  }
  s.done = true;
  if (s.drafter && (reason == FinishReason::Stop || reason == FinishReason::Length))
    spec_table_.add(s.tokens, static_cast<size_t>(s.n_prompt));
  if (s.preempted_at_ms >= 0) {  // ends while preempted
    r.preempted_ms += runner_.now_ms() - s.preempted_at_ms;
    s.preempted_at_ms = -1;
  }
  if (s.seq_id >= 0) {
    release_kv(s);
    running_.erase(std::find(running_.begin(), running_.end(), &s));
  } else {
    auto it = std::find(waiting_.begin(), waiting_.end(), &s);
    if (it != waiting_.end()) waiting_.erase(it);
  }
  Event e;
  e.kind = Event::Kind::Finish;
  e.index = s.index;
  e.finish = reason;
  e.error = error;
  r.stream->push(std::move(e));
  if (++r.n_done == static_cast<int32_t>(r.seqs.size())) finish_request(r);
}

void Scheduler::finish_request(Req& r) {
  const double now = runner_.now_ms();
  if (r.waiting) {
    r.waiting = false;
    --n_waiting_requests_;
  }
  Event done;
  done.kind = Event::Kind::Done;
  done.usage = r.usage;
  done.error = r.error;
  done.embedding = std::move(r.embedding);
  done.timings.queue_ms = r.first_sched_ms >= 0 ? r.first_sched_ms - r.arrival_ms : now - r.arrival_ms;
  done.timings.ttft_ms = r.first_token_ms >= 0 ? r.first_token_ms - r.arrival_ms : 0.0;
  const int32_t after_first = r.usage.completion_tokens - static_cast<int32_t>(r.seqs.size());
  done.timings.tpot_ms = after_first > 0 && r.first_token_ms >= 0
                             ? (r.last_token_ms - r.first_token_ms) / after_first * static_cast<double>(r.seqs.size())
                             : 0.0;
  done.timings.total_ms = now - r.arrival_ms;
  done.timings.preempted = r.n_preempted;
  done.timings.preempted_ms = r.preempted_ms;
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.requests_finished;
    metrics_.e2e.observe(done.timings.total_ms);
    if (r.failed) ++metrics_.requests_failed;
    if (r.cancelled) ++metrics_.requests_cancelled;
  }
  std::shared_ptr<Stream> stream = r.stream;
  auto it = requests_.find(r.id);
  // Destroyed at the next step: callers may still hold pointers to its sequences.
  finished_.push_back(std::move(it->second));
  requests_.erase(it);
  stream->push(std::move(done));
}

void Scheduler::update_gauges() {
  const KvStats st = runner_.kv().stats();
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  metrics_.queued = static_cast<int64_t>(n_waiting_requests_);
  metrics_.running = static_cast<int64_t>(running_.size());
  metrics_.kv_blocks_used = st.n_blocks_used;
  metrics_.kv_blocks_cached = st.n_blocks_cached;
  metrics_.kv_blocks_total = st.n_blocks;
  metrics_.kv_peak_blocks_used = std::max<int64_t>(metrics_.kv_peak_blocks_used, st.n_blocks_used);
  metrics_.prefix_hit_rate = st.hit_rate();
  metrics_.state_bytes = static_cast<int64_t>(st.state_bytes);
  metrics_.state_checkpoint_bytes = static_cast<int64_t>(st.checkpoint_bytes);
  metrics_.state_snapshot_bytes = static_cast<int64_t>(st.snapshot_bytes);
  metrics_.state_snapshots = st.n_snapshots;
}

void Scheduler::note_rejected(SubmitError::Code cause) {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  ++metrics_.requests_rejected;
  switch (cause) {
    case SubmitError::Code::QueueFull: ++metrics_.rejected_queue_full; break;
    case SubmitError::Code::TooLong: ++metrics_.rejected_too_long; break;
    case SubmitError::Code::Invalid:
    case SubmitError::Code::ShuttingDown: ++metrics_.rejected_invalid; break;
    case SubmitError::Code::DeadlineUnattainable: ++metrics_.rejected_deadline; break;
  }
}

double Scheduler::next_event_ms() const {
  double t = hold_until_ms_;
  for (const auto& [id, r] : requests_)
    if (r->strict_deadline) t = std::min(t, r->deadline_abs_ms);
  return t;
}

LatencyLastMinute Scheduler::latency_last_minute(double now_ms) const {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  return {ttft_window_.summary(now_ms), itl_window_.summary(now_ms)};
}

void Scheduler::active_requests(double now, std::vector<ActiveRequest>& out) const {
  out.clear();
  for (const auto& [id, r] : requests_) {  // ids grow with arrival
    ActiveRequest a;
    a.id = id;
    a.priority = r->request.priority;
    a.deadline_ms = r->request.deadline_ms;
    a.strict_deadline = r->strict_deadline;
    if (std::isfinite(r->deadline_abs_ms)) a.deadline_left_ms = r->deadline_abs_ms - now;
    a.age_ms = now - r->arrival_ms;
    a.ttft_ms = r->first_token_ms >= 0 ? r->first_token_ms - r->arrival_ms : -1.0;
    a.n_prompt = r->usage.prompt_tokens;
    a.n_cached = r->usage.cached_tokens;
    a.n_generated = r->usage.completion_tokens;
    a.max_tokens = r->request.max_tokens;
    a.n_samples = static_cast<int32_t>(r->seqs.size());
    a.n_preempted = r->n_preempted;
    const Seq& lead = *r->seqs.front();
    a.rank = effective_priority(lead, now);
    a.n_computed = lead.n_computed;
    int best = -1;  // waiting 0, preempted 1, prefilling 2, decoding 3
    for (const auto& s : r->seqs) {
      if (s->done) continue;
      const int st = s->seq_id >= 0 ? (s->remaining() <= 1 ? 3 : 2) : (s->preempted_at_ms >= 0 ? 1 : 0);
      best = std::max(best, st);
    }
    static constexpr RequestState kStates[] = {RequestState::Waiting, RequestState::Preempted,
                                               RequestState::Prefilling, RequestState::Decoding};
    a.state = kStates[std::max(best, 0)];
    out.push_back(a);
  }
}

MetricsSnapshot Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  return metrics_;
}

}  // namespace ubatch::sched
