#include "server/routes_completions.h"

#include <chrono>
#include <ctime>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sched/engine.h"
#include "server/completion_response.h"
#include "server/connection_probe.h"
#include "server/errors.h"
#include "server/json_request.h"
#include "server/sse.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

// How often a waiting handler looks at its connection (and the stop flag).
constexpr milliseconds kPollInterval{50};

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
    case sched::SubmitError::Code::ShuttingDown: return unavailable("the server is shutting down: " + s.error_message);
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

enum class Wait { Event, Stopping, ClientGone };

// Waits for the request's next event while watching the server's stop flag and, through
// `gone` (called at least every kPollInterval), the client's connection.
template <typename Gone>
Wait next_event(ServerState& state, sched::Stream& stream, sched::Event& ev, sched::Clock::time_point& last_check,
                const Gone& gone) {
  while (true) {
    const bool got = stream.next(ev, kPollInterval);
    if (!got || sched::Clock::now() - last_check >= kPollInterval) {
      last_check = sched::Clock::now();
      if (state.stopping) return Wait::Stopping;
      if (gone()) return Wait::ClientGone;
    }
    if (got) return Wait::Event;
  }
}

// Answers a request whose wait ended without a response: cancels it and sets the status.
void abandon(ServerState& state, sched::Engine& engine, uint64_t id, Wait why, httplib::Response& res) {
  engine.cancel(id);
  if (why == Wait::Stopping) return send_error(res, unavailable("the server is shutting down"));
  state.counters.disconnects++;
  spdlog::info("request {:x}: client disconnected, cancelled", id);
  // Nobody reads this; 499 (client closed request, as nginx logs it) keeps the counters honest.
  ApiError gone = invalid_request("the client closed the connection", "", "client_closed");
  gone.status = 499;
  send_error(res, gone);
}

// Everything a streamed response needs after the handler has returned (the content
// provider runs later, on the same connection thread).
struct StreamState {
  ServerState* state = nullptr;
  sched::Engine* engine = nullptr;
  std::shared_ptr<sched::Stream> stream;
  std::vector<sched::Event> early;  // events that arrived before the response started, in order
  ChunkBuilder builder;
  int32_t n = 1;
  bool chat = false;
  bool include_usage = false;
  bool finished = false;  // Done seen (nothing left to cancel)
  bool cancelled = false;

  StreamState(ChunkBuilder b) : builder(std::move(b)) {}
  void cancel(bool client_gone) {
    if (finished || cancelled) return;
    cancelled = true;
    engine->cancel(stream->id());
    if (client_gone) {
      state->counters.disconnects++;
      spdlog::info("request {:x}: client disconnected, cancelled", stream->id());
    }
  }
};

// Writes every frame of one streamed request. Returns false when the client went away
// (the request is then cancelled).
bool run_stream(StreamState& s, httplib::DataSink& sink) {
  auto write = [&](const std::string& frame) {
    if (sink.write(frame.data(), frame.size())) return true;
    s.cancel(true);
    return false;
  };
  if (s.chat)
    for (int32_t i = 0; i < s.n; ++i)
      if (!write(sse_frame(s.builder.role(i)))) return false;
  auto last_check = sched::Clock::now();
  sched::Event ev;
  size_t n_early = 0;
  while (true) {
    if (n_early < s.early.size()) {
      ev = std::move(s.early[n_early++]);
    } else {
      const Wait w = next_event(*s.state, *s.stream, ev, last_check, [&] { return !sink.is_writable(); });
      if (w != Wait::Event) {
        s.cancel(w == Wait::ClientGone);
        return false;
      }
    }
    switch (ev.kind) {
      case sched::Event::Kind::Token: {
        json chunk;
        if (s.builder.token(ev, chunk) && !write(sse_frame(chunk))) return false;
        break;
      }
      case sched::Event::Kind::Finish:
        if (!write(sse_frame(s.builder.finish(ev)))) return false;
        break;
      case sched::Event::Kind::Done: {
        s.finished = true;
        log_done(s.stream->id(), ev);
        if (!ev.error.empty()) {
          // The stream has started (status 200 is sent): report the failure as an error frame.
          write(sse_frame(error_json(server_error(ev.error))));
          sink.done();
          return true;
        }
        if (s.include_usage && !write(sse_frame(s.builder.usage(ev)))) return false;
        if (!write(std::string(kSseDone))) return false;
        sink.done();
        return true;
      }
    }
  }
}

