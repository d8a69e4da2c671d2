#include "server/routes_embeddings.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sched/engine.h"
#include "server/embedding_request.h"
#include "server/errors.h"
#include "server/json_request.h"
#include "server/model_route.h"
#include "server/request_workers.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace {

using json = nlohmann::json;

ApiError embedding_submit_error(const sched::Engine::Submitted& s) {
  switch (s.error_code) {
    case sched::SubmitError::Code::QueueFull: {
      ApiError e = unavailable("the request queue is full: " + s.error_message + "; retry later", 1);
      e.code = "queue_full";
      return e;
    }
    case sched::SubmitError::Code::TooLong: return invalid_request(s.error_message, "input", "context_length_exceeded");
    case sched::SubmitError::Code::Invalid: return invalid_request(s.error_message, "input");
    case sched::SubmitError::Code::ShuttingDown: return unavailable("the server is shutting down: " + s.error_message);
    case sched::SubmitError::Code::DeadlineUnattainable: return deadline_unattainable(s.error_message);
  }
  return server_error(s.error_message);
}

// The pooling requests use: the server's --pooling, else the model file's, else mean (so any
// decoder model can embed; docs/API.md, "POST /v1/embeddings").
sched::Pooling resolve_pooling(const ServerConfig& cfg, const sched::Engine& engine) {
  if (cfg.pooling != sched::Pooling::None) return cfg.pooling;
  const sched::Pooling file = engine.model_pooling();
  return file != sched::Pooling::None ? file : sched::Pooling::Mean;
}

// One embeddings request being answered: one engine stream per input, each with a notifier
// that posts pump() to the connection's strand; the answer goes out when every stream has
// its Done event. Nothing here ever waits. Owned by the exchange's abort handler until the
// response is queued; the notifiers hold it weakly.
class EmbeddingJob : public std::enable_shared_from_this<EmbeddingJob> {
 public:
  EmbeddingJob(ServerState& state, ModelRegistry::Lease lease, EmbeddingRequest parsed,
               std::vector<std::shared_ptr<sched::Stream>> streams, bool normalize, std::shared_ptr<http::Exchange> ex)
      : state_(state),
        lease_(std::move(lease)),
        engine_(*lease_->engine),
        ex_(std::move(ex)),
        parsed_(std::move(parsed)),
        streams_(std::move(streams)),
        model_(lease_->name),
        normalize_(normalize),
        done_(streams_.size()),
        vectors_(streams_.size()) {}

  void start() {
    ex_->on_abort([self = shared_from_this()](http::AbortReason why) { self->abort(why); });
    for (const auto& stream : streams_)
      stream->set_notifier(ex_->waker([weak = weak_from_this()] {
        if (auto self = weak.lock()) self->pump();
      }));
    if (state_.stopping) abort(http::AbortReason::ShuttingDown);
  }

 private:
  void pump() {
    sched::Event ev;
    for (size_t i = 0; i < streams_.size() && !over_; ++i) {
      while (!over_ && !done_[i] && streams_[i]->try_next(ev)) {
        if (ev.kind == sched::Event::Kind::Finish && !ev.error.empty() && error_.empty()) error_ = ev.error;
        if (ev.kind != sched::Event::Kind::Done) continue;
        done_[i] = true;
        streams_[i]->set_notifier(nullptr);
        ++n_done_;
        if (ev.rejection) {
          if (!refusal_) refusal_ = deadline_unattainable(ev.rejection->message);
        } else if (!ev.error.empty()) {
          if (error_.empty()) error_ = ev.error;
        } else if (ev.embedding.empty()) {
          if (error_.empty()) error_ = "the engine returned no vector";
        }
        prompt_tokens_ += ev.usage.prompt_tokens;
        vectors_[i] = std::move(ev.embedding);
      }
    }
    if (!over_ && n_done_ == streams_.size()) answer();
  }

  void answer() {
    over_ = true;
    http::Response res;
    if (refusal_) {
      send_error(res, *refusal_);
    } else if (!error_.empty()) {
      send_error(res, server_error(error_));
    } else {
      json data = json::array();
      for (size_t i = 0; i < vectors_.size(); ++i) {
        std::vector<float> v = finish_embedding(std::move(vectors_[i]), parsed_.dimensions, normalize_);
        json item = {{"object", "embedding"}, {"index", i}};
        if (parsed_.base64) {
          item["embedding"] = base64_floats(v);
        } else {
          json arr = json::array();
          for (float x : v) arr.push_back(x);
          item["embedding"] = std::move(arr);
        }
        data.push_back(std::move(item));
      }
      json body = {{"object", "list"},
                   {"data", std::move(data)},
                   {"model", model_},
                   {"usage", {{"prompt_tokens", prompt_tokens_}, {"total_tokens", prompt_tokens_}}}};
      send_json(res, 200, body);
    }
    spdlog::info("embeddings {:x}: {} inputs, {} tokens{}", streams_.front()->id(), streams_.size(), prompt_tokens_,
                 error_.empty() ? "" : " error: " + error_);
    ex_->respond(std::move(res));
    lease_.reset();  // answered: the model may be unloaded now (the connection may stay open)
  }

