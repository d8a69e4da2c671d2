// The web page and its dashboard event stream on a real server (tiny reference model): GET /
// and every embedded file with their headers, ETags, the API key rules (the page's files are
// public, the event stream is not), --no-webui, the snapshot stream's fields and step records
// against the engine's counters, interval validation, the cap on open streams. The browser
// test (tests/python/test_webui_browser.py, run by test_server_webui_browser.cpp) drives the
// page itself.
#include "test_server_fixture.h"

#include <atomic>

#include "server/dashboard.h"
#include "server/routes_webui.h"
#include "server/webui_assets.h"

namespace ubatch::test {
namespace {

std::string header(const Reply& r, const std::string& name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? "" : it->second;
}

// Reads `n` snapshot events from GET /v1/dashboard/events, then closes the connection.
// Each event must be "event: snapshot\ndata: <JSON>\n\n" (after the "retry:" preamble).
struct Events {
  int status = -1;
  std::vector<json> snapshots;
  std::string raw;
};

Events read_events(int port, int n, const HttpHeaders& headers = {}, const std::string& query = "?interval_ms=100") {
  Events ev;
  std::string pending;
  ev.status = get_stream(port, "/v1/dashboard/events" + query, headers, [&](int status, std::string_view data) {
                ev.raw.append(data);
                if (status != 200) return true;  // an error's body: read it whole
                pending.append(data);
                for (size_t end = pending.find("\n\n"); end != std::string::npos; end = pending.find("\n\n")) {
                  const std::string block = pending.substr(0, end);
                  pending.erase(0, end + 2);
                  if (block.rfind("retry:", 0) == 0) continue;
                  static const std::string kPrefix = "event: snapshot\ndata: ";
                  if (block.rfind(kPrefix, 0) != 0) {
                    ADD_FAILURE() << "not a snapshot event: " << block.substr(0, 120);
                    return false;
                  }
                  json j = json::parse(block.substr(kPrefix.size()), nullptr, false);
                  if (j.is_discarded()) {
                    ADD_FAILURE() << "snapshot is not JSON: " << block.substr(0, 120);
                    return false;
                  }
                  ev.snapshots.push_back(std::move(j));
                }
                return static_cast<int>(ev.snapshots.size()) < n;
              }).status;
  return ev;
}

TEST(ServerWebUi, ThePageAndEveryEmbeddedFileAreServedWithTheirTypesAndHeaders) {
  UBATCH_REQUIRE_TINY_MODEL();
  auto s = serve_model(tiny_model());
  ASSERT_TRUE(s);
  const Reply page = get(s->port, "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(header(page, "Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("data-auth=\"none\""), std::string::npos);
  EXPECT_EQ(page.body.find("__UBATCH_AUTH__"), std::string::npos);
  EXPECT_NE(page.body.find("/webui/js/main.js"), std::string::npos);
  // Nothing from other origins: the page works offline.
  EXPECT_NE(header(page, "Content-Security-Policy").find("default-src 'none'"), std::string::npos);
  EXPECT_NE(header(page, "Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(header(page, "X-Content-Type-Options"), "nosniff");
  for (const char* scheme : {"http://", "https://"})
    for (const server::WebAsset& a : server::web_assets()) {
      const std::string body(a.body);
      if (a.path == "favicon.svg") continue;  // only the SVG namespace URI
      EXPECT_EQ(body.find(std::string("src=\"") + scheme), std::string::npos) << a.path;
      EXPECT_EQ(body.find(std::string("fetch(\"") + scheme), std::string::npos) << a.path;
    }

  // Revalidation: the same ETag answers 304 with no body.
  const std::string etag = header(page, "ETag");
  ASSERT_FALSE(etag.empty());
  const Reply again = get(s->port, "/", {{"If-None-Match", etag}});
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());

  ASSERT_GE(server::web_assets().size(), 5u);
  for (const server::WebAsset& a : server::web_assets()) {
    if (a.path == "index.html") continue;
    const Reply r = get(s->port, "/webui/" + std::string(a.path));
    EXPECT_EQ(r.status, 200) << a.path;
    EXPECT_EQ(r.body, std::string(a.body)) << a.path;
    EXPECT_EQ(header(r, "Content-Type"), std::string(a.content_type)) << a.path;
    EXPECT_EQ(header(r, "ETag"), std::string(a.etag)) << a.path;
  }
  EXPECT_EQ(header(get(s->port, "/webui/js/main.js"), "Content-Type"), "text/javascript; charset=utf-8");
  const Reply missing = get(s->port, "/webui/js/nope.js");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.parsed()["error"]["type"], "not_found_error");
  EXPECT_EQ(get(s->port, "/webui/index.html").status, 404);  // only at /
  EXPECT_NE(get(s->port, "/webui/../CMakeLists.txt").status, 200);
  EXPECT_EQ(get(s->port, "/webui/").status, 404);
}

TEST(ServerWebUi, WithAnApiKeyThePageIsPublicAndTheEventStreamIsNot) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.server.api_key = "webui-key";
  auto s = serve_model(tiny_model(), o);
  ASSERT_TRUE(s);
  const Reply page = get(s->port, "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("data-auth=\"required\""), std::string::npos);
  EXPECT_EQ(get(s->port, "/webui/style.css").status, 200);
  // The ETag differs from the keyless page's: a cached copy never carries the wrong mode.
  EXPECT_NE(header(page, "ETag").find("-k"), std::string::npos);

