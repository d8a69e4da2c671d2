#include "server/routes_completions.h"

#include <chrono>
#include <memory>
#include <ctime>
#include <exception>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "chat/tool_call_parser.h"
#include "sched/engine.h"
#include "server/completion_response.h"
#include "server/errors.h"
#include "server/json_request.h"
#include "server/model_route.h"
#include "server/request_workers.h"
#include "server/sse.h"
#include "grammar/grammar_cache.h"
#include "server/structured_output.h"
#include "server/wire_format.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace {

using json = nlohmann::json;
ApiError submit_error(const sched::Engine::Submitted& s) {
  switch (s.error_code) {
    case sched::SubmitError::Code::QueueFull: {
      ApiError e = unavailable("the request queue is full: " + s.error_message + "; retry later", 1);
      e.code = "queue_full";
      return e;
    }
    case sched::SubmitError::Code::TooLong:
      return invalid_request(s.error_message, "max_tokens", "context_length_exceeded");
    case sched::SubmitError::Code::Invalid: return invalid_request(s.error_message);
    case sched::SubmitError::Code::ShuttingDown:
      return unavailable("the server is shutting down: " + s.error_message, kDrainingRetryAfterS);
    case sched::SubmitError::Code::DeadlineUnattainable: return deadline_unattainable(s.error_message);
  }
  return server_error(s.error_message);
}

void log_done(uint64_t id, const sched::Event& done) {
  if (done.rejection) {
    spdlog::info("request {:x} refused: {}", id, done.rejection->message);
    return;
  }
  spdlog::info("request {:x} done: {} prompt tokens ({} cached), {} completion tokens, queue {:.1f} ms, ttft {:.1f} "
               "ms, tpot {:.2f} ms, total {:.1f} ms, preempted {} ({:.1f} ms){}",
               id, done.usage.prompt_tokens, done.usage.cached_tokens, done.usage.completion_tokens,
               done.timings.queue_ms, done.timings.ttft_ms, done.timings.tpot_ms, done.timings.total_ms,
               done.timings.preempted, done.timings.preempted_ms, done.error.empty() ? "" : " error: " + done.error);
}

// A request that ends before its first token with a deadline outcome gets an HTTP error
// instead of a response: 503 when refused at admission, 504 when its deadline passed.
// `finishes` are the request's Finish events.
std::optional<ApiError> deadline_outcome(const sched::Event& done, const std::vector<sched::Event>& finishes) {
  if (done.rejection) return deadline_unattainable(done.rejection->message);
  if (done.usage.completion_tokens > 0) return std::nullopt;
  for (const sched::Event& f : finishes)
    if (f.finish == sched::FinishReason::Deadline) return deadline_exceeded(f.error);
  return std::nullopt;
}

