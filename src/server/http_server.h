// The OpenAI-compatible HTTP server (`ubatch serve`): cpp-httplib on a thread pool, JSON
// with nlohmann-json, Server-Sent Events for streaming. It knows only the scheduler
// (sched::Engine: submit, cancel, metrics) and the tokenizer (tokenize, detokenize, chat
// template) — nothing of kernels or architectures.
//
// Lifecycle: construct → bind() (the port is open, /health answers 503 "loading") →
// start() → set_backend() once the model is loaded (/health 200, completion routes open) →
// stop(). Endpoints, fields, errors and metrics: docs/API.md.
//
// Threads: each HTTP connection is served by one pool thread; a request waits on its engine
// stream in that thread. A client that disconnects (streaming or not) has its request
// cancelled (Engine::cancel), which frees its KV within one engine step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "sampling/sampler.h"

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
  size_t max_body = 4u << 20;      // request bodies above this many bytes get 413
  int32_t max_n = 16;              // most samples (`n`) per request
  int32_t max_tokens_cap = 1 << 20;  // most tokens (`max_tokens`) per sample
  bool log_prompts = false;        // log prompt text (off: only ids and token counts are logged)
  int32_t http_threads = 64;       // pool threads: one per open connection (streaming or idle keep-alive)
  int keep_alive_timeout_s = 5;    // idle keep-alive connections close after this long
  std::string model_name;          // id in /v1/models and in responses
  std::string chat_template;       // "" : the model's template, else a family guessed from its vocabulary
  SamplingParams sampling;         // defaults for the sampling fields a request leaves out
  bool random_seed = true;         // a request without "seed" gets a random one (false: sampling.seed)
  bool parse_special = true;       // /v1/completions text prompts: special-token text becomes special tokens
  bool webui = true;               // the web page at / and its dashboard events (routes_webui.h)
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds config.host:config.port. Returns the bound port. Errors: the address cannot be
  // bound (in use, bad host).
  Result<int> bind();
  // Serves on a background thread; bind() first. Errors: not bound, already started.
  Status start();
  // Opens the model routes (/health turns 200). engine and tokenizer must outlive stop().
  // Call once, from any thread, before or after start().
  void set_backend(sched::Engine& engine, const Tokenizer& tokenizer);
  // Cancels requests in flight, closes the port, joins the threads. Idempotent.
  void stop();

  int port() const;
  const ServerConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ubatch::server
