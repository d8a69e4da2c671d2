// The engine on a real (tiny) model: many concurrent requests with mixed lengths,
// priorities and cancellations all end with output or a clear error; greedy outputs equal
// the same request run alone; afterwards no KV block is in use.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "context/context.h"
#include "sched/engine.h"
#include "support.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::sched {
namespace {

struct Fixture {
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Context> ctx;
};

Fixture load(const std::string& rel, int32_t n_ctx) {
  Fixture f;
  Result<std::unique_ptr<gguf::File>> file = gguf::File::open(test::reference_path(rel));
  EXPECT_TRUE(file.is_ok());
  f.file = std::shared_ptr<const gguf::File>(std::move(file.value()));
  Result<std::unique_ptr<Model>> m = Model::load(f.file);
  EXPECT_TRUE(m.is_ok());
  f.model = std::shared_ptr<Model>(std::move(m.value()));
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::from_gguf(*f.file);
  EXPECT_TRUE(t.is_ok());
  f.tok = std::move(t.value());
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_batch = 256;
  p.n_ubatch = 64;
  p.n_threads = 2;
  Result<std::unique_ptr<Context>> c = Context::create(f.model, p);
  EXPECT_TRUE(c.is_ok());
  f.ctx = std::move(c.value());
  return f;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::Error;
  std::string error;
  bool done = false;
  Usage usage;
};

Outcome collect(Stream& s, Engine* engine = nullptr, int cancel_after = -1) {
  Outcome o;
  Event e;
  int n = 0;
  while (!o.done) {
    if (!s.next(e, std::chrono::seconds(60))) {
      ADD_FAILURE() << "request " << s.id() << " hung";
      break;
    }
    switch (e.kind) {
      case Event::Kind::Token:
        if (e.token >= 0) o.tokens.push_back(e.token);
        o.text += e.text;
        if (engine && ++n == cancel_after) engine->cancel(s.id());
        break;
      case Event::Kind::Finish: o.finish = e.finish; o.error = e.error; break;
      case Event::Kind::Done: o.done = true; o.usage = e.usage; break;
    }
  }
  return o;
}

Request make_random_request(std::mt19937& rng, int32_t n_vocab) {
  Request r;
  const int n_prompt = 1 + static_cast<int>(rng() % 60);
  r.prompt.push_back(1);
  for (int i = 1; i < n_prompt; ++i) r.prompt.push_back(3 + static_cast<int32_t>(rng() % (n_vocab - 3)));
  r.max_tokens = 1 + static_cast<int32_t>(rng() % 40);
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.priority = static_cast<int32_t>(rng() % 3);
  return r;
}

// The event-driven side of a Stream: the notifier fires on every push (and at once for
// events already queued), try_next never waits, and the events come in order.
TEST(Stream, NotifierAndTryNext) {
  Stream s(7);
  Event e;
  EXPECT_FALSE(s.try_next(e));
  Event token;
  token.text = "a";
  s.push(token);  // before any notifier
  std::atomic<int> calls{0};
  s.set_notifier([&] { calls++; });
  EXPECT_EQ(calls, 1);  // one event was already queued
  Event done;
  done.kind = Event::Kind::Done;
  std::thread engine([&] { s.push(done); });
  engine.join();
  EXPECT_EQ(calls, 2);
  ASSERT_TRUE(s.try_next(e));
  EXPECT_EQ(e.text, "a");
  EXPECT_FALSE(s.finished());
  ASSERT_TRUE(s.try_next(e));
  EXPECT_EQ(e.kind, Event::Kind::Done);
  EXPECT_TRUE(s.finished());
  EXPECT_FALSE(s.try_next(e));
  s.set_notifier(nullptr);
  s.push(token);
  EXPECT_EQ(calls, 2);  // removed: not called
}

// An engine request drained only through the notifier (as the HTTP server does): every
// event arrives, the last one is Done.
TEST(Engine, StreamNotifierDeliversEveryEvent) {
  if (!std::filesystem::exists(test::reference_path("models/tiny-llama-q8_0.gguf")))
    GTEST_SKIP() << "tiny reference model not found";
  Fixture f = load("models/tiny-llama-q8_0.gguf", 512);
  EngineConfig cfg;
  cfg.n_parallel = 2;
  cfg.n_batch = 64;
  Engine engine(*f.ctx, *f.tok, cfg);
  Request r;
  r.prompt_text = "hello";
  r.max_tokens = 12;
  r.ignore_eos = true;
  Engine::Submitted sub = engine.submit(r);
  ASSERT_TRUE(sub.ok());
  std::mutex m;
  std::condition_variable cv;
  int wakes = 0;
  sub.stream->set_notifier([&] {
    std::lock_guard<std::mutex> lock(m);
    ++wakes;
    cv.notify_all();
  });
  int tokens = 0;
  bool done = false;
  Event last;
  while (!done) {
    {
      std::unique_lock<std::mutex> lock(m);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return wakes > 0; }));
      wakes = 0;
    }
    Event e;
    while (sub.stream->try_next(e)) {
      tokens += e.kind == Event::Kind::Token;
      done = e.kind == Event::Kind::Done;
      last = e;
    }
  }
  EXPECT_GT(tokens, 0);
  EXPECT_EQ(last.usage.completion_tokens, 12);
  sub.stream->set_notifier(nullptr);
}