// One submitted request being answered, driven by its engine stream: the engine thread's
// notifier posts pump() to the connection's strand, which drains the stream (try_next) and
// answers — one JSON body, or Server-Sent Events as tokens come. Nothing here ever waits.
// Owned by the exchange's abort handler until the response is queued (then by whoever runs
// pump); the stream's notifier (an Exchange::waker) holds it weakly.
class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  CompletionJob(ServerState& state, ModelRegistry::Lease model, const ParsedRequest& parsed,
                std::shared_ptr<sched::Stream> stream, ResponseMeta meta, std::shared_ptr<http::Exchange> ex,
                std::shared_ptr<WireFormat> wire = nullptr)
      : state_(state),
        model_(std::move(model)),
        engine_(*model_->engine),
        ex_(std::move(ex)),
        stream_(std::move(stream)),
        streaming_(parsed.stream),
        n_(parsed.request.n),
        chat_(parsed.endpoint == Endpoint::ChatCompletions),
        include_usage_(parsed.include_usage),
        acc_(meta, parsed.request.n, *model_->tokenizer),
        builder_(std::move(meta), parsed.request.n, *model_->tokenizer, parsed.include_usage),
        wire_(std::move(wire)),
        shape_(wire_ ? wire_->error_shape() : ErrorShape::OpenAI) {}

  ~CompletionJob() {
    if (stream_started_ && !stream_counted_out_) state_.counters.streams_active--;
  }

  // Wires the exchange and the stream to this job; events already queued are pumped at once.
  void start() {
    if (streaming_) {
      // The event stream; its head goes out with the first event, or earlier as keep-alive
      // (sse.h) while the request waits for its first token.
      http::Response head;
      head.status = 200;
      head.set_header("Content-Type", std::string(kSseContentType));
      head.set_header("Cache-Control", "no-cache");
      head.set_header("X-Accel-Buffering", "no");
      const auto keepalive = std::chrono::milliseconds(static_cast<int64_t>(state_.config.stream_keepalive_s * 1000));
      sse_ = std::make_shared<SseStream>(ex_, std::move(head), keepalive);
      sse_->arm();
    }
    ex_->on_abort([self = shared_from_this()](http::AbortReason why) { self->abort(why); });
    // The engine thread calls the waker after each push: it posts at most one pump at a time
    // to the connection's strand, never blocks, and holds this job only weakly.
    stream_->set_notifier(ex_->waker([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->pump();
    }));
    if (state_.stopping) abort(http::AbortReason::ShuttingDown);
  }

 private:
  void pump() {
    sched::Event ev;
    while (!over_ && stream_->try_next(ev)) {
      if (wire_) wire_->observe(ev);
      if (streaming_)
        on_stream_event(std::move(ev));
      else
        on_event(std::move(ev));
    }
  }

  // Non-streamed: collect, answer on Done.
  void on_event(sched::Event ev) {
    if (ev.kind != sched::Event::Kind::Done) {
      if (ev.kind == sched::Event::Kind::Finish) finishes_.push_back(ev);
      acc_.add(ev);
      return;
    }
    end();
    log_done(stream_->id(), ev);
    http::Response res;
    if (std::optional<ApiError> e = deadline_outcome(ev, finishes_))
      send_error(res, *e, shape_);
    else if (!ev.error.empty())
      send_error(res, server_error(ev.error), shape_);
    else
      send_json(res, 200, wire_ ? wire_->response(acc_.response(ev), ev) : acc_.response(ev));
    ex_->respond(std::move(res));
    release_model();
  }

  // Streamed: the response (status 200) starts with the first token, or earlier with keep-alive
  // comments; until it has started, a deadline outcome is an HTTP error (deadline_outcome),
  // after that an error event.
  void on_stream_event(sched::Event ev) {
    if (!stream_started_) {
      if (ev.kind == sched::Event::Kind::Finish) {
        finishes_.push_back(ev);
        early_.push_back(std::move(ev));
        return;
      }
      if (ev.kind == sched::Event::Kind::Done)
        if (std::optional<ApiError> e = deadline_outcome(ev, finishes_)) {
          end();
          log_done(stream_->id(), ev);
          if (sse_->started()) return end_with_error(*e);
          http::Response res;
          send_error(res, *e, shape_);
          ex_->respond(std::move(res));
          return release_model();
        }
      if (!begin_stream()) return;
      std::vector<sched::Event> early = std::move(early_);
      for (sched::Event& e : early)
        if (!emit(std::move(e))) return;
    }
    emit(std::move(ev));
  }

  bool begin_stream() {
    stream_started_ = true;
    state_.counters.streams_active++;
    sse_->start();
    if (wire_) return write(wire_->stream_begin());
    if (chat_)
      for (int32_t i = 0; i < n_; ++i)
        if (!write(sse_frame(builder_.role(i)))) return false;
    return true;
  }

  // Writes one event's frames. False when the client is gone (the job is then over).
  bool emit(sched::Event ev) {
    switch (ev.kind) {
      case sched::Event::Kind::Token: {
        json chunk;
        return !builder_.token(ev, chunk) || write(frame(chunk));
      }
      case sched::Event::Kind::Finish: {
        json held;
        if (builder_.flush(ev, held) && !write(frame(held))) return false;
        return write(frame(builder_.finish(ev)));
      }
      case sched::Event::Kind::Done: {
        end();
        log_done(stream_->id(), ev);
        // The stream has started (status 200 is sent): a failure is an error event.
        if (!ev.error.empty()) {
          end_with_error(server_error(ev.error));
          return true;
        }
        if (wire_) {
          if (!write(wire_->stream_end(ev))) return false;
        } else {
          if (include_usage_ && !write(sse_frame(builder_.usage(ev)))) return false;
          if (!write(std::string(kSseDone))) return false;
        }
        end_stream();
        return true;
      }
    }
    return true;
  }

  // false once aborted; nothing to write is not a write
  bool write(const std::string& frame) { return frame.empty() || sse_->write(frame); }
  // A chat chunk's frames: its SSE frame, or the wire format's frames for it.
  std::string frame(const json& chunk) { return wire_ ? wire_->stream_chunk(chunk) : sse_frame(chunk); }

  void end_stream() {
    if (stream_started_ && !stream_counted_out_) {
      stream_counted_out_ = true;
      state_.counters.streams_active--;
    }
    sse_->end();
    release_model();
  }

  // The request is answered (or cut): nothing of the model is used any more, and a kept-alive
  // connection must not keep it loaded.
  void release_model() { model_.reset(); }

  // The last event of a stream whose head is out: the error (as the unstreamed response's
  // body), then [DONE].
  void end_with_error(const ApiError& e) {
    if (wire_)
      write(wire_->stream_error(e));
    else if (write(sse_frame(error_json(e))))
      write(std::string(kSseDone));
    end_stream();
  }

  // Done seen: nothing is left to cancel; later events are not read.
  void end() {
    done_ = true;
    over_ = true;
    stream_->set_notifier(nullptr);
  }

  // The exchange cannot be answered normally (exchange.h): cancel the request in the engine
  // (frees its KV within a step) and, when shutting down, answer at once.
  void abort(http::AbortReason why) {
    if (over_) return;
    over_ = true;
    stream_->set_notifier(nullptr);
    if (!done_) engine_.cancel(stream_->id());
    struct Release {
      CompletionJob& job;
      ~Release() { job.release_model(); }
    } release{*this};
    switch (why) {
      case http::AbortReason::ClientGone:
        state_.counters.disconnects++;
        spdlog::info("request {:x}: client disconnected, cancelled", stream_->id());
        break;
      case http::AbortReason::SlowClient:
        spdlog::info("request {:x}: client reads too slowly (--stream-buffer), cancelled", stream_->id());
        break;
      case http::AbortReason::ShuttingDown: {
        spdlog::info("request {:x}: the server is shutting down, cancelled", stream_->id());
        ApiError e = unavailable("the server is shutting down; the request was cancelled", kDrainingRetryAfterS);
        e.code = "shutting_down";
        if (sse_ && sse_->started()) {
          end_with_error(e);  // the final event of a cut stream
        } else {
          http::Response res;
          send_error(res, e, shape_);
          ex_->respond(std::move(res));
        }
        break;
      }
    }
  }

  ServerState& state_;
  ModelRegistry::Lease model_;  // keeps the model loaded until the request is answered or cut
  sched::Engine& engine_;       // valid while model_ is held
  std::shared_ptr<http::Exchange> ex_;
  std::shared_ptr<sched::Stream> stream_;
  const bool streaming_;
  const int32_t n_;
  const bool chat_;
  const bool include_usage_;
  CompletionAccumulator acc_;       // non-streamed
  ChunkBuilder builder_;            // streamed
  std::shared_ptr<WireFormat> wire_;  // another API's format (null: the OpenAI chat/completions shapes)
  const ErrorShape shape_;
  std::shared_ptr<SseStream> sse_;  // streamed
  std::vector<sched::Event> early_;     // streamed: Finish events before the first token
  std::vector<sched::Event> finishes_;  // Finish events (deadline outcome)
  bool stream_started_ = false;
  bool stream_counted_out_ = false;
  bool done_ = false;  // Done event seen
  bool over_ = false;  // answered, aborted, or Done seen: no more events are handled
};

