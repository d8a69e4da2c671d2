// What a client asks the engine for, and what it streams back.
//
// A Request becomes one sequence per sample (n > 1: several sequences sharing the prompt's
// KV). The engine streams Events on the request's Stream: Token events (text pieces that
// never split a UTF-8 character, stop strings held back until they can no longer match),
// one Finish event per sample, then exactly one Done event with usage and timings. A request
// refused by the scheduler at admission (a deadline it cannot meet) gets only a Done event
// carrying the rejection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/sampler.h"

namespace ubatch::grammar {
class CompiledGrammar;
}

namespace ubatch::sched {

using Clock = std::chrono::steady_clock;

// What happens when a request's deadline passes (docs/SCHEDULER.md, "Deadlines").
enum class DeadlinePolicy {
  Strict,      // refused at admission when it cannot be met; ended (FinishReason::Deadline) when it passes
  BestEffort,  // the deadline only orders the queue (earliest first); never refused or ended for it
};
const char* deadline_policy_name(DeadlinePolicy p);  // "strict", "best_effort"

// How an embedding request reduces the final hidden states of its tokens to one vector
// (numbered as the GGUF spec's <arch>.pooling_type). None: not an embedding request.
enum class Pooling { None = 0, Mean = 1, Cls = 2, Last = 3 };
const char* pooling_name(Pooling p);  // "none", "mean", "cls", "last"

struct Request {
  std::vector<int32_t> prompt;      // token ids; when empty, prompt_text is tokenized
  std::string prompt_text;          // tokenized with BOS per the model and special tokens parsed
  SamplingParams sampling;
  int32_t max_tokens = 128;         // tokens generated per sample, >= 1
  std::vector<std::string> stop;    // stop strings (not emitted; matched across tokens)
  bool ignore_eos = false;          // keep generating past end-of-generation tokens
  int32_t n = 1;                    // samples sharing the prompt
  int32_t priority = 0;             // higher runs first
  int64_t deadline_ms = 0;          // > 0: wanted done within this many ms of arrival
  DeadlinePolicy deadline_policy = DeadlinePolicy::Strict;
  int32_t top_logprobs = -1;        // >= 0: report the chosen token's logprob and this many alternatives
  // Non-null: every sample is a sentence of this grammar (src/grammar/, compiled for the
  // engine's vocabulary, e.g. by Engine::grammars()). A sample whose grammar completes ends
  // with Stop; one that reaches max_tokens first ends with Length, its text incomplete.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  bool speculative = true;          // false: never draft for this request (output is the same either way)
  // Thinking budget (docs/API.md, "Reasoning"). With reasoning_budget >= 0 every sample starts
  // inside an open reasoning block (the prompt ends with its opener); once it has generated
  // that many tokens without writing reasoning_close, its next tokens are
  // reasoning_close_tokens — forced whatever the logits say (and accepted by the grammar, if
  // any) — then it samples again. Such a request never drafts.
  int32_t reasoning_budget = -1;
  std::string reasoning_close;                  // the text that ends the block ("</think>")
  std::vector<int32_t> reasoning_close_tokens;  // what is forced: the close as the template writes it
  int32_t reasoning_close_token = -1;  // >= 0: this token closes the block too (a control token, whose
                                       // text is empty: harmony's <|end|>)
  // Non-null: called on the engine thread after each generated token with the sample's text so
  // far (as emitted: stop strings and held-back bytes aside); true ends the sample there with
  // Stop. It must be cheap and must not block (the server ends a forced tool-call reply that
  // repeats a call: chat/tool_call_parser.h, repeats_a_call).
  std::function<bool(std::string_view)> stop_when;
  // Not None: an embedding request. Its prompt runs as a prefill-only sequence (in the same
  // steps as generation; no logits, no sampling, nothing generated: max_tokens, n, sampling,
  // stop, grammar and top_logprobs are ignored, n must be 1) and its Done event carries the
  // pooled final hidden state (Event::embedding). Mean and cls pooling compute every prompt
  // token (no prefix-cache reuse); last reuses a cached prefix as generation does.
  Pooling pooling = Pooling::None;
};

enum class FinishReason { Stop, Length, Cancelled, Error, Deadline };
// "stop", "length", "cancelled", "error", "deadline"
const char* finish_reason_name(FinishReason r);

// Why a request was refused, at submit (validation, queue) or at admission (deadline).
struct SubmitError {
  enum class Code { QueueFull, TooLong, Invalid, ShuttingDown, DeadlineUnattainable };
  Code code;
  std::string message;
};
// "queue_full", "too_long", "invalid", "shutting_down", "deadline"
const char* submit_error_name(SubmitError::Code c);

struct Usage {
  int32_t prompt_tokens = 0;      // prompt length (counted once for n samples)
  int32_t cached_tokens = 0;      // prompt tokens served from the prefix cache
  int32_t completion_tokens = 0;  // generated tokens, all samples
};

struct Timings {
  double queue_ms = 0;   // arrival → first scheduled
  double ttft_ms = 0;    // arrival → first token
  double tpot_ms = 0;    // mean time per output token after the first
  double total_ms = 0;   // arrival → done
  int32_t preempted = 0;     // times its sequences were preempted (all samples)
  double preempted_ms = 0;   // time its sequences spent preempted, preemption → re-admission (all samples)
};

struct Event {
  enum class Kind { Token, Finish, Done };
  Kind kind = Kind::Token;
  int32_t index = 0;              // sample index (Token, Finish)
  std::string text;               // Token: piece of text (may be empty when held back)
  int32_t token = -1;             // Token: the sampled id
  TokenLogprob logprob{-1, 0.0f}; // Token: when requested
  std::vector<TokenLogprob> top;  // Token: alternatives when requested
  FinishReason finish = FinishReason::Stop;  // Finish
  std::string error;              // Finish with Error or Deadline; Done when the request failed as a whole
  Usage usage;                    // Done
  Timings timings;                // Done
  std::optional<SubmitError> rejection;  // Done: refused at admission; nothing ran
  // Done of an embedding request that succeeded: [n_embd] floats, the pooled final hidden
  // state (Request::pooling; mean: the average over the prompt's tokens, summed in token
  // order in double precision), not normalised. Empty otherwise.
  std::vector<float> embedding;
};

// A request's output channel: the engine thread pushes, a client thread pops — either
// blocking (next) or event-driven (set_notifier + try_next, for clients on an event loop).
class Stream {
 public:
  // Called on the engine thread after each push. It must return at once: never block, never
  // call back into this stream (post a task to the reader's executor and return).
  using Notifier = std::function<void()>;

  explicit Stream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  // Waits up to `timeout` for the next event; false on timeout.
  bool next(Event& out, std::chrono::milliseconds timeout);
  // Takes the next event if one is queued; never waits. Thread-safe.
  bool try_next(Event& out);
  // True once the Done event has been popped.
  bool finished() const;
  // Installs (or, with an empty function, removes) the push notifier. When events are already
  // queued it is called once at once, on the caller's thread, so none is missed. Thread-safe.
  void set_notifier(Notifier notifier);

  // Engine side: queues the event, then calls the notifier (outside the stream's lock).
  void push(Event e);

 private:
  bool pop_locked(Event& out);

  const uint64_t id_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool done_popped_ = false;
  std::shared_ptr<const Notifier> notifier_;  // copied under the lock, called outside it
};

}  // namespace ubatch::sched
