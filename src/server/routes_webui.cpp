#include "server/routes_webui.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sched/engine.h"
#include "server/dashboard.h"
#include "server/errors.h"
#include "server/model_route.h"
#include "server/sse.h"
#include "server/webui_assets.h"

namespace ubatch::server {

namespace {

// Headers of every page file: nothing from other origins (the page works offline), no
// framing, no MIME sniffing, no referrer.
void security_headers(http::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
                 "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("X-Frame-Options", "DENY");
}

// The page (index.html) with the server's auth mode filled in, so it asks for the key
// before its first call rather than after a 401.
struct Page {
  std::string body;
  std::string etag;
};

Page make_page(const ServerState& state) {
  Page p;
  const WebAsset* index = find_web_asset("index.html");
  if (!index) return p;
  p.body = std::string(index->body);
  static constexpr std::string_view kMarker = "__UBATCH_AUTH__";
  const size_t at = p.body.find(kMarker);
  const bool key = !state.config.api_key.empty();
  if (at != std::string::npos) p.body.replace(at, kMarker.size(), key ? "required" : "none");
  p.etag = std::string(index->etag);
  p.etag.insert(p.etag.size() - 1, key ? "-k" : "-o");
  return p;
}

void send_file(const http::Request& req, http::Response& res, std::string_view body, std::string_view type,
               const std::string& etag) {
  security_headers(res);
  res.set_header("Cache-Control", "no-cache");  // revalidate: a rebuilt server serves new files
  res.set_header("ETag", etag);
  if (req.get_header_value("If-None-Match") == etag) {
    res.status = 304;
    return;
  }
  res.set_content(std::string(body), type);
  res.status = 200;
}

// The value of query parameter `name` (application/x-www-form-urlencoded: '+' is a space,
// %XX a byte); "" when absent, nullopt when its percent-encoding is broken.
std::optional<std::string> query_param(std::string_view query, std::string_view name) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  auto decode = [&](std::string_view in) -> std::optional<std::string> {
    std::string out;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == '+') {
        out += ' ';
      } else if (in[i] == '%') {
        if (i + 2 >= in.size()) return std::nullopt;
        const int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
        if (hi < 0 || lo < 0) return std::nullopt;
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
      } else {
        out += in[i];
      }
    }
    return out;
  };
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    std::optional<std::string> key = decode(pair.substr(0, eq));
    if (!key) return std::nullopt;
    if (*key == name) return eq == std::string_view::npos ? std::string() : decode(pair.substr(eq + 1));
  }
  return std::string();
}

// One open GET /v1/dashboard/events: a snapshot every interval, built and queued on the
// connection's strand by the exchange's timer. Owned by that timer's pending run and by the
// exchange's abort handler; the drain listener holds it weakly. `n_streams` counts it from
// construction until it ends (release()).
class DashboardStream : public std::enable_shared_from_this<DashboardStream> {
 public:
  DashboardStream(ServerState& state, size_t model, ModelRegistry::Lease lease, int interval_ms,
                  std::shared_ptr<std::atomic<int>> n_streams, std::shared_ptr<http::Exchange> ex)
      : state_(state),
        model_(model),
        lease_(std::move(lease)),
        feed_(*lease_->engine, interval_ms),
        n_streams_(std::move(n_streams)),
        ex_(std::move(ex)) {}

  ~DashboardStream() { release(); }

  void start() {
    ex_->on_abort([self = shared_from_this()](http::AbortReason why) { self->abort(why); });
    drain_id_ = state_.on_drain.add(ex_->waker([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->finish();
    }));
    http::Response head;
    head.status = 200;
    head.set_header("Content-Type", std::string(kSseContentType));
    head.set_header("Cache-Control", "no-cache");
    head.set_header("X-Accel-Buffering", "no");
    ex_->start_stream(std::move(head));
    // HEAD: the header fields are the answer. Draining already: nothing will come.
    if (ex_->request().method == "HEAD" || state_.draining || state_.stopping) return finish();
    if (!ex_->write(DashboardFeed::preamble())) return release();
    tick();
  }

 private:
  DashboardServerInfo server_info() const {
    DashboardServerInfo info;
    info.model = lease_->name;
    for (const ModelRegistry::Row& r : state_.models->rows())
      info.models.push_back({{"id", r.info.name}, {"status", model_state_name(r.state)},
                             {"requests_active", r.in_use}, {"requests_waiting", r.waiting}});
    info.api_key_required = !state_.config.api_key.empty();
    info.streams_active = state_.counters.streams_active.load();
    info.disconnects = state_.counters.disconnects.load();
    info.dashboard_streams = n_streams_->load();
    return info;
  }

