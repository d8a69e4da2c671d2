#include "sched/sched_state.h"

#include <algorithm>
#include <limits>

#include "sched/sequence.h"

namespace ubatch::sched {

SchedState::SchedState(Runner& runner_ref, const EngineConfig& config)
    : runner(runner_ref),
      cfg(config),
      step_model(config.step_cost_prior),
      accept_by_match(static_cast<size_t>(std::max(0, config.spec_ngram)) + 1),
      spec_table(config.spec_ngram > 0 && config.spec_k > 0 ? static_cast<size_t>(std::max(0, config.spec_table)) : 0,
                 config.spec_ngram, config.spec_k) {
  metrics.kv_blocks_total = runner.kv().n_blocks();
  metrics.kv_block_size = runner.kv().block_size();
  metrics.step_cost = step_model.cost();
}

SchedState::~SchedState() = default;

std::unique_ptr<Req> SchedState::new_request(uint64_t id, Request request, std::shared_ptr<Stream> stream,
                                             double arrival_ms) {
  auto r = std::make_unique<Req>();
  r->id = id;
  r->stream = std::move(stream);
  r->arrival_ms = arrival_ms;
  if (request.deadline_ms > 0) r->deadline_abs_ms = r->arrival_ms + static_cast<double>(request.deadline_ms);
  r->strict_deadline = request.deadline_ms > 0 && request.deadline_policy == DeadlinePolicy::Strict;
  r->usage.prompt_tokens = static_cast<int32_t>(request.prompt.size());
  r->request = std::move(request);
  return r;
}

void SchedState::add_request(std::unique_ptr<Req> r) {
  const int32_t n_vocab = runner.n_vocab();
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
      s->drafter = std::make_unique<NgramDrafter>(cfg.spec_ngram);
      s->drafter->append(s->tokens);
    }
    waiting.push_back(s.get());
    r->seqs.push_back(std::move(s));
  }
  ++n_waiting_requests;
  {
    std::lock_guard<std::mutex> lock(metrics_mutex);
    ++metrics.requests_submitted;
  }
  const uint64_t id = r->id;
  requests.emplace(id, std::move(r));
  update_gauges();
}

int32_t SchedState::alloc_seq_id() {
  if (!free_seq_ids_.empty()) {
    const int32_t id = free_seq_ids_.back();
    free_seq_ids_.pop_back();
    return id;
  }
  return next_seq_id_++;
}

double SchedState::effective_priority(const Seq& s, double now) const {
  // Aging: every aging_ms spent waiting (queued or preempted) raises the priority by one
  // level, so low-priority requests cannot starve under sustained load. A running sequence
  // keeps the rank it was admitted with.
  if (s.seq_id >= 0) return s.rank;
  return s.req->request.priority + aging_levels(s.waited_ms + now - s.wait_since_ms, cfg.aging_ms);
}

RankKey SchedState::rank_key(const Seq& s) const {
  return RankKey{s.seq_id >= 0 ? s.rank : static_cast<double>(s.req->request.priority), s.req->deadline_abs_ms,
                 s.req->arrival_ms, s.index};
}

// Samples i > 0 of a request wait until sample 0 has computed the prompt, then fork its KV.
bool SchedState::admissible(const Seq& s) const {
  if (s.index == 0 || s.admitted_once) return true;
  const Seq& leader = *s.req->seqs[0];
  if (leader.done) return true;
  return leader.seq_id >= 0 && leader.n_computed >= s.n_prompt - 1;
}

int32_t SchedState::prompt_chunk() const {
  const int32_t c = runner.kv().state_chunk();
  return c > 0 && cfg.n_batch >= c ? c : 0;
}

int32_t SchedState::n_chunkable(const Seq& s) const { return prompt_chunk() > 0 ? std::max(s.n_prompt - 1, 0) : 0; }

// Gives s a KV sequence, reusing what it can: the leader's prompt (fork), else cached
// prefix blocks. Never allocates new blocks itself.
void SchedState::admit(Seq& s) {
  KvCache& kv = runner.kv();
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
    reused = kv.seq_reuse_prefix(s.seq_id, s.tokens.data(), n, n - 1, n_chunkable(s));
    if (s.index == 0 && !s.admitted_once) s.req->usage.cached_tokens = std::min(reused, s.n_prompt);
  }
  s.n_computed = reused;
  if (s.pooling() != Pooling::None) s.pool_sum.assign(static_cast<size_t>(runner.n_embd()), 0.0);
  const double now = runner.now_ms();
  s.waited_ms += now - s.wait_since_ms;
  s.rank = s.req->request.priority + aging_levels(s.waited_ms, cfg.aging_ms);
  s.admitted_ms = now;
  s.readmitted_from_ms = s.preempted_at_ms;
  if (s.preempted_at_ms >= 0) {
    s.req->preempted_ms += now - s.preempted_at_ms;
    s.preempted_at_ms = -1;
  }
  if (!s.admitted_once) {
    std::lock_guard<std::mutex> lock(metrics_mutex);
    if (s.index == 0) metrics.cached_prompt_tokens += static_cast<uint64_t>(std::min(reused, s.n_prompt));
  }
  s.admitted_once = true;
  Req& r = *s.req;
  if (r.first_sched_ms < 0) {
    r.first_sched_ms = now;
    std::lock_guard<std::mutex> lock(metrics_mutex);
    metrics.queue_time.observe(r.first_sched_ms - r.arrival_ms);
  }
  if (r.waiting) {
    r.waiting = false;
    --n_waiting_requests;
  }
  waiting.erase(std::find(waiting.begin(), waiting.end(), &s));
  running.push_back(&s);
}

