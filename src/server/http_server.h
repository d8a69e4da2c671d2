// The OpenAI-compatible HTTP server (`ubatch serve`): the event-driven HTTP/1.1 transport of
// src/server/http/ (Boost.Beast on Boost.Asio), JSON with nlohmann-json, Server-Sent Events for
// streaming. It knows only the scheduler (sched::Engine: submit, cancel, metrics) and the
// tokenizer (tokenize, detokenize, chat template) — nothing of kernels or architectures.
//
// Lifecycle: construct → bind() (the port is open, /health answers 503 "loading") →
// start() → set_backend() once the model is loaded (/health 200, completion routes open) →
// [drain() → wait_idle()] → stop(). Several models: serve_models() before start(), then
// preload_models(). Endpoints, fields, errors and metrics: docs/API.md.
//
// Threads: `http_threads` I/O threads serve every connection; no handler ever waits on a
// socket or on the engine, and none parses, tokenizes, renders or compiles on them: that work
// runs on `request_threads` workers (request_workers.h). A completion registers a notifier on its engine stream: the engine
// thread only posts a task to the connection's strand, which drains the stream and writes.
// A client that disconnects (streaming or not) has its request cancelled (Engine::cancel),
// which frees its KV within one engine step; so has a streaming client that reads so slowly
// that `stream_buffer` bytes queue up (a slow client).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chat/reasoning.h"
#include "common/status.h"
#include "sched/metrics.h"
#include "sampling/sampler.h"
#include "sched/request.h"
#include "server/model_registry.h"

namespace ubatch {
class Tokenizer;
namespace sched {
class Engine;
}
}  // namespace ubatch

namespace ubatch::server {

struct ServerConfig {
  std::string host = "127.0.0.1";  // bind address (loopback unless told otherwise)
  int port = 8080;                 // 0: an ephemeral port (see HttpServer::port())
  std::string api_key;             // non-empty: every route but /health needs "Authorization: Bearer <key>"
  size_t max_body = 4u << 20;      // request bodies above this many bytes get 413 (any transfer coding)
  size_t max_header = 16u << 10;   // request line + header fields above this many bytes get 431
  int32_t max_n = 16;              // most samples (`n`) per request
  int32_t max_tokens_cap = 1 << 20;  // most tokens (`max_tokens`) per sample
  bool log_prompts = false;        // log prompt text (off: only ids and token counts are logged)
  int32_t http_threads = 2;        // I/O threads serving every connection (>= 1)
  int32_t request_threads = 2;     // threads parsing and checking requests off the I/O threads (>= 1)
  int32_t max_logit_bias = 0;      // most logit_bias entries per request (0: the vocabulary size)
  int keep_alive_timeout_s = 5;    // a connection waiting this long for a request's first byte closes
  double header_timeout_s = 10;    // first byte of a request → end of its header (408 beyond)
  double body_timeout_s = 30;      // end of the header → end of the body (408 beyond)
  double send_timeout_s = 30;      // a write stalled this long closes the connection
  size_t max_connections = 8192;   // open connections; more are accepted and closed at once
  size_t stream_buffer = 1u << 20; // streamed bytes queued for a slow reader before it is cut off
  double stream_keepalive_s = 5;   // a stream silent this long sends its head, then ": keep-alive"
                                   // comments (sse.h), so proxies' idle timeouts do not cut it; 0: off
  std::vector<std::string> cors_origins;  // allowed browser origins ("*": any); empty: no CORS
  std::string model_name;          // id in /v1/models and in responses (one model, set_backend)
  double model_wait_s = 120;       // a request for a model that is not loaded waits this long at most
                                   // for it to load (or its deadline_ms, when shorter); then 503
  std::string chat_template;       // "" : the model's template, else a family guessed from its vocabulary
  // Reasoning in chat replies (docs/API.md, "Reasoning"): the default of a request's reasoning_format.
  chat::ReasoningFormat reasoning_format = chat::ReasoningFormat::Auto;
  SamplingParams sampling;         // defaults for the sampling fields a request leaves out
  bool random_seed = true;         // a request without "seed" gets a random one (false: sampling.seed)
  bool parse_special = true;       // /v1/completions text prompts: special-token text becomes special tokens
  bool webui = true;               // the web page at / and its dashboard events (routes_webui.h)
  // /v1/embeddings (routes_embeddings.h): how the final hidden states are pooled (None: as the
  // model file says, <arch>.pooling_type, else mean) and whether vectors are L2-normalised.
  sched::Pooling pooling = sched::Pooling::None;
  bool embd_normalize = true;
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds config.host:config.port. Returns the bound port. Errors: the address cannot be
  // bound (in use, bad host), a --cors-origin entry that is not an origin.
  Result<int> bind();
  // Serves on a background thread; bind() first. Errors: not bound, already started.
  Status start();
  // Opens the model routes (/health turns 200). engine and tokenizer must outlive stop().
  // Call once, from any thread, before or after start().
  void set_backend(sched::Engine& engine, const Tokenizer& tokenizer);
  // Serves several models instead (model_registry.h): loaded on demand by `loader` within
  // options.budget_bytes, routed by the request's "model". Call before start(), instead of
  // set_backend. Errors: ModelRegistry::check() (a model that can never fit the budget, a
  // default that names no model, two models of one name).
  Status serve_models(std::vector<ModelInfo> models, ModelLoader loader, RegistryOptions options);
  // Loads models while they fit the budget (ModelRegistry::preload); blocks. /health answers
  // 200 once one model is loaded, and 503 (status "no_model", with each model's error) when
  // preloading is over and every model failed to load. Error in that case: nothing can serve.
  Status preload_models();
  // Each loaded model's name and engine metrics (`serve --perf`).
  std::vector<std::pair<std::string, sched::MetricsSnapshot>> model_metrics() const;
  // Graceful shutdown, first half: /health answers 503 "draining", new completions get 503,
  // idle keep-alive connections close and the others after their current response; the port
  // stays open so that health probes get their answer. Running requests go on; the
  // dashboard's event streams, which never end by themselves, end now. Idempotent.
  void drain();
  // Waits until no request is being answered, at most `timeout`. True when none is.
  bool wait_idle(std::chrono::milliseconds timeout);
  // Requests being answered now (all routes).
  int64_t requests_in_flight() const;
  // Cancels requests in flight — a stream ends with an error event and [DONE], a waiting
  // request gets 503 —, closes the port and every connection, joins the threads. Never hangs
  // (a few seconds at most). Idempotent.
  void stop();

  int port() const;
  const ServerConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ubatch::server
