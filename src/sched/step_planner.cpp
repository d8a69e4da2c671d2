#include "sched/step_planner.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "sched/preemption.h"
#include "sched/sequence.h"
#include "sched/spec_estimates.h"

namespace ubatch::sched {

namespace {
// Whether batch row `i` (a prompt position) of an embedding sequence needs its hidden state.
bool planner_pools_row(Pooling p, int32_t i, int32_t n_tokens) {
  switch (p) {
    case Pooling::Mean: return true;
    case Pooling::Cls: return i == 0;
    case Pooling::Last: return i + 1 == n_tokens;
    case Pooling::None: return false;
  }
  return false;
}
}  // namespace

// Ends every request whose strict deadline has passed: still queued, it is never prefilled.
void StepPlanner::expire_deadlines(StepPlan& plan, double now) {
  std::vector<Req*> expired;
  for (auto& [id, r] : st_.requests)
    if (r->strict_deadline && now >= r->deadline_abs_ms) expired.push_back(r.get());
  for (Req* r : expired) {
    plan.expired.push_back(r->id);
    const bool queued = r->first_sched_ms < 0;
    {
      std::lock_guard<std::mutex> lock(st_.metrics_mutex);
      ++(queued ? st_.metrics.deadline_misses_queued : st_.metrics.deadline_misses_running);
    }
    const std::string why =
        queued ? fmt::format("the deadline of {} ms passed while the request was queued ({:.0f} ms after arrival); "
                             "it was never scheduled",
                             r->request.deadline_ms, now - r->arrival_ms)
               : fmt::format("the deadline of {} ms passed ({:.0f} ms after arrival) after {} generated tokens",
                             r->request.deadline_ms, now - r->arrival_ms, r->usage.completion_tokens);
    for (auto& s : r->seqs)
      if (!s->done) st_.finish_seq(*s, FinishReason::Deadline, why);
  }
}

Seq* StepPlanner::priority_victim(const Seq& waiting, double now) {
  std::vector<RunningView> view;
  view.reserve(st_.running.size());
  for (const Seq* s : st_.running) view.push_back({st_.rank_key(*s), now - s->admitted_ms, s->req->id});
  const int i = pick_priority_victim(view, waiting.req->request.priority, waiting.req->id, st_.cfg.preempt_margin,
                                     st_.cfg.preempt_min_run_ms);
  return i < 0 ? nullptr : st_.running[static_cast<size_t>(i)];
}

// Policy ubatch: a waiting request that finds no free slot (or too few KV blocks for its
// first chunk) displaces the lowest-ranked running sequence it outranks by the margin
// (preemption.h). Waiting requests are taken in admission order; free slots go to the first.
void StepPlanner::preempt_for_priority(StepPlan& plan, double now) {
  if (st_.cfg.policy != Policy::UBatch || st_.cfg.preempt_margin <= 0 || st_.waiting.empty() || st_.running.empty()) return;
  std::vector<Seq*> order;
  for (Seq* s : st_.waiting)
    if (st_.admissible(*s)) order.push_back(s);
  std::vector<std::pair<double, Seq*>> keyed;
  for (Seq* s : order) keyed.push_back({st_.effective_priority(*s, now), s});
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    if (a.second->req->deadline_abs_ms != b.second->req->deadline_abs_ms)
      return a.second->req->deadline_abs_ms < b.second->req->deadline_abs_ms;
    return a.second->req->arrival_ms < b.second->req->arrival_ms;
  });
  KvCache& kv = st_.runner.kv();
  int32_t free_slots = st_.cfg.n_parallel - static_cast<int32_t>(st_.running.size());
  for (const auto& [prio, w] : keyed) {
    const int32_t first_chunk = std::min(static_cast<int32_t>(w->tokens.size()), st_.cfg.n_batch);
    const int32_t need_blocks = (first_chunk + kv.block_size() - 1) / kv.block_size();
    bool slot = free_slots > 0;
    if (slot) --free_slots;
    while (!slot || need_blocks > kv.n_blocks_available()) {
      Seq* victim = priority_victim(*w, now);
      if (!victim) break;
      st_.preempt(*victim, SchedState::PreemptCause::Priority);
      plan.preempted.push_back(victim);
      slot = true;  // the victim's slot; the next waiting one finds none free
    }
  }
}

