#include <cctype>
#include "server/http_server.h"

#include <sys/socket.h>

#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sched/engine.h"
#include "server/errors.h"
#include "common/httplib_include.h"
#include "server/routes_completions.h"
#include "server/routes_misc.h"
#include "server/routes_webui.h"
#include "server/server_state.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace {

// Same bytes, compared in time that does not depend on where they differ.
bool equal_constant_time(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool authorized(const httplib::Request& req, const std::string& key) {
  const std::string auth = req.get_header_value("Authorization");
  // The auth scheme is case-insensitive (RFC 9110 §11.1).
  static const std::string kBearer = "bearer ";
  bool bearer = auth.size() > kBearer.size();
  for (size_t i = 0; bearer && i < kBearer.size(); ++i)
    bearer = std::tolower(static_cast<unsigned char>(auth[i])) == kBearer[i];
  if (bearer) return equal_constant_time(auth.substr(kBearer.size()), key);
  const std::string x = req.get_header_value("X-Api-Key");
  return !x.empty() && equal_constant_time(x, key);
}

// The chat format for a model whose GGUF carries no template: the family whose turn
// markers are single tokens of the vocabulary.
std::string guess_chat_family(const Tokenizer& tok) {
  static const std::pair<const char*, const char*> kMarkers[] = {
      {"<start_of_turn>", "gemma"}, {"<|start_header_id|>", "llama3"}, {"<|im_start|>", "chatml"}, {"<|user|>", "phi3"}};
  for (const auto& [marker, family] : kMarkers)
    if (tok.tokenize(marker, false, true).size() == 1) return family;
  return "chatml";
}

ApiError error_for_status(const httplib::Request& req, int status) {
  switch (status) {
    case 404: return not_found(fmt::format("no route for {} {}", req.method, req.path));
    case 413:
      // The HTTP library caps form-encoded bodies at 8 KiB whatever --max-body says.
      if (req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0)
        return too_large("form-encoded bodies are limited to 8 KiB: send the body as JSON "
                         "(Content-Type: application/json)");
      return too_large("the request body is larger than this server accepts (--max-body)");
    case 400: return invalid_request("malformed HTTP request");
    default: break;
  }
  ApiError e = status >= 500 ? server_error("internal error") : invalid_request("request failed");
  e.status = status;
  return e;
}

// httplib::Server with access to its listening socket: the library listens with a backlog
// of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when Debian built it), too short for bursts of
// clients; bind() widens it.
class Listener : public httplib::Server {
 public:
  socket_t listening_socket() const { return svr_sock_; }
};

}  // namespace

struct HttpServer::Impl {
  explicit Impl(ServerConfig config) : state(std::move(config)) {}
  ServerState state;
  Listener http;
  std::thread thread;
  int port = -1;
  bool started = false;
  bool stopped = false;
};

HttpServer::HttpServer(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  ServerState& st = impl_->state;
  httplib::Server& http = impl_->http;
  st.id_salt = fmt::format("{:06x}", std::random_device{}() & 0xFFFFFF);

  const size_t n_threads = static_cast<size_t>(std::max(st.config.http_threads, 2));
  http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  http.set_payload_max_length(st.config.max_body);
  http.set_keep_alive_max_count(1000);
  http.set_keep_alive_timeout(std::max(st.config.keep_alive_timeout_s, 1));
  // A client that stops sending mid-request holds its HTTP thread this long.
  http.set_read_timeout(10, 0);
  // Tokens are small writes: without TCP_NODELAY, Nagle holds them ~40 ms on keep-alive
  // connections and a stream arrives in bursts.
  http.set_tcp_nodelay(true);
  http.set_write_timeout(10, 0);

  http.set_pre_routing_handler([&st](const httplib::Request& req, httplib::Response& res) {
    if (st.config.api_key.empty() || req.path == "/health" || req.path == "/v1/health" ||
        (st.config.webui && is_webui_public_path(req.path)))
      return httplib::Server::HandlerResponse::Unhandled;
    if (authorized(req, st.config.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, unauthorized("missing or wrong API key (send \"Authorization: Bearer <key>\")"));
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad HTTP) get a JSON body too.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    const int status = res.status;
    send_error(res, error_for_status(req, status));
    res.status = status;
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("{} {}: {}", req.method, req.path, what);
    send_error(res, server_error("internal error: " + what));
  });
  http.set_logger([&st](const httplib::Request& req, const httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(st.counters.mutex);
      st.counters.responses_by_status[res.status]++;
    }
    spdlog::debug("{} {} {} → {}", req.remote_addr, req.method, req.path, res.status);
  });

  register_completion_routes(http, st);
  register_misc_routes(http, st, static_cast<int64_t>(std::time(nullptr)));
  if (st.config.webui) register_webui_routes(http, st);
}

HttpServer::~HttpServer() { stop(); }

Result<int> HttpServer::bind() {
  const ServerConfig& c = impl_->state.config;
  if (impl_->port >= 0) return impl_->port;
  int port = -1;
  // The library's default socket options include SO_REUSEPORT, which lets a second server
  // bind a port already in use (the kernel then splits connections between them). Keep
  // only SO_REUSEADDR (restart without waiting for TIME_WAIT) so a busy port is an error.
  impl_->http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const char*>(&yes), sizeof(yes));
  });
  if (c.port == 0) {
    port = impl_->http.bind_to_any_port(c.host);
  } else if (impl_->http.bind_to_port(c.host, c.port)) {
    port = c.port;
  }
  if (port <= 0) return Status::error(fmt::format("serve: cannot listen on {}:{} (address in use or invalid host)", c.host, c.port));
  // listen() again on a listening socket only changes its backlog (Linux).
  if (::listen(impl_->http.listening_socket(), SOMAXCONN) != 0)
    spdlog::warn("serve: could not widen the listen backlog");
  impl_->port = port;
  return port;
}

Status HttpServer::start() {
  if (impl_->port < 0) return Status::error("serve: start() before bind()");
  if (impl_->started) return Status::error("serve: already started");
  impl_->started = true;
  impl_->thread = std::thread([this] { impl_->http.listen_after_bind(); });
  // httplib's stop() only closes the socket of a running server: wait until it runs.
  for (int i = 0; i < 5000 && !impl_->http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return Status::ok();
}

void HttpServer::set_backend(sched::Engine& engine, const Tokenizer& tokenizer) {
  ServerState& st = impl_->state;
  if (st.backend.load()) return;
  auto b = std::make_unique<Backend>();
  b->engine = &engine;
  b->tokenizer = &tokenizer;
  b->n_ctx = engine.n_ctx_seq();
  b->kv_cells = engine.n_ctx();
  b->n_vocab = engine.n_vocab();
  b->chat_template = st.config.chat_template;
  if (b->chat_template.empty()) b->chat_template = tokenizer.chat_template();
  if (b->chat_template.empty()) b->chat_template = guess_chat_family(tokenizer);
  Result<std::string> probe = apply_chat_template(b->chat_template, {{"user", "hi"}}, true);
  if (!probe) {
    b->chat_template_error = probe.message();
    spdlog::warn("chat template unusable, /v1/chat/completions will answer 500: {}", probe.message());
  }
  st.backend_owner = std::move(b);
  st.backend.store(st.backend_owner.get());
}

void HttpServer::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->state.stopping = true;  // waiting handlers cancel their requests and return
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int HttpServer::port() const { return impl_->port; }
const ServerConfig& HttpServer::config() const { return impl_->state.config; }

}  // namespace ubatch::server
