// GET /health as a load balancer's check uses it (deploy/haproxy/haproxy.cfg): 200 while the
// replica can take a request, 503 "saturated" with the reason and Retry-After while its
// admission queue is full (the next request would be refused with queue_full), 200 again once
// there is room. On the default model, so that a running request holds its slot long enough.
#include "test_server_fixture.h"

namespace ubatch::test {
namespace {

// A streaming request held open on a raw connection; closing it cancels the request.
struct HeldStream {
  RawConnection conn;
  explicit HeldStream(int port) : conn(port) {
    EXPECT_TRUE(conn.ok());
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 3000}, {"ignore_eos", true},
                       {"temperature", 0}, {"stream", true}};
    EXPECT_TRUE(conn.send_post("/v1/completions", body.dump()));
  }
};

// Polls /health until it answers `status` (at most 600 × 50 ms); returns the last reply.
Reply wait_health(int port, int status) {
  Reply r;
  for (int i = 0; i < 600; ++i) {
    r = get(port, "/health");
    if (r.status == status) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return r;
}

TEST(ServerHealth, SaturatedWhileTheQueueIsFullThenOkAgain) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  ServeOptions o;
  o.engine.n_parallel = 1;
  o.engine.max_queue = 1;
  o.engine.n_batch = 64;
  o.engine.aging_ms = 0;  // the waiting request never outranks the running one
  o.n_ctx = 4096;
  o.n_threads = 2;
  std::unique_ptr<ServedModel> s = serve_model(default_model(), o);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(get(s->port, "/health").status, 200);

  // One request runs (its first frames arrived), a second waits: the queue (1) is full.
  auto running = std::make_unique<HeldStream>(s->port);
  ASSERT_NE(running->conn.read_until("\n\n", 2).find("200 OK"), std::string::npos);
  auto waiting = std::make_unique<HeldStream>(s->port);
  const Reply saturated = wait_health(s->port, 503);
  ASSERT_EQ(saturated.status, 503) << saturated.body;
  const json body = saturated.parsed();
  EXPECT_EQ(body["status"], "saturated") << saturated.body;
  EXPECT_EQ(body["error"]["code"], "saturated") << saturated.body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find("queue is full"), std::string::npos) << saturated.body;
  EXPECT_EQ(saturated.headers.count("Retry-After"), 1u);
  EXPECT_EQ(get(s->port, "/v1/health").status, 503);

  // What the check announced: the next request is refused.
  const Reply refused = post(s->port, "/v1/completions", R"({"prompt": "a", "max_tokens": 1})");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.parsed()["error"]["code"], "queue_full") << refused.body;

  // The running request is cancelled, the waiting one takes its slot: room again.
  running.reset();
  const Reply ok = wait_health(s->port, 200);
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.parsed()["status"], "ok");
  waiting.reset();
  wait_metrics(s->port, [](std::map<std::string, double>& m) {
    return m["ubatch_requests_running"] == 0 && m["ubatch_requests_queued"] == 0;
  });
}

}  // namespace
}  // namespace ubatch::test