  void cancel_rest() {
    for (size_t i = 0; i < streams_.size(); ++i) {
      streams_[i]->set_notifier(nullptr);
      if (!done_[i]) engine_.cancel(streams_[i]->id());
    }
  }

  void abort(http::AbortReason why) {
    if (over_) return;
    over_ = true;
    cancel_rest();
    lease_.reset();  // nothing of the model is used from here on
    if (why == http::AbortReason::ClientGone) {
      state_.counters.disconnects++;
      spdlog::info("embeddings {:x}: client disconnected, cancelled", streams_.front()->id());
    } else if (why == http::AbortReason::ShuttingDown) {
      ApiError e = unavailable("the server is shutting down; the request was cancelled");
      e.code = "shutting_down";
      http::Response res;
      send_error(res, e);
      ex_->respond(std::move(res));
    }
  }

  ServerState& state_;
  ModelRegistry::Lease lease_;  // keeps the model loaded until the job is answered or aborted
  sched::Engine& engine_;       // valid while lease_ is held
  std::shared_ptr<http::Exchange> ex_;
  EmbeddingRequest parsed_;
  std::vector<std::shared_ptr<sched::Stream>> streams_;
  const std::string model_;
  const bool normalize_;
  std::vector<bool> done_;
  size_t n_done_ = 0;
  std::vector<std::vector<float>> vectors_;
  int64_t prompt_tokens_ = 0;
  std::string error_;
  std::optional<ApiError> refusal_;
  bool over_ = false;
};

// A request parsed and tokenized against its model, or the error to answer.
struct EmbeddingPrepared {
  std::optional<ApiError> error;
  EmbeddingRequest parsed;
};

// Off the I/O threads (request_workers.h): parsing and tokenizing every input.
EmbeddingPrepared prepare_embeddings(const ServerState& state, const json& body, const Backend& b) {
  EmbeddingPrepared out;
  EmbeddingLimits limits;
  limits.n_ctx = b.n_ctx;
  limits.n_vocab = b.n_vocab;
  limits.n_embd = b.engine->n_embd();
  limits.parse_special = state.config.parse_special;
  // Each input is one engine request: never more than the queue takes at once.
  limits.max_inputs = std::min<size_t>(limits.max_inputs, static_cast<size_t>(std::max(1, b.engine->config().max_queue)));
  out.error = parse_embedding_request(body, *b.tokenizer, limits, out.parsed);
  return out;
}

// On the exchange's strand: one engine request per input, answered by an EmbeddingJob.
void submit_embeddings(ServerState& state, const std::shared_ptr<http::Exchange>& ex, ModelRegistry::Lease lease,
            EmbeddingRequest& parsed) {
  const http::Request& req = ex->request();
  auto fail = [&ex](const ApiError& e) {
    http::Response res;
    send_error(res, e);
    ex->respond(std::move(res));
  };
  if (state.draining) return fail(unavailable("the server is shutting down"));
  const Backend* b = lease.get();
  const sched::Pooling pooling = resolve_pooling(state.config, *b->engine);
  std::vector<std::shared_ptr<sched::Stream>> streams;
  for (const std::vector<int32_t>& ids : parsed.inputs) {
    sched::Request r;
    r.prompt = ids;
    r.pooling = pooling;
    r.max_tokens = 1;
    r.speculative = false;
    sched::Engine::Submitted sub = b->engine->submit(std::move(r));
    if (!sub.ok()) {
      for (const auto& s : streams) b->engine->cancel(s->id());
      spdlog::info("{} rejected: {}", req.path, sub.error_message);
      return fail(embedding_submit_error(sub));
    }
    streams.push_back(std::move(sub.stream));
  }
  spdlog::info("embeddings {:x}: {} inputs, pooling {}, {}", streams.front()->id(), streams.size(),
               sched::pooling_name(pooling), parsed.base64 ? "base64" : "float");
  auto job = std::make_shared<EmbeddingJob>(state, std::move(lease), std::move(parsed), std::move(streams),
                                            state.config.embd_normalize, ex);
  job->start();
}

void handle_embeddings(ServerState& state, const std::shared_ptr<http::Exchange>& ex) {
  if (state.draining) {
    http::Response res;
    send_error(res, unavailable("the server is shutting down"));
    return ex->respond(std::move(res));
  }
  with_body_and_model(state, ex, RequestKind::Completion,
                      [&state](const std::shared_ptr<http::Exchange>& ex, std::shared_ptr<const std::string>,
                               std::shared_ptr<const json> body, ModelRegistry::Lease lease) {
                        off_io<EmbeddingPrepared>(
                            *state.workers, ex, [&state, body, lease] { return prepare_embeddings(state, *body, *lease); },
                            [&state, lease](const std::shared_ptr<http::Exchange>& ex, EmbeddingPrepared& p) {
                              if (p.error) {
                                http::Response res;
                                send_error(res, *p.error);
                                return ex->respond(std::move(res));
                              }
                              submit_embeddings(state, ex, lease, p.parsed);
                            });
                      });
}

}  // namespace

void register_embedding_routes(http::Router& router, ServerState& state) {
  auto embeddings = [&state](const std::shared_ptr<http::Exchange>& ex) { handle_embeddings(state, ex); };
  router.post_async("/v1/embeddings", embeddings);
  router.post_async("/embeddings", embeddings);
}

}  // namespace ubatch::server