  EXPECT_EQ(read_events(s->port, 1).status, 401);
  EXPECT_EQ(read_events(s->port, 1, {{"Authorization", "Bearer wrong"}}).status, 401);
  const Events ok = read_events(s->port, 1, {{"Authorization", "Bearer webui-key"}});
  EXPECT_EQ(ok.status, 200);
  ASSERT_EQ(ok.snapshots.size(), 1u);
  EXPECT_EQ(ok.snapshots[0]["settings"]["api_key_required"], true);
  // Other routes keep needing the key.
  EXPECT_EQ(get(s->port, "/metrics").status, 401);
  EXPECT_EQ(get(s->port, "/v1/models").status, 401);
}

TEST(ServerWebUi, NoWebuiLeavesThePageAndTheStreamUnrouted) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.server.webui = false;
  o.server.api_key = "k";
  auto s = serve_model(tiny_model(), o);
  ASSERT_TRUE(s);
  // With the page off, its paths are not public either: the key is asked first.
  EXPECT_EQ(get(s->port, "/").status, 401);
  EXPECT_EQ(get(s->port, "/", {{"Authorization", "Bearer k"}}).status, 404);
  EXPECT_EQ(get(s->port, "/webui/js/main.js", {{"Authorization", "Bearer k"}}).status, 404);
  EXPECT_EQ(read_events(s->port, 1, {{"Authorization", "Bearer k"}}).status, 404);
}