// A request parsed and checked against its model, or the error to answer.
struct Prepared {
  std::optional<ApiError> error;
  ParsedRequest parsed;
};

// The request once its model is held: parsing, tokenizing, rendering the chat template and
// compiling the grammar — off the I/O threads (request_workers.h). Touches no exchange.
Prepared prepare(const ServerState& state, Endpoint endpoint, const std::string& text, const json& body,
                 const Backend& b) {
  Prepared out;
  auto fail = [&out](ApiError e) {
    out.error = std::move(e);
    return std::move(out);
  };
  if (b.engine->model_pooling() != sched::Pooling::None)  // the file says: an embedding model
    return fail(invalid_request("this model is an embedding model (its file sets a pooling type): it serves "
                                "/v1/embeddings, not completions", "model", "model_not_supported"));
  if (endpoint == Endpoint::ChatCompletions && !b.chat)
    return fail(server_error("the chat template cannot be used: " + b.chat_template_error));
  nlohmann::ordered_json ordered;  // chat: tool schemas keep their property order
  if (endpoint == Endpoint::ChatCompletions)
    if (auto e = parse_ordered_members(text, kChatMembers, ordered))
      return fail(*e);
  const ChatSetup setup{b.chat.get(), &ordered, state.config.reasoning_format};
  RequestLimits limits;
  limits.n_ctx = b.n_ctx;
  limits.n_vocab = b.n_vocab;
  limits.max_tokens_cap = state.config.max_tokens_cap;
  limits.max_n = state.config.max_n;
  limits.defaults = state.config.sampling;
  limits.random_seed = state.config.random_seed;
  limits.parse_special = state.config.parse_special;
  limits.max_logit_bias = state.config.max_logit_bias;
  ParsedRequest& parsed = out.parsed;
  if (auto e = parse_completion_request(body, endpoint, *b.tokenizer, setup, limits, parsed)) return fail(*e);
  if (auto e = parse_structured_output(text, b.engine->grammars(), parsed)) return fail(*e);
  if (!parsed.tool_gbnf.empty()) {
    if (parsed.request.grammar)
      return fail(invalid_request("'tools' (with tool_choice other than \"none\") and a structured output "
                                  "constraint cannot be combined",
                                  "tools"));
    auto compiled = b.engine->grammars().get(grammar::GrammarKind::Gbnf, parsed.tool_gbnf);
    if (!compiled) return fail(invalid_request("tools: " + compiled.message(), "tools", "invalid_grammar"));
    parsed.request.grammar = compiled.value();
    // A forced choice with parallel calls: a reply that repeats a call ends there (the calls
    // before the repeat are the answer; chat/tool_call_parser.h, repeats_a_call).
    if (parsed.tool_format && parsed.tools.forced() && parsed.tools.parallel && !parsed.tool_format->single_call) {
      auto tools = std::make_shared<const std::vector<chat::ToolDef>>(parsed.tools.tools);
      parsed.request.stop_when = [format = parsed.tool_format, tools,
                                  prefill = parsed.tool_prefill](std::string_view reply) {
        return chat::repeats_a_call(*format, prefill + std::string(reply), *tools);
      };
    }
  }
  return out;
}