void StepPlanner::plan_decodes(StepPlan& plan, int32_t& budget, int32_t& reserved) {
  std::vector<StepEntry>& entries = plan.entries;
  KvCache& kv = st_.runner.kv();
  // Decode-ready: exactly one token to compute. Highest-ranked first, so preemption takes
  // from the bottom.
  std::vector<Seq*> ready;
  for (Seq* s : st_.running)
    if (s->remaining() == 1) ready.push_back(s);
  std::stable_sort(ready.begin(), ready.end(),
                   [this](const Seq* a, const Seq* b) { return ranks_above(st_.rank_key(*a), st_.rank_key(*b)); });
  for (Seq* s : ready) {
    if (s->seq_id < 0) continue;  // preempted earlier in this loop
    if (budget <= 0) break;
    int32_t need = kv.blocks_needed(s->seq_id, 1);
    bool preempted_self = false;
    while (need + reserved > kv.n_blocks_available()) {
      Seq* victim = st_.pick_victim(entries, s);
      if (!victim) break;
      st_.preempt(*victim, SchedState::PreemptCause::Memory);
      plan.preempted.push_back(victim);
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

bool StepPlanner::static_group_ready(double now) const {
  if (st_.waiting.empty()) return false;
  return static_cast<int32_t>(st_.waiting.size()) >= st_.cfg.n_parallel ||
         now - st_.oldest_waiting_arrival() >= st_.cfg.batch_window_ms;
}

// A prompt piece of n tokens from s.n_computed, shortened so that it does not end inside a chunk
// of chunkable rows (SchedState::prompt_chunk): such a chunk runs whole in one step or waits for
// the next, so how the budget cuts a prompt never changes its result.
int32_t StepPlanner::whole_chunks(const Seq& s, int32_t n) const {
  const int32_t c = st_.prompt_chunk();
  if (c <= 0 || n <= 0) return n;
  const int32_t end = s.n_computed + n;
  const int32_t chunk_start = end / c * c;
  if (end % c == 0 || chunk_start + c > st_.n_chunkable(s)) return n;
  return std::max(chunk_start - s.n_computed, 0);
}

void StepPlanner::plan_prefills(StepPlan& plan, int32_t& budget, int32_t& reserved, double now) {
  std::vector<StepEntry>& entries = plan.entries;
  KvCache& kv = st_.runner.kv();
  hold_until_ms_ = std::numeric_limits<double>::infinity();

  // Candidates: running sequences with more than one token to compute, and waiting ones.
  std::vector<Seq*> cand;
  for (Seq* s : st_.running)
    if (s->remaining() > 1) cand.push_back(s);
  bool may_admit = true;
  std::vector<Seq*> admit_pool;
  if (st_.cfg.policy == Policy::UBatch) {
    // Collection window: with nothing running, hold a small batch until it fills or the
    // oldest request has waited batch_window_ms.
    if (st_.running.empty() && st_.cfg.batch_window_ms > 0 && !st_.waiting.empty() &&
        static_cast<int32_t>(st_.waiting.size()) < st_.cfg.n_parallel) {
      const double oldest = st_.oldest_waiting_arrival();
      if (now - oldest < st_.cfg.batch_window_ms) {
        may_admit = false;
        hold_until_ms_ = oldest + st_.cfg.batch_window_ms;
      }
    }
    if (may_admit) admit_pool = st_.waiting;
  } else {
    // static / grouped: a group runs to completion; the next forms when all have finished.
    if (st_.running.empty()) group_active_ = false;
    if (!group_active_) {
      if (!static_group_ready(now)) {
        if (!st_.waiting.empty()) hold_until_ms_ = st_.oldest_waiting_arrival() + st_.cfg.batch_window_ms;
      } else {
        std::vector<Seq*> order = st_.waiting;
        std::stable_sort(order.begin(), order.end(), [&](const Seq* a, const Seq* b) {
          const double pa = st_.effective_priority(*a, now), pb = st_.effective_priority(*b, now);
          if (pa != pb) return pa > pb;
          return a->req->arrival_ms < b->req->arrival_ms;
        });
        auto bucket = [](const Seq* s) {  // prompt-length bucket: floor(log2(n))
          return static_cast<int>(std::floor(std::log2(static_cast<double>(std::max<size_t>(1, s->tokens.size())))));
        };
        const int b0 = bucket(order.front());
        for (Seq* s : order) {
          if (static_cast<int32_t>(admit_pool.size()) >= st_.cfg.n_parallel) break;
          if (st_.cfg.policy == Policy::Grouped && bucket(s) != b0) continue;
          admit_pool.push_back(s);
        }
        // The whole group joins now: samples of one request are forked later, so only the
        // leaders and independent sequences are admitted here; the rest follow the leader.
        group_active_ = !admit_pool.empty();
      }
    }
  }
  for (Seq* s : admit_pool)
    if (st_.admissible(*s)) cand.push_back(s);

  // Order (ubatch): effective priority, then earliest deadline, then the objective score,
  // then arrival. static/grouped: effective priority, then arrival.
  struct Keyed {
    Seq* s;
    double prio, deadline, score, arrival;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(cand.size());
  for (Seq* s : cand) {
    Keyed k{s, st_.effective_priority(*s, now), s->req->deadline_abs_ms, 0.0, s->req->arrival_ms};
    if (st_.cfg.policy == Policy::UBatch) {
      // score = throughput − λ·latency_penalty + μ·cache_hit (docs/SCHEDULER.md):
      //   throughput      tokens it can run this step / n_batch                 (0..1)
      //   latency_penalty steps of prefill still needed after this one          (steps)
      //   cache_hit       share of its tokens already in the cache (computed,
      //                   or reusable from the prefix cache when admitted)       (0..1)
      const int32_t rem = s->remaining();
      const int32_t chunk = std::min(rem, std::max(budget, 1));
      const double throughput = static_cast<double>(chunk) / st_.cfg.n_batch;
      const double latency = std::ceil(static_cast<double>(rem - chunk) / st_.cfg.n_batch);
      const double hit = s->tokens.empty() ? 0.0 : static_cast<double>(s->n_computed) / s->tokens.size();
      k.score = throughput - st_.cfg.lambda * latency + st_.cfg.mu * hit;
    }
    keyed.push_back(k);
  }
  const bool ubatch = st_.cfg.policy == Policy::UBatch;
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
    for (const StepEntry& e : entries) need += kv.blocks_needed(e.seq->seq_id, e.n_tokens);
    return need;
  };
  for (const Keyed& k : keyed) {
    if (budget <= 0) break;
    Seq& s = *k.s;
    bool admitted_now = false;
    if (s.seq_id < 0) {
      if (static_cast<int32_t>(st_.running.size()) >= st_.cfg.n_parallel) continue;
      if (!st_.admissible(s)) continue;  // its leader was admitted later in this loop
      st_.admit(s);
      admitted_now = true;
      if (s.index > 0) reserved = planned_need();
    }
    // Reviving cached prefix blocks takes them from the available pool: never below what
    // this step has already reserved. Prefills wait; they never preempt.
    const int32_t avail = kv.n_blocks_available() - reserved;
    int32_t chunk = avail < 0 ? 0 : std::min(s.remaining(), budget);
    while (chunk > 0 && kv.blocks_needed(s.seq_id, chunk) > avail) --chunk;
    chunk = whole_chunks(s, chunk);
    if (chunk <= 0) {
      if (admitted_now) {
        st_.unadmit(s);
        if (s.index > 0) reserved = planned_need();
      }
      continue;
    }
    const int32_t need = kv.blocks_needed(s.seq_id, chunk);
    entries.push_back({&s, chunk, {}, 0});
    if (admitted_now) plan.admitted.push_back(&s);
    budget -= chunk;
    reserved += need;
  }
}

// Drafts for decode entries, into the budget and KV blocks the plan left: each sequence's
// prompt-lookup draft (else the server-wide table's), capped by spec_k, its remaining
// max_tokens and the KV room; then choose_drafts keeps the lengths that raise the step's
// expected tokens per ms under the step-time model. Drafts never preempt and never take
// budget from decodes or prefills.
void StepPlanner::plan_drafts(StepPlan& plan, int32_t budget, int32_t reserved) {
  std::vector<StepEntry>& entries = plan.entries;
  if (st_.cfg.spec_k <= 0 || st_.cfg.spec_ngram <= 0 || budget <= 0) return;
  KvCache& kv = st_.runner.kv();
  int64_t tokens = 0, rows = 0;
  for (const StepEntry& e : entries) {
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
    StepEntry& e = entries[i];
    Seq& s = *e.seq;
    if (!s.drafter || e.n_tokens != 1 || s.remaining() != 1) continue;  // decodes only
    const int32_t cap = std::min(st_.cfg.spec_k, s.req->request.max_tokens - s.n_generated - 1);
    if (cap <= 0) continue;
    s.drafter->draft(cap, 1, d);
    if (d.tokens.empty()) st_.spec_table.lookup(s.tokens, cap, d);
    if (d.tokens.empty()) continue;
    int32_t len = static_cast<int32_t>(d.tokens.size());
    const int32_t base = kv.blocks_needed(s.seq_id, 1);
    while (len > 0 && kv.blocks_needed(s.seq_id, 1 + len) - base > avail) --len;
    if (len <= 0) continue;
    const size_t m = static_cast<size_t>(std::min<int32_t>(d.n_match, st_.cfg.spec_ngram));
    const double prior = st_.accept_by_match[m].estimate(kAcceptPrior, kAcceptPriorWeight);
    e.draft.assign(d.tokens.begin(), d.tokens.begin() + len);
    e.n_match = d.n_match;
    which.push_back(i);
    options.push_back({len, s.acceptance.estimate(prior, kSeqPriorWeight)});
  }
  if (options.empty()) return;
  for (AcceptanceCounts& a : st_.accept_by_match) a.relax(kGlobalRelax);
  DraftChoice choice = choose_drafts(st_.step_model.cost(), tokens, rows, options, budget, st_.cfg.spec_margin);
  if (st_.cfg.spec_always) {
    for (size_t j = 0; j < options.size(); ++j) {
      choice.len[j] = std::min(options[j].max_len, budget);
      budget -= choice.len[j];
    }
  }
  for (size_t j = 0; j < which.size(); ++j) {
    StepEntry& e = entries[which[j]];
    int32_t len = choice.len[j];
    // The lengths were capped one sequence at a time: keep their blocks within the room together.
    const int32_t base = kv.blocks_needed(e.seq->seq_id, 1);
    while (len > 0 && kv.blocks_needed(e.seq->seq_id, 1 + len) - base > avail) --len;
    avail -= kv.blocks_needed(e.seq->seq_id, 1 + len) - base;
    e.draft.resize(static_cast<size_t>(len));
    if (len == 0) e.seq->acceptance.relax(kSeqRelax);
  }
}

StepPlan StepPlanner::plan() {
  StepPlan plan;
  const double now = st_.runner.now_ms();
  expire_deadlines(plan, now);
  preempt_for_priority(plan, now);
  int32_t budget = st_.cfg.n_batch;
  int32_t reserved = 0;
  plan_decodes(plan, budget, reserved);
  plan_prefills(plan, budget, reserved, now);
  plan_drafts(plan, budget, reserved);
  build_batch(plan);
  return plan;
}

// The plan's entries as one batch: each sequence's tokens from n_computed, then its drafts;
// a RowSample for each row with logits.
void StepPlanner::build_batch(StepPlan& plan) const {
  Batch& batch = plan.batch;
  std::vector<RowSample>& rows = plan.rows;
  for (StepEntry& e : plan.entries) {
    Seq& s = *e.seq;
    auto add_row = [&](int32_t draft) {
      if (e.first_row == StepEntry::kNoRow) e.first_row = rows.size();
      RowSample row;
      row.sampler = &s.sampler;
      row.grammar = s.grammar ? &*s.grammar : nullptr;
      row.top_logprobs = s.req->request.top_logprobs;
      row.draft = draft;
      if (s.forcing >= 0 && draft < 0) row.forced = s.req->request.reasoning_close_tokens[static_cast<size_t>(s.forcing)];
      rows.push_back(row);
      plan.row_seq.push_back(&s);
    };
    const int32_t n_seq_tokens = static_cast<int32_t>(s.tokens.size());
    const int32_t n_chunkable = st_.n_chunkable(s);
    if (s.pooling() != Pooling::None) {  // prefill only: hidden states of the rows it pools, no logits
      for (int32_t i = s.n_computed; i < s.n_computed + e.n_tokens; ++i) {
        const bool pooled = planner_pools_row(s.pooling(), i, n_seq_tokens);
        if (pooled) plan.pooled.push_back({&s, batch.n_tokens()});
        batch.add(s.tokens[i], i, s.seq_id, false, pooled);
        if (i < n_chunkable) batch.mark_chunkable();
      }
      continue;
    }
    // Checkpoints (models with recurrent state; ignored otherwise) where the sequence may be cut
    // back to: before each draft (a rejected draft rolls back to just after the row before
    // it), and after the prompt's second-to-last token when other samples fork from it.
    const bool forked_from = s.index == 0 && s.req->seqs.size() > 1;
    for (int32_t i = s.n_computed; i < s.n_computed + e.n_tokens; ++i) {
      const bool last = i + 1 == n_seq_tokens;
      batch.add(s.tokens[i], i, s.seq_id, last);
      if (i < n_chunkable) batch.mark_chunkable();
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
  }
  // Always-on invariants of a plan.
  UBATCH_CHECK_MSG(plan.n_tokens() <= st_.cfg.n_batch, "scheduler: step exceeds the token budget");
  UBATCH_CHECK_MSG(static_cast<int32_t>(st_.running.size()) <= st_.cfg.n_parallel, "scheduler: too many running sequences");
}

}  // namespace ubatch::sched