TEST(Engine, SixtyFourConcurrentRequestsMatchSoloRuns) {
  UBATCH_REQUIRE_REFERENCE();
  Fixture f = load("models/tiny-llama-q8_0.gguf", 2048);
  const int32_t n_vocab = f.ctx->n_vocab();
  std::mt19937 rng(2024);
  std::vector<Request> reqs;
  for (int i = 0; i < 64; ++i) reqs.push_back(make_random_request(rng, n_vocab));

  std::vector<Outcome> solo;
  {
    EngineConfig cfg;
    cfg.n_parallel = 1;
    cfg.n_batch = 64;
    Engine engine(*f.ctx, *f.tok, cfg);
    for (const Request& r : reqs) {
      Engine::Submitted s = engine.submit(r);
      ASSERT_TRUE(s.ok()) << s.error_message;
      solo.push_back(collect(*s.stream));
    }
  }
  f.ctx->kv().clear();

  EngineConfig cfg;
  cfg.n_parallel = 8;
  cfg.n_batch = 96;
  Engine engine(*f.ctx, *f.tok, cfg);
  std::vector<std::thread> clients;
  std::vector<Outcome> got(reqs.size());
  std::vector<int> cancel_after(reqs.size(), -1);
  for (size_t i = 0; i < reqs.size(); i += 7) cancel_after[i] = 2;  // some clients cancel
  for (size_t i = 0; i < reqs.size(); ++i) {
    clients.emplace_back([&, i] {
      Engine::Submitted s = engine.submit(reqs[i]);
      if (!s.ok()) {
        got[i].error = s.error_message;
        return;
      }
      got[i] = collect(*s.stream, &engine, cancel_after[i]);
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(got[i].done) << got[i].error;
    if (cancel_after[i] > 0 && got[i].finish == FinishReason::Cancelled) {
      // A cancelled request's output is a prefix of the solo output.
      ASSERT_LE(got[i].tokens.size(), solo[i].tokens.size());
      EXPECT_TRUE(std::equal(got[i].tokens.begin(), got[i].tokens.end(), solo[i].tokens.begin()));
    } else {
      EXPECT_EQ(got[i].finish, FinishReason::Length);
      EXPECT_EQ(got[i].tokens, solo[i].tokens);
      EXPECT_EQ(got[i].text, solo[i].text);
      EXPECT_EQ(got[i].usage.completion_tokens, reqs[i].max_tokens);
    }
  }
  // Let the engine finish its step, then nothing may hold KV.
  for (int i = 0; i < 100 && engine.metrics().kv_blocks_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const MetricsSnapshot m = engine.metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.requests_finished, 64u);
}

TEST(Engine, PriorityPreemptionKeepsGreedyAndSeededOutputs) {
  // Long priority-0 requests (greedy and seeded sampling) are displaced again and again by
  // priority-10 arrivals; every request still produces exactly what it produces alone.
  UBATCH_REQUIRE_REFERENCE();
  Fixture f = load("models/tiny-llama-q8_0.gguf", 2048);
  const int32_t n_vocab = f.ctx->n_vocab();
  std::mt19937 rng(7);
  std::vector<Request> longs, urgent;
  for (int i = 0; i < 4; ++i) {
    Request r = make_random_request(rng, n_vocab);
    r.priority = 0;
    r.max_tokens = 200;
    if (i % 2 == 1) {  // seeded sampling
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 0;
      r.sampling.top_p = 1.0f;
      r.sampling.min_p = 0.0f;
      r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    }
    longs.push_back(r);
  }
  for (int i = 0; i < 6; ++i) {
    Request r = make_random_request(rng, n_vocab);
    r.priority = 10;
    r.max_tokens = 12;
    urgent.push_back(r);
  }
  auto solo = [&](const Request& r) {
    EngineConfig cfg;
    cfg.n_parallel = 1;
    cfg.n_batch = 64;
    Engine engine(*f.ctx, *f.tok, cfg);
    Engine::Submitted s = engine.submit(r);
    EXPECT_TRUE(s.ok()) << s.error_message;
    return s.ok() ? collect(*s.stream) : Outcome{};
  };
  std::vector<Outcome> want_long, want_urgent;
  for (const Request& r : longs) want_long.push_back(solo(r));
  for (const Request& r : urgent) want_urgent.push_back(solo(r));
  f.ctx->kv().clear();

  EngineConfig cfg;
  cfg.n_parallel = 2;
  cfg.n_batch = 64;
  cfg.preempt_min_run_ms = 0;  // displace as often as possible
  Engine engine(*f.ctx, *f.tok, cfg);
  std::vector<std::shared_ptr<Stream>> long_streams;
  for (const Request& r : longs) {
    Engine::Submitted s = engine.submit(r);
    ASSERT_TRUE(s.ok()) << s.error_message;
    long_streams.push_back(s.stream);
  }
  // Each urgent request arrives while both slots are busy with long ones: after a few more
  // tokens were generated, so the engine has refilled the slot the previous one left.
  auto wait_for_tokens = [&](uint64_t n) {
    for (int k = 0; k < 5000 && engine.metrics().generated_tokens < n; ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  for (size_t i = 0; i < urgent.size(); ++i) {
    wait_for_tokens(engine.metrics().generated_tokens + 6);
    Engine::Submitted s = engine.submit(urgent[i]);
    ASSERT_TRUE(s.ok()) << s.error_message;
    const Outcome o = collect(*s.stream);
    EXPECT_EQ(o.tokens, want_urgent[i].tokens) << "urgent " << i;
  }
  for (size_t i = 0; i < longs.size(); ++i) {
    const Outcome o = collect(*long_streams[i]);
    EXPECT_EQ(o.finish, FinishReason::Length);
    EXPECT_EQ(o.tokens, want_long[i].tokens) << "long request " << i;
    EXPECT_EQ(o.text, want_long[i].text) << "long request " << i;
  }
  // Every urgent request found both slots taken by long ones and displaced one.
  EXPECT_GE(engine.metrics().preemptions_priority, urgent.size());
}

TEST(Engine, RejectsWithClearErrors) {
  UBATCH_REQUIRE_REFERENCE();
  Fixture f = load("models/tiny-llama-q8_0.gguf", 256);
  EngineConfig cfg;
  cfg.n_parallel = 2;
  cfg.n_batch = 64;
  cfg.max_queue = 3;
  Engine engine(*f.ctx, *f.tok, cfg);
  Request r;
  Engine::Submitted s = engine.submit(r);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.error_code, SubmitError::Code::Invalid);
  r.prompt = {1, 2, 3};
  r.max_tokens = 10000;
  s = engine.submit(r);
  EXPECT_EQ(s.error_code, SubmitError::Code::TooLong);
  EXPECT_NE(s.error_message.find("never fit"), std::string::npos) << s.error_message;
  r.max_tokens = 5;
  r.prompt = {1, 99999};
  s = engine.submit(r);
  EXPECT_EQ(s.error_code, SubmitError::Code::Invalid);
  // Queue full: flood with long requests; some are rejected at once with QueueFull.
  r.prompt = {1, 5, 6, 7};
  r.max_tokens = 200;
  r.ignore_eos = true;
  std::vector<std::shared_ptr<Stream>> streams;
  int full = 0;
  for (int i = 0; i < 20; ++i) {
    Engine::Submitted x = engine.submit(r);
    if (x.ok()) streams.push_back(x.stream);
    else if (x.error_code == SubmitError::Code::QueueFull) ++full;
  }
  EXPECT_GT(full, 0);
  for (auto& st : streams) engine.cancel(st->id());
  for (auto& st : streams) EXPECT_TRUE(collect(*st).done);
}

TEST(Engine, TextPromptAndSamplesWithStop) {
  UBATCH_REQUIRE_REFERENCE();
  Fixture f = load("models/tiny-llama-f32.gguf", 1024);
  EngineConfig cfg;
  cfg.n_parallel = 2;
  cfg.n_batch = 64;
  Engine engine(*f.ctx, *f.tok, cfg);
  Request r;
  r.prompt_text = "hello world";
  r.max_tokens = 8;
  r.n = 3;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  Engine::Submitted s = engine.submit(r);
  ASSERT_TRUE(s.ok()) << s.error_message;
  Outcome o = collect(*s.stream);
  EXPECT_TRUE(o.done);
  EXPECT_EQ(o.usage.completion_tokens, 24);
  EXPECT_GT(o.usage.prompt_tokens, 1);
}

}  // namespace
}  // namespace ubatch::sched