// The prepared request submitted to the engine and answered: on the exchange's strand.
void submit(ServerState& state, Endpoint endpoint, const std::shared_ptr<http::Exchange>& ex,
            ModelRegistry::Lease lease, ParsedRequest& parsed, std::shared_ptr<WireFormat> wire = nullptr) {
  const http::Request& req = ex->request();
  const ErrorShape shape = wire ? wire->error_shape() : ErrorShape::OpenAI;
  auto fail = [&ex, shape](const ApiError& e) {
    http::Response res;
    send_error(res, e, shape);
    ex->respond(std::move(res));
  };
  if (state.draining) return fail(unavailable("the server is shutting down", kDrainingRetryAfterS));
  const Backend* b = lease.get();
  const size_t n_prompt = parsed.request.prompt.size();
  sched::Engine::Submitted sub = b->engine->submit(parsed.request);
  if (!sub.ok()) {
    spdlog::info("{} rejected: {}", req.path, sub.error_message);
    return fail(submit_error(sub));
  }
  const uint64_t id = sub.stream->id();
  spdlog::info("request {:x} {}: {} prompt tokens, n {}, max_tokens {}, stream {}, priority {}, deadline_ms {}{}{}", id,
               req.path, n_prompt, parsed.request.n, parsed.request.max_tokens, parsed.stream, parsed.request.priority,
               parsed.request.deadline_ms, parsed.request.grammar ? ", grammar" : "",
               parsed.tool_format ? fmt::format(", {} tools ({} format)", parsed.tools.tools.size(), parsed.tool_format->id)
                                  : std::string());
  if (state.config.log_prompts) spdlog::info("request {:x} prompt: {}", id, parsed.prompt_text);

  ResponseMeta meta;
  meta.endpoint = endpoint;
  // Engine ids restart with each model's engine: the response id counts server-wide.
  meta.id = fmt::format("{}-{}{:x}", endpoint == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl", state.id_salt,
                        ++state.response_seq);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = b->name;
  meta.logprobs = parsed.logprobs;
  if (parsed.tool_format) {
    meta.tool_format = parsed.tool_format;
    std::vector<chat::ToolDef> tools = parsed.tools.tools;
    meta.tools = std::make_shared<const std::vector<chat::ToolDef>>(std::move(tools));
    meta.tool_prefill = parsed.tool_prefill;
    meta.tool_special_text = parsed.tool_gbnf.empty();
  }
  meta.reasoning = parsed.reasoning;
  meta.reasoning_open = parsed.reasoning_open;
  if (parsed.harmony) {
    meta.harmony = true;
    std::vector<chat::ToolDef> tools;
    if (parsed.tools.active()) tools = parsed.tools.tools;
    meta.tools = std::make_shared<const std::vector<chat::ToolDef>>(std::move(tools));
    meta.tool_prefill = parsed.tool_prefill;
  }
  if (wire) wire->prepared(parsed);
  auto job = std::make_shared<CompletionJob>(state, std::move(lease), parsed, std::move(sub.stream), std::move(meta), ex,
                                             std::move(wire));
  job->start();
}