TEST(ServerWebUi, SnapshotsCarryEveryStepAndTheEngineCounters) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.engine.n_parallel = 4;
  o.engine.n_batch = 64;
  auto s = serve_model(tiny_model(), o);
  ASSERT_TRUE(s);
  // Some work first: the first snapshot carries the last minute of steps.
  for (int i = 0; i < 3; ++i) {
    const Reply r = post(s->port, "/v1/completions",
                         json{{"prompt", "Once upon a time " + std::to_string(i)}, {"max_tokens", 12},
                              {"ignore_eos", true}, {"temperature", 0}}
                             .dump());
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // A response can arrive before the engine thread has finished its step (gauges, step record).
  for (int i = 0; i < 2000; ++i) {
    const sched::MetricsSnapshot now = s->engine->metrics();
    if (now.kv_blocks_used == 0 && s->engine->step_log().n_steps() == now.steps) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const Events ev = read_events(s->port, 3);
  ASSERT_EQ(ev.status, 200);
  ASSERT_EQ(ev.snapshots.size(), 3u);
  EXPECT_EQ(ev.raw.rfind("retry: 2000\n\n", 0), 0u);
  const json& first = ev.snapshots[0];
  const sched::MetricsSnapshot m = s->engine->metrics();
  for (const char* key : {"now_ms", "interval_ms", "settings", "steps", "sequences", "kv", "prefix_cache",
                          "throughput", "latency", "requests_total", "preemptions", "rejections", "deadline_misses",
                          "tokens", "requests", "http", "engine", "feed"})
    EXPECT_TRUE(first.contains(key)) << key;
  EXPECT_EQ(first["interval_ms"], 100);
  EXPECT_EQ(first["settings"]["policy"], "ubatch");
  EXPECT_EQ(first["settings"]["n_batch"], 64);
  EXPECT_EQ(first["settings"]["n_parallel"], 4);
  EXPECT_EQ(first["settings"]["model"], "test-model");
  EXPECT_EQ(first["settings"]["kv_blocks"], first["kv"]["blocks"]);
  EXPECT_EQ(first["requests_total"]["finished"], 3);
  EXPECT_EQ(first["tokens"]["generated"], 36);
  EXPECT_EQ(first["latency"]["ttft_ms"]["count"], 3);
  EXPECT_EQ(first["latency"]["itl_ms"]["count"], 3 * 11);
  EXPECT_GT(first["latency"]["ttft_ms"]["p99"].get<double>(), 0.0);
  EXPECT_EQ(first["http"]["dashboard_streams"], 1);
  EXPECT_EQ(first["kv"]["used"], 0);  // idle
  EXPECT_EQ(first["kv"]["used"].get<int64_t>() + first["kv"]["cached"].get<int64_t>() + first["kv"]["free"].get<int64_t>(),
            first["kv"]["blocks"].get<int64_t>());

  // Every step the engine ran, each within its budget; decode + prefill = the step tokens.
  const json& steps = first["steps"];
  const std::vector<std::string> fields = steps["fields"];
  ASSERT_EQ(fields, (std::vector<std::string>{"end_ms", "decode_ms", "decode", "prefill", "sampled", "budget", "running",
                                              "waiting", "draft"}));
  ASSERT_EQ(steps["rows"].size(), m.steps);
  EXPECT_EQ(steps["first"], 1);
  EXPECT_EQ(steps["last"], m.steps);
  EXPECT_EQ(steps["gap"], false);
  int64_t tokens = 0, sampled = 0, prefill = 0;
  for (const json& row : steps["rows"]) {
    EXPECT_LE(row[2].get<int64_t>() + row[3].get<int64_t>(), row[5].get<int64_t>());
    EXPECT_EQ(row[5], 64);
    EXPECT_LE(row[0].get<double>(), first["now_ms"].get<double>());
    tokens += row[2].get<int64_t>() + row[3].get<int64_t>();
    prefill += row[3].get<int64_t>();
    sampled += row[4].get<int64_t>();
  }
  EXPECT_EQ(tokens, static_cast<int64_t>(m.step_tokens));
  EXPECT_EQ(prefill, static_cast<int64_t>(m.prompt_tokens));
  EXPECT_EQ(sampled, 36);
  // Later snapshots carry only new steps: none while idle.
  EXPECT_TRUE(ev.snapshots[1]["steps"]["rows"].empty());
  EXPECT_TRUE(ev.snapshots[2]["steps"]["first"].is_null());
  EXPECT_GT(ev.snapshots[2]["now_ms"].get<double>(), first["now_ms"].get<double>());
  EXPECT_EQ(first["feed"]["events"], 0);
  EXPECT_EQ(ev.snapshots[2]["feed"]["events"], 2);
  EXPECT_GT(ev.snapshots[2]["feed"]["build_ms"].get<double>(), 0.0);
}

TEST(ServerWebUi, TheRequestTableShowsRunningAndWaitingRequests) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o;
  o.engine.n_parallel = 2;
  o.engine.n_batch = 32;
  o.engine.aging_ms = 0;       // the waiting two stay waiting,
  o.engine.preempt_margin = 0;  // and nobody is preempted for priority
  o.n_ctx = 8192;
  auto s = serve_model(tiny_model(), o);
  ASSERT_TRUE(s);
  // Four long requests, two slots: two decode and two wait until they are cancelled.
  std::vector<sched::Engine::Submitted> subs;
  for (int i = 0; i < 4; ++i) {
    sched::Request r;
    r.prompt_text = "Request " + std::to_string(i);
    r.max_tokens = 3000;
    r.ignore_eos = true;
    r.priority = i == 3 ? 5 : 0;
    r.deadline_ms = i == 2 ? 600000 : 0;
    r.deadline_policy = sched::DeadlinePolicy::BestEffort;
    subs.push_back(s->engine->submit(r));
    ASSERT_TRUE(subs.back().ok()) << subs.back().error_message;
  }
  json table;
  for (int attempt = 0; attempt < 200; ++attempt) {
    const Events ev = read_events(s->port, 2);
    ASSERT_EQ(ev.snapshots.size(), 2u);
    table = ev.snapshots[1]["requests"];
    int decoding = 0, waiting = 0;
    for (const json& r : table["rows"]) {
      decoding += r["state"] == "decoding";
      waiting += r["state"] == "waiting";
    }
    if (decoding == 2 && waiting == 2) break;
  }
  ASSERT_EQ(table["total"], 4) << table.dump();
  ASSERT_EQ(table["rows"].size(), 4u);
  std::map<uint64_t, json> by_id;
  for (const json& r : table["rows"]) by_id[r["id"].get<uint64_t>()] = r;
  for (const auto& sub : subs) ASSERT_TRUE(by_id.count(sub.stream->id()));
  EXPECT_EQ(by_id[subs[3].stream->id()]["priority"], 5);
  EXPECT_EQ(by_id[subs[0].stream->id()]["priority"], 0);
  const json& with_deadline = by_id[subs[2].stream->id()];
  EXPECT_EQ(with_deadline["deadline_ms"], 600000);
  EXPECT_EQ(with_deadline["deadline_policy"], "best_effort");
  EXPECT_GT(with_deadline["deadline_left_ms"].get<double>(), 0.0);
  int decoding = 0, waiting = 0;
  for (const auto& [id, r] : by_id) {
    EXPECT_GT(r["prompt_tokens"].get<int>(), 0);
    EXPECT_EQ(r["max_tokens"], 3000);
    EXPECT_GE(r["age_ms"].get<double>(), 0.0);
    if (r["state"] == "decoding") {
      ++decoding;
      EXPECT_GT(r["generated_tokens"].get<int>(), 0);
      EXPECT_TRUE(r["ttft_ms"].is_number());
    } else if (r["state"] == "waiting") {
      ++waiting;
      EXPECT_EQ(r["generated_tokens"], 0);
      EXPECT_TRUE(r["ttft_ms"].is_null());
    }
  }
  EXPECT_EQ(decoding, 2);
  EXPECT_EQ(waiting, 2);
  for (const auto& sub : subs) s->engine->cancel(sub.stream->id());
}