void respond_streaming(ServerState& state, sched::Engine& engine, const Tokenizer& tok, const ParsedRequest& parsed,
                       std::shared_ptr<sched::Stream> stream, ResponseMeta meta, const httplib::Request& req,
                       httplib::Response& res) {
  // The response (status 200) starts with the first token: until then the request may still
  // end with a deadline outcome, which is an HTTP error (deadline_outcome).
  std::vector<sched::Event> early, finishes;
  {
    const ConnectionProbe probe(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    auto last_check = sched::Clock::now();
    sched::Event ev;
    while (true) {
      const Wait w = next_event(state, *stream, ev, last_check, [&] { return probe.closed(); });
      if (w != Wait::Event) return abandon(state, engine, stream->id(), w, res);
      if (ev.kind == sched::Event::Kind::Finish) finishes.push_back(ev);
      if (ev.kind == sched::Event::Kind::Done)
        if (std::optional<ApiError> e = deadline_outcome(ev, finishes)) {
          log_done(stream->id(), ev);
          return send_error(res, *e);
        }
      const bool started = ev.kind != sched::Event::Kind::Finish;
      early.push_back(std::move(ev));
      if (started) break;
    }
  }
  auto s = std::make_shared<StreamState>(ChunkBuilder(std::move(meta), parsed.request.n, tok, parsed.include_usage));
  s->state = &state;
  s->engine = &engine;
  s->stream = std::move(stream);
  s->early = std::move(early);
  s->n = parsed.request.n;
  s->chat = parsed.endpoint == Endpoint::ChatCompletions;
  s->include_usage = parsed.include_usage;
  state.counters.streams_active++;
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      std::string(kSseContentType),
      [s](size_t /*offset*/, httplib::DataSink& sink) -> bool {
        try {
          return run_stream(*s, sink);
        } catch (const std::exception& e) {
          spdlog::error("request {:x}: stream failed: {}", s->stream->id(), e.what());
          s->cancel(false);
          return false;
        }
      },
      [s](bool /*success*/) {
        // Also runs when the provider never did (the headers could not be written).
        s->cancel(!s->state->stopping);
        s->state->counters.streams_active--;
      });
}

void respond_blocking(ServerState& state, sched::Engine& engine, const Tokenizer& tok, const ParsedRequest& parsed,
                      const std::shared_ptr<sched::Stream>& stream, ResponseMeta meta, const httplib::Request& req,
                      httplib::Response& res) {
  const ConnectionProbe probe(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  CompletionAccumulator acc(std::move(meta), parsed.request.n, tok);
  std::vector<sched::Event> finishes;
  auto last_check = sched::Clock::now();
  sched::Event ev;
  while (true) {
    const Wait w = next_event(state, *stream, ev, last_check, [&] { return probe.closed(); });
    if (w != Wait::Event) return abandon(state, engine, stream->id(), w, res);
    if (ev.kind != sched::Event::Kind::Done) {
      if (ev.kind == sched::Event::Kind::Finish) finishes.push_back(ev);
      acc.add(ev);
      continue;
    }
    log_done(stream->id(), ev);
    if (std::optional<ApiError> e = deadline_outcome(ev, finishes)) return send_error(res, *e);
    if (!ev.error.empty()) return send_error(res, server_error(ev.error));
    return send_json(res, 200, acc.response(ev));
  }
}

void handle(ServerState& state, Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const Backend* b = state.backend.load();
  if (!b) return send_error(res, unavailable("the model is loading; retry shortly", 1));
  if (endpoint == Endpoint::ChatCompletions && !b->chat_template_error.empty())
    return send_error(res, server_error("the chat template cannot be used: " + b->chat_template_error));
  json body;
  if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
  RequestLimits limits;
  limits.n_ctx = b->n_ctx;
  limits.n_vocab = b->n_vocab;
  limits.max_tokens_cap = state.config.max_tokens_cap;
  limits.max_n = state.config.max_n;
  limits.defaults = state.config.sampling;
  limits.random_seed = state.config.random_seed;
  limits.parse_special = state.config.parse_special;
  ParsedRequest parsed;
  if (auto e = parse_completion_request(body, endpoint, *b->tokenizer, b->chat_template, limits, parsed))
    return send_error(res, *e);
  if (auto e = parse_structured_output(req.body, b->engine->grammars(), parsed)) return send_error(res, *e);

  const size_t n_prompt = parsed.request.prompt.size();
  sched::Engine::Submitted sub = b->engine->submit(parsed.request);
  if (!sub.ok()) {
    spdlog::info("{} rejected: {}", req.path, sub.error_message);
    return send_error(res, submit_error(sub));
  }
  const uint64_t id = sub.stream->id();
  spdlog::info("request {:x} {}: {} prompt tokens, n {}, max_tokens {}, stream {}, priority {}, deadline_ms {}{}", id,
               req.path, n_prompt, parsed.request.n, parsed.request.max_tokens, parsed.stream, parsed.request.priority,
               parsed.request.deadline_ms, parsed.request.grammar ? ", grammar" : "");
  if (state.config.log_prompts) spdlog::info("request {:x} prompt: {}", id, parsed.prompt_text);

  ResponseMeta meta;
  meta.endpoint = endpoint;
  meta.id = fmt::format("{}-{}{:x}", endpoint == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl", state.id_salt, id);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = state.config.model_name;
  meta.logprobs = parsed.logprobs;
  if (parsed.stream)
    respond_streaming(state, *b->engine, *b->tokenizer, parsed, std::move(sub.stream), std::move(meta), req, res);
  else
    respond_blocking(state, *b->engine, *b->tokenizer, parsed, sub.stream, std::move(meta), req, res);
}

}  // namespace

void register_completion_routes(httplib::Server& http, ServerState& state) {
  auto completions = [&state](const httplib::Request& req, httplib::Response& res) {
    handle(state, Endpoint::Completions, req, res);
  };
  auto chat = [&state](const httplib::Request& req, httplib::Response& res) {
    handle(state, Endpoint::ChatCompletions, req, res);
  };
  http.Post("/v1/completions", completions);
  http.Post("/completions", completions);
  http.Post("/v1/chat/completions", chat);
  http.Post("/chat/completions", chat);
}

}  // namespace ubatch::server