void SchedState::release_kv(Seq& s) {
  if (s.seq_id < 0) return;
  runner.kv().seq_rm(s.seq_id, 0, -1);  // full blocks stay cached for prefix reuse
  free_seq_ids_.push_back(s.seq_id);
  s.seq_id = -1;
  s.n_computed = 0;
}

void SchedState::unadmit(Seq& s) {
  // Undo admit() in the same plan: the wait goes on (and the preemption it would have ended).
  s.wait_since_ms = s.admitted_ms;
  if (s.readmitted_from_ms >= 0) {
    s.req->preempted_ms -= s.admitted_ms - s.readmitted_from_ms;
    s.preempted_at_ms = s.readmitted_from_ms;
  }
  release_kv(s);
  running.erase(std::find(running.begin(), running.end(), &s));
  waiting.push_back(&s);
}

void SchedState::preempt(Seq& s, PreemptCause cause) {
  // Free its blocks and requeue it; it recomputes from its tokens (prompt + generated) and
  // continues with the same sampler state, so its output is unchanged.
  release_kv(s);
  running.erase(std::find(running.begin(), running.end(), &s));
  waiting.push_back(&s);
  const double now = runner.now_ms();
  s.wait_since_ms = now;
  s.preempted_at_ms = now;
  ++s.req->n_preempted;
  std::lock_guard<std::mutex> lock(metrics_mutex);
  ++metrics.preemptions;
  ++(cause == PreemptCause::Memory ? metrics.preemptions_memory : metrics.preemptions_priority);
}

// The lowest-ranked running sequence not already planned this step (the requester itself
// may be chosen).
Seq* SchedState::pick_victim(const std::vector<StepEntry>& planned, const Seq* requester) {
  Seq* victim = nullptr;
  for (Seq* s : running) {
    bool in_plan = false;
    for (const StepEntry& e : planned) in_plan = in_plan || e.seq == s;
    if (in_plan && s != requester) continue;
    if (!victim || ranks_above(rank_key(*victim), rank_key(*s))) victim = s;
  }
  return victim;
}

double SchedState::oldest_waiting_arrival() const {
  double oldest = std::numeric_limits<double>::infinity();
  for (const Seq* s : waiting) oldest = std::min(oldest, s->req->arrival_ms);
  return oldest;
}

bool SchedState::speculates(const Seq& s) const {
  return cfg.spec_k > 0 && cfg.spec_ngram > 0 && s.req->request.speculative && s.pooling() == Pooling::None;
}

void SchedState::emit_text(Seq& s, const std::string& text, const RowSample* row) {
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

void SchedState::finish_seq(Seq& s, FinishReason reason, const std::string& error) {
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
    spec_table.add(s.tokens, static_cast<size_t>(s.n_prompt));
  if (s.preempted_at_ms >= 0) {  // ends while preempted
    r.preempted_ms += runner.now_ms() - s.preempted_at_ms;
    s.preempted_at_ms = -1;
  }
  if (s.seq_id >= 0) {
    release_kv(s);
    running.erase(std::find(running.begin(), running.end(), &s));
  } else {
    auto it = std::find(waiting.begin(), waiting.end(), &s);
    if (it != waiting.end()) waiting.erase(it);
  }
  Event e;
  e.kind = Event::Kind::Finish;
  e.index = s.index;
  e.finish = reason;
  e.error = error;
  r.stream->push(std::move(e));
  if (++r.n_done == static_cast<int32_t>(r.seqs.size())) finish_request(r);
}

void SchedState::finish_request(Req& r) {
  const double now = runner.now_ms();
  if (r.waiting) {
    r.waiting = false;
    --n_waiting_requests;
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
    std::lock_guard<std::mutex> lock(metrics_mutex);
    ++metrics.requests_finished;
    metrics.e2e.observe(done.timings.total_ms);
    if (r.failed) ++metrics.requests_failed;
    if (r.cancelled) ++metrics.requests_cancelled;
  }
  std::shared_ptr<Stream> stream = r.stream;
  auto it = requests.find(r.id);
  // Destroyed at the next step: callers may still hold pointers to its sequences.
  finished.push_back(std::move(it->second));
  requests.erase(it);
  stream->push(std::move(done));
}

void SchedState::update_gauges() {
  const KvStats st = runner.kv().stats();
  std::lock_guard<std::mutex> lock(metrics_mutex);
  metrics.queued = static_cast<int64_t>(n_waiting_requests);
  metrics.running = static_cast<int64_t>(running.size());
  metrics.kv_blocks_used = st.n_blocks_used;
  metrics.kv_blocks_cached = st.n_blocks_cached;
  metrics.kv_blocks_total = st.n_blocks;
  metrics.kv_peak_blocks_used = std::max<int64_t>(metrics.kv_peak_blocks_used, st.n_blocks_used);
  metrics.prefix_hit_rate = st.hit_rate();
  metrics.state_bytes = static_cast<int64_t>(st.state_bytes);
  metrics.state_checkpoint_bytes = static_cast<int64_t>(st.checkpoint_bytes);
  metrics.state_snapshot_bytes = static_cast<int64_t>(st.snapshot_bytes);
  metrics.state_snapshots = st.n_snapshots;
}


}  // namespace ubatch::sched