TEST(ServerWebUi, IntervalIsValidatedAndOpenStreamsAreCapped) {
  UBATCH_REQUIRE_TINY_MODEL();
  auto s = serve_model(tiny_model());
  ASSERT_TRUE(s);
  for (const char* bad : {"?interval_ms=5", "?interval_ms=20000", "?interval_ms=abc", "?interval_ms=-100",
                          "?interval_ms=1e3"}) {
    const Events ev = read_events(s->port, 1, {}, bad);
    EXPECT_EQ(ev.status, 400) << bad;
    EXPECT_NE(ev.raw.find("interval_ms"), std::string::npos) << ev.raw;
  }
  EXPECT_EQ(read_events(s->port, 1, {}, "").status, 200);
  EXPECT_EQ(read_events(s->port, 1, {}, "").snapshots[0]["interval_ms"], server::DashboardFeed::kDefaultIntervalMs);

  // kMaxDashboardStreams readers that stay connected, then one more is refused.
  std::atomic<bool> release{false};
  std::atomic<int> connected{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < server::kMaxDashboardStreams; ++i)
    readers.emplace_back([&] {
      // Streams closed earlier in this test are counted out when the server notices: a
      // reader refused meanwhile tries again.
      for (int attempt = 0; attempt < 200 && !release.load(); ++attempt) {
        bool counted = false;
        get_stream(s->port, "/v1/dashboard/events?interval_ms=100", {}, [&](int status, std::string_view) {
          if (status == 200 && !counted) {
            connected++;
            counted = true;
          }
          return status == 200 && !release.load();
        });
        if (counted) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  for (int i = 0; i < 1200 && connected.load() < server::kMaxDashboardStreams; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_EQ(connected.load(), server::kMaxDashboardStreams);
  const Events refused = read_events(s->port, 1);
  EXPECT_EQ(refused.status, 503);
  release = true;
  for (auto& t : readers) t.join();
  // Closed streams are counted out (within a poll of the server noticing).
  bool back = false;
  for (int i = 0; i < 200 && !back; ++i) {
    const Events ev = read_events(s->port, 1);
    back = ev.status == 200 && ev.snapshots.size() == 1 && ev.snapshots[0]["http"]["dashboard_streams"] == 1;
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(back) << "closed dashboard streams still counted";
}

TEST(ServerWebUi, StoppingTheServerEndsOpenEventStreams) {
  UBATCH_REQUIRE_TINY_MODEL();
  auto s = serve_model(tiny_model());
  ASSERT_TRUE(s);
  std::atomic<int> snapshots{0};
  std::atomic<bool> returned{false};
  std::thread reader([&] {
    get_stream(s->port, "/v1/dashboard/events?interval_ms=100", {}, [&](int, std::string_view data) {
      if (data.find("event: snapshot") != std::string_view::npos) ++snapshots;
      return true;  // never stops by itself
    });
    returned = true;
  });
  for (int i = 0; i < 1200 && snapshots.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_GE(snapshots.load(), 2);
  EXPECT_FALSE(returned.load());
  s->http->stop();  // returns once the stream's handler has seen the stop flag
  reader.join();
  EXPECT_TRUE(returned.load());
}

// A draining server (SIGTERM with --shutdown-timeout) waits for the requests in flight; an
// event stream never ends by itself, so draining ends it at once, and refuses new ones.
TEST(ServerWebUi, DrainingEndsOpenEventStreamsAndRefusesNewOnes) {
  UBATCH_REQUIRE_TINY_MODEL();
  auto s = serve_model(tiny_model());
  ASSERT_TRUE(s);
  std::atomic<int> snapshots{0};
  std::atomic<bool> returned{false};
  std::thread reader([&] {
    get_stream(s->port, "/v1/dashboard/events?interval_ms=5000", {}, [&](int, std::string_view data) {
      if (data.find("event: snapshot") != std::string_view::npos) ++snapshots;
      return true;  // never stops by itself
    });
    returned = true;
  });
  for (int i = 0; i < 1200 && snapshots.load() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_GE(snapshots.load(), 1);
  EXPECT_EQ(s->http->requests_in_flight(), 1);
  s->http->drain();
  // Ends long before the stream's next snapshot (5 s away) would have been due.
  for (int i = 0; i < 80 && !returned.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_TRUE(returned.load()) << "a draining server kept the event stream open";
  EXPECT_TRUE(s->http->wait_idle(std::chrono::seconds(10)));
  const Events late = read_events(s->port, 1);
  EXPECT_EQ(late.status, 503) << late.raw;
  s->http->stop();  // ends the stream in any case, so that the reader returns
  reader.join();
}

TEST(DashboardFeed, ParsesTheIntervalParameter) {
  using server::DashboardFeed;
  EXPECT_EQ(DashboardFeed::parse_interval(""), DashboardFeed::kDefaultIntervalMs);
  EXPECT_EQ(DashboardFeed::parse_interval("100"), 100);
  EXPECT_EQ(DashboardFeed::parse_interval("10000"), 10000);
  for (const char* bad : {"99", "10001", "x", "-1", " 200", "200 ", "1e3", "9999999999"})
    EXPECT_FALSE(DashboardFeed::parse_interval(bad).has_value()) << bad;
}

}  // namespace
}  // namespace ubatch::test