// Body parsed and model held (model_route.h), then prepared off the I/O threads and submitted
// back on the strand.
void handle(ServerState& state, Endpoint endpoint, const std::shared_ptr<http::Exchange>& ex) {
  if (state.draining) {
    http::Response res;
    send_error(res, unavailable("the server is shutting down", kDrainingRetryAfterS));
    return ex->respond(std::move(res));
  }
  const RequestKind kind = endpoint == Endpoint::ChatCompletions ? RequestKind::Chat : RequestKind::Completion;
  with_body_and_model(state, ex, kind,
                      [&state, endpoint](const std::shared_ptr<http::Exchange>& ex, std::shared_ptr<const std::string> text,
                                         std::shared_ptr<const json> body, ModelRegistry::Lease lease) {
                        off_io<Prepared>(
                            *state.workers, ex,
                            [&state, endpoint, text, body, lease] {
                              return prepare(state, endpoint, *text, *body, *lease);
                            },
                            [&state, endpoint, lease](const std::shared_ptr<http::Exchange>& ex, Prepared& p) {
                              if (p.error) {
                                http::Response res;
                                send_error(res, *p.error);
                                return ex->respond(std::move(res));
                              }
                              submit(state, endpoint, ex, lease, p.parsed);
                            });
                      });
}

// Another API's request (wire_format.h): translated, then prepared as a chat completion.
struct WirePrepared {
  Prepared prepared;
  std::shared_ptr<WireFormat> wire;
};

WirePrepared prepare_wire(const ServerState& state, const std::string& text, const Backend& b,
                          const WireTranslate& translate) {
  WirePrepared out;
  WireTranslation t = translate(text, b);
  if (t.error) {
    out.prepared.error = std::move(t.error);
    return out;
  }
  out.wire = std::move(t.wire);
  json chat;
  if (auto e = parse_json_body(t.chat_text, chat)) {  // a 400: nesting deeper than allowed once translated
    out.prepared.error = std::move(e);
    return out;
  }
  out.prepared = prepare(state, Endpoint::ChatCompletions, t.chat_text, chat, b);
  return out;
}

}  // namespace

void handle_wire_request(ServerState& state, const std::shared_ptr<http::Exchange>& ex, ErrorShape shape,
                         WireTranslate translate, WireCount count) {
  if (state.draining) {
    http::Response res;
    send_error(res, unavailable("the server is shutting down", kDrainingRetryAfterS), shape);
    return ex->respond(std::move(res));
  }
  auto tr = std::make_shared<const WireTranslate>(std::move(translate));
  auto cnt = std::make_shared<const WireCount>(std::move(count));
  with_body_and_model(
      state, ex, RequestKind::Chat,
      [&state, shape, tr, cnt](const std::shared_ptr<http::Exchange>& ex, std::shared_ptr<const std::string> text,
                               std::shared_ptr<const json>, ModelRegistry::Lease lease) {
        off_io<WirePrepared>(
            *state.workers, ex, [&state, text, lease, tr] { return prepare_wire(state, *text, *lease, *tr); },
            [&state, shape, lease, cnt](const std::shared_ptr<http::Exchange>& ex, WirePrepared& p) {
              http::Response res;
              if (p.prepared.error) {
                send_error(res, *p.prepared.error, shape);
                return ex->respond(std::move(res));
              }
              if (*cnt) {
                send_json(res, 200, (*cnt)(p.prepared.parsed));
                return ex->respond(std::move(res));
              }
              submit(state, Endpoint::ChatCompletions, ex, lease, p.prepared.parsed, std::move(p.wire));
            });
      },
      shape);
}

void register_completion_routes(http::Router& router, ServerState& state) {
  auto completions = [&state](const std::shared_ptr<http::Exchange>& ex) { handle(state, Endpoint::Completions, ex); };
  auto chat = [&state](const std::shared_ptr<http::Exchange>& ex) { handle(state, Endpoint::ChatCompletions, ex); };
  router.post_async("/v1/completions", completions);
  router.post_async("/completions", completions);
  router.post_async("/v1/chat/completions", chat);
  router.post_async("/chat/completions", chat);
}

}  // namespace ubatch::server
