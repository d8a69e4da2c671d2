#include "server/routes_webui.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "sched/engine.h"
#include "server/connection_probe.h"
#include "server/dashboard.h"
#include "server/errors.h"
#include "server/webui_assets.h"

namespace ubatch::server {

namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting event stream looks at the stop flag and its connection.
constexpr std::chrono::milliseconds kPollInterval{50};

// Headers of every page file: nothing from other origins (the page works offline), no
// framing, no MIME sniffing, no referrer.
void security_headers(httplib::Response& res) {
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

void send_file(const httplib::Request& req, httplib::Response& res, std::string_view body, std::string_view type,
               const std::string& etag) {
  security_headers(res);
  res.set_header("Cache-Control", "no-cache");  // revalidate: a rebuilt server serves new files
  res.set_header("ETag", etag);
  if (req.get_header_value("If-None-Match") == etag) {
    res.status = 304;
    return;
  }
  res.set_content(std::string(body), std::string(type));
  res.status = 200;
}

DashboardServerInfo server_info(ServerState& state, const std::atomic<int>& n_streams) {
  DashboardServerInfo info;
  info.model = state.config.model_name;
  info.api_key_required = !state.config.api_key.empty();
  info.streams_active = state.counters.streams_active.load();
  info.disconnects = state.counters.disconnects.load();
  info.dashboard_streams = n_streams.load();
  return info;
}

// Writes a snapshot every interval until the client goes away or the server stops. Returns
// false when the client went away: a failed write, or a closed connection seen by `probe`
// within kPollInterval (a write into a closed socket may succeed once, so waiting for a
// failed write would keep a closed stream counted for up to two intervals).
bool run_events(ServerState& state, DashboardFeed& feed, const std::atomic<int>& n_streams,
                const ConnectionProbe& probe, httplib::DataSink& sink) {
  const std::string preamble = DashboardFeed::preamble();
  if (!sink.write(preamble.data(), preamble.size())) return false;
  auto next = Clock::now();
  while (!state.stopping) {
    const std::string event = feed.next_event(server_info(state, n_streams));
    if (!sink.write(event.data(), event.size())) return false;
    next += feed.interval();
    for (auto now = Clock::now(); now < next && !state.stopping; now = Clock::now()) {
      if (!sink.is_writable() || probe.closed()) return false;
      std::this_thread::sleep_for(std::min<Clock::duration>(kPollInterval, next - now));
    }
    if (Clock::now() > next + feed.interval()) next = Clock::now();  // fell behind: no burst to catch up
  }
  sink.done();
  return true;
}

void dashboard_events(ServerState& state, const std::shared_ptr<std::atomic<int>>& n_streams,
                      const httplib::Request& req, httplib::Response& res) {
  const Backend* b = state.backend.load();
  if (!b) return send_error(res, unavailable("the model is loading; retry shortly", 1));
  const std::optional<int> interval = DashboardFeed::parse_interval(req.get_param_value("interval_ms"));
  if (!interval)
    return send_error(res, invalid_request(fmt::format("'interval_ms' must be an integer in [{}, {}]",
                                                       DashboardFeed::kMinIntervalMs, DashboardFeed::kMaxIntervalMs),
                                           "interval_ms"));
  if (n_streams->fetch_add(1) >= kMaxDashboardStreams) {
    n_streams->fetch_sub(1);
    return send_error(res, unavailable(fmt::format("too many dashboard streams open (at most {})", kMaxDashboardStreams), 5));
  }
  auto feed = std::make_shared<DashboardFeed>(*b->engine, *interval);
  auto probe = std::make_shared<ConnectionProbe>(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&state, feed, probe, n_streams](size_t /*offset*/, httplib::DataSink& sink) -> bool {
        try {
          return run_events(state, *feed, *n_streams, *probe, sink);
        } catch (const std::exception& e) {
          spdlog::error("dashboard events: {}", e.what());
          return false;
        }
      },
      [n_streams](bool /*success*/) { n_streams->fetch_sub(1); });
}

}  // namespace

bool is_webui_public_path(std::string_view path) {
  return path == "/" || (path.size() > 7 && path.substr(0, 7) == "/webui/");
}

void register_webui_routes(httplib::Server& http, ServerState& state) {
  auto page = std::make_shared<Page>(make_page(state));
  auto n_streams = std::make_shared<std::atomic<int>>(0);
  http.Get("/", [page](const httplib::Request& req, httplib::Response& res) {
    send_file(req, res, page->body, "text/html; charset=utf-8", page->etag);
  });
  http.Get(R"(/webui/(.+))", [](const httplib::Request& req, httplib::Response& res) {
    const std::string rel = req.matches[1];
    const WebAsset* a = rel == "index.html" ? nullptr : find_web_asset(rel);
    if (!a) return send_error(res, not_found("no web page file " + req.path));
    send_file(req, res, a->body, a->content_type, std::string(a->etag));
  });
  http.Get("/v1/dashboard/events", [&state, n_streams](const httplib::Request& req, httplib::Response& res) {
    dashboard_events(state, n_streams, req, res);
  });
}

}  // namespace ubatch::server