  // On the strand: one snapshot now, the next one an interval later (not catching up on
  // intervals missed: a busy I/O thread makes the stream slower, never burstier).
  void tick() {
    if (over_) return;
    if (state_.draining || state_.stopping) return finish();
    // Another model waits for room and this one is next out: let go of it (a browser's
    // EventSource reconnects, to whichever model is loaded then).
    if (state_.models->unload_wanted(model_)) return finish();
    std::string event;
    try {
      event = feed_.next_event(server_info());
    } catch (const std::exception& e) {
      spdlog::error("dashboard events: {}", e.what());
      return finish();
    }
    // false: the client is gone or reads too slowly (aborted: release() already ran).
    if (!ex_->write(event)) return release();
    ex_->after(feed_.interval(), [self = shared_from_this()] { self->tick(); });
  }

  // Ends the stream normally (its chunked body closes): the server drains or stops.
  void finish() {
    if (over_) return;
    release();
    ex_->end_stream();
  }

  void abort(http::AbortReason why) {
    if (why == http::AbortReason::ShuttingDown) return finish();  // the connection is still open
    release();
  }

  // The stream is over: counted out, no longer a drain listener. Idempotent.
  void release() {
    if (over_) return;
    over_ = true;
    state_.on_drain.remove(drain_id_);
    n_streams_->fetch_sub(1);
  }

  ServerState& state_;
  size_t model_;
  ModelRegistry::Lease lease_;  // the model watched stays loaded while the stream is open
  DashboardFeed feed_;
  std::shared_ptr<std::atomic<int>> n_streams_;
  std::shared_ptr<http::Exchange> ex_;
  uint64_t drain_id_ = 0;
  bool over_ = false;
};

void dashboard_events(ServerState& state, const std::shared_ptr<std::atomic<int>>& n_streams,
                      const std::shared_ptr<http::Exchange>& ex) {
  http::Response res;
  auto refuse = [&](const ApiError& e) {
    send_error(res, e);
    ex->respond(std::move(res));
  };
  if (state.draining) return refuse(unavailable("the server is shutting down", kDrainingRetryAfterS));
  // ?model=NAME: that model, when loaded; without it the chat default when loaded, else the
  // first loaded model.
  const std::optional<std::string> name = query_param(ex->request().query, "model");
  if (!name) return refuse(invalid_request("'model' is not a valid query parameter", "model"));
  ModelRegistry& models = *state.models;
  ModelRegistry::Lease b;
  std::optional<size_t> index;
  if (!name->empty() || models.size() == 1) {
    ApiError error;
    index = models.resolve(*name, RequestKind::Other);
    b = model_now(state, *name, RequestKind::Other, &error);
    if (!b) return refuse(error);
  } else {
    // Without a name: the model chat requests without one go to (the page's own chat, and most
    // interactive traffic, lands there), else the first loaded model.
    if (std::optional<size_t> chat = models.resolve("", RequestKind::Chat))
      if ((b = models.try_acquire(*chat, false))) index = chat;
    for (size_t i = 0; i < models.size() && !b; ++i)
      if ((b = models.try_acquire(i, false))) index = i;
    if (!b) return refuse(unavailable("no model is loaded yet; retry shortly", 1));
  }
  const std::string range = fmt::format("'interval_ms' must be an integer in [{}, {}]", DashboardFeed::kMinIntervalMs,
                                        DashboardFeed::kMaxIntervalMs);
  const std::optional<std::string> value = query_param(ex->request().query, "interval_ms");
  const std::optional<int> interval = value ? DashboardFeed::parse_interval(*value) : std::nullopt;
  if (!interval) return refuse(invalid_request(range, "interval_ms"));
  if (n_streams->fetch_add(1) >= kMaxDashboardStreams) {
    n_streams->fetch_sub(1);
    return refuse(unavailable(fmt::format("too many dashboard streams open (at most {})", kMaxDashboardStreams), 5));
  }
  std::make_shared<DashboardStream>(state, *index, std::move(b), *interval, n_streams, ex)->start();
}

}  // namespace

bool is_webui_public_path(std::string_view path) {
  return path == "/" || (path.size() > 7 && path.substr(0, 7) == "/webui/");
}

void register_webui_routes(http::Router& router, ServerState& state) {
  auto page = std::make_shared<Page>(make_page(state));
  auto n_streams = std::make_shared<std::atomic<int>>(0);
  router.get("/", [page](const http::Request& req, http::Response& res) {
    send_file(req, res, page->body, "text/html; charset=utf-8", page->etag);
  });
  // Routes match exact paths: one per embedded file (index.html only at /). Any other
  // /webui/ path is unknown (404).
  for (const WebAsset& a : web_assets()) {
    if (a.path == "index.html") continue;
    const WebAsset* asset = &a;
    router.get("/webui/" + std::string(a.path), [asset](const http::Request& req, http::Response& res) {
      send_file(req, res, asset->body, asset->content_type, std::string(asset->etag));
    });
  }
  router.add("GET", "/v1/dashboard/events", [&state, n_streams](const std::shared_ptr<http::Exchange>& ex) {
    dashboard_events(state, n_streams, ex);
  });
}

}  // namespace ubatch::server
