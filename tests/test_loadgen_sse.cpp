// The SSE parser (loadgen/sse.h) on tricky framing, OpenAI chunk parsing, and the per-request
// stream collector (timings, token counts, errors) on recorded bytes.
#include <gtest/gtest.h>

#include <random>

#include "loadgen/load_client.h"
#include "loadgen/sse.h"

namespace ubatch::bench {

using namespace ::ubatch::loadgen;
namespace {

std::vector<SseEvent> parse_all(const std::vector<std::string>& reads, SseParser* keep = nullptr) {
  SseParser local;
  SseParser& p = keep ? *keep : local;
  std::vector<SseEvent> out;
  for (const std::string& r : reads) p.feed(r, out);
  return out;
}

TEST(BenchSse, OneEventPerRead) {
  auto ev = parse_all({"data: hello\n\n", "data: world\n\n"});
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].data, "hello");
  EXPECT_EQ(ev[0].type, "message");
  EXPECT_EQ(ev[1].data, "world");
}

TEST(BenchSse, ManyEventsInOneRead) {
  auto ev = parse_all({"data: a\n\ndata: b\n\ndata: [DONE]\n\n"});
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].data, "a");
  EXPECT_EQ(ev[1].data, "b");
  EXPECT_TRUE(ev[2].is_done());
  EXPECT_FALSE(ev[1].is_done());
}

TEST(BenchSse, SplitAnywhereGivesTheSameEvents) {
  const std::string stream =
      "data: {\"choices\":[{\"text\":\"caf\xC3\xA9\"}]}\r\n\r\n"
      ": keep-alive comment\n\n"
      "event: update\ndata: line1\ndata: line2\nid: 7\n\n"
      "data:no-space\rdata:  two-spaces\r\r"
      "data: [DONE]\n\n";
  const std::vector<SseEvent> whole = parse_all({stream});
  ASSERT_EQ(whole.size(), 4u);
  EXPECT_EQ(whole[0].data, "{\"choices\":[{\"text\":\"caf\xC3\xA9\"}]}");
  EXPECT_EQ(whole[1].type, "update");
  EXPECT_EQ(whole[1].data, "line1\nline2");
  EXPECT_EQ(whole[1].id, "7");
  EXPECT_EQ(whole[2].data, "no-space\n two-spaces");  // only one leading space is dropped
  EXPECT_EQ(whole[2].type, "message");               // type resets after each event
  EXPECT_TRUE(whole[3].is_done());
  // Every split into two reads, then random splits into many reads (CRLF and the UTF-8
  // sequence included).
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    auto ev = parse_all({stream.substr(0, cut), stream.substr(cut)});
    ASSERT_EQ(ev.size(), whole.size()) << "cut at " << cut;
    for (size_t i = 0; i < ev.size(); ++i) {
      EXPECT_EQ(ev[i].data, whole[i].data) << "cut at " << cut;
      EXPECT_EQ(ev[i].type, whole[i].type) << "cut at " << cut;
    }
  }
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> reads;
    for (size_t p = 0; p < stream.size();) {
      const size_t n = std::uniform_int_distribution<size_t>(1, 7)(rng);
      reads.push_back(stream.substr(p, n));
      p += n;
    }
    auto ev = parse_all(reads);
    ASSERT_EQ(ev.size(), whole.size());
    for (size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i].data, whole[i].data);
  }
}

TEST(BenchSse, CrLfSplitAcrossReadsIsOneLineBreak) {
  // "\r" ends one read, "\n" starts the next: one line end, so the blank line that follows
  // dispatches exactly one event (not an extra empty-line dispatch in between).
  auto ev = parse_all({"data: x\r", "\n", "data: y\r", "\n\r\n"});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "x\ny");
}

TEST(BenchSse, ByteOrderMarkAndEdgeCases) {
  auto ev = parse_all({"\xEF\xBB", "\xBF", "data: after-bom\n\n"});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "after-bom");
  // Empty data field still makes an event; events without data do not.
  ev = parse_all({"data\n\nevent: ping\n\ndata:\n\n"});
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].data, "");
  EXPECT_EQ(ev[1].data, "");
  // Unknown fields and retry are ignored; colons inside the value stay.
  ev = parse_all({"retry: 100\nfoo: bar\ndata: a:b: c\n\n"});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "a:b: c");
}

TEST(BenchSse, CutOffEventIsNotDispatched) {
  SseParser p;
  auto ev = parse_all({"data: complete\n\ndata: partial"}, &p);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(p.has_partial());
  SseParser q;
  parse_all({"data: complete\n\ndata: partial\n"}, &q);  // line complete, event not
  EXPECT_TRUE(q.has_partial());
  SseParser r;
  parse_all({"data: complete\n\n"}, &r);
  EXPECT_FALSE(r.has_partial());
  EXPECT_EQ(r.n_events(), 1u);
}

TEST(BenchSse, OpenAiChunks) {
  StreamChunk c;
  ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"index":0,"text":"Hi","finish_reason":null}]})", c));
  EXPECT_EQ(c.text, "Hi");
  EXPECT_FALSE(c.has_usage);
  ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"delta":{"role":"assistant"}}]})", c));
  EXPECT_EQ(c.text, "");
  ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"delta":{"content":"yo"},"finish_reason":"stop"}],"usage":null})", c));
  EXPECT_EQ(c.text, "yo");
  EXPECT_EQ(c.finish_reason, "stop");
  EXPECT_FALSE(c.has_usage);
  ASSERT_TRUE(parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}})", c));
  EXPECT_TRUE(c.has_usage);
  EXPECT_EQ(c.prompt_tokens, 12);
  EXPECT_EQ(c.completion_tokens, 34);
  ASSERT_TRUE(parse_stream_chunk(R"({"error":{"message":"boom","type":"server_error"}})", c));
  EXPECT_EQ(c.error, "boom");
  ASSERT_TRUE(parse_stream_chunk(R"({"choices":[{"text":5}],"usage":"x"})", c));  // wrong types ignored
  EXPECT_EQ(c.text, "");
  EXPECT_FALSE(c.has_usage);
  EXPECT_FALSE(parse_stream_chunk("{not json", c));
  EXPECT_NE(c.error.find("not JSON"), std::string::npos);
  ASSERT_TRUE(parse_stream_chunk("[1,2]", c));  // valid JSON, nothing in it
  EXPECT_EQ(c.text, "");
}

using Clock = std::chrono::steady_clock;
Clock::time_point at(Clock::time_point t0, int ms) { return t0 + std::chrono::milliseconds(ms); }

std::string text_event(const std::string& t) { return "data: {\"choices\":[{\"text\":\"" + t + "\"}]}\n\n"; }

TEST(BenchSse, CollectorTimingsAndUsage) {
  const Clock::time_point t0 = Clock::now();
  StreamCollector col(t0);
  col.feed(": comment\n\n", at(t0, 5));
  col.feed(text_event("") , at(t0, 8));  // empty text: not a token
  col.feed(text_event("a"), at(t0, 20));
  col.feed(text_event("b") + text_event("c"), at(t0, 50));  // two in one read: ITL 0
  col.feed("data: {\"choices\":[{\"text\":\"d\",\"finish_reason\":\"length\"}]}\n", at(t0, 70));
  col.feed("\n", at(t0, 80));  // the event completes here
  col.feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n",
           at(t0, 90));
  EXPECT_TRUE(col.done());
  RequestResult r;
  col.finish(r, at(t0, 100));
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft_ms, 20);
  ASSERT_EQ(r.itl_ms.size(), 3u);
  EXPECT_DOUBLE_EQ(r.itl_ms[0], 30);
  EXPECT_DOUBLE_EQ(r.itl_ms[1], 0);
  EXPECT_DOUBLE_EQ(r.itl_ms[2], 30);
  EXPECT_EQ(r.n_text_chunks, 4);
  EXPECT_TRUE(r.usage_reported);
  EXPECT_EQ(r.n_output_tokens, 5);  // usage wins over the chunk count
  EXPECT_EQ(r.n_prompt_tokens, 9);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_DOUBLE_EQ(r.e2e_ms, 100);
  EXPECT_DOUBLE_EQ(r.tpot_ms(), 20);  // (100 − 20) / (5 − 1)
}

TEST(BenchSse, CollectorCountsChunksWithoutUsage) {
  const Clock::time_point t0 = Clock::now();
  StreamCollector col(t0);
  col.feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", at(t0, 1));
  col.feed("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", at(t0, 10));
  col.feed("data: {\"choices\":[{\"delta\":{\"content\":\"y\"}}]}\n\ndata: [DONE]\n\n", at(t0, 30));
  col.feed(text_event("after-done"), at(t0, 40));  // ignored
  RequestResult r;
  col.finish(r, at(t0, 35));
  EXPECT_TRUE(r.ok);
  EXPECT_FALSE(r.usage_reported);
  EXPECT_EQ(r.n_output_tokens, 2);
  EXPECT_EQ(r.n_prompt_tokens, -1);
  EXPECT_DOUBLE_EQ(r.ttft_ms, 10);
  EXPECT_DOUBLE_EQ(r.tpot_ms(), 25);
}

TEST(BenchSse, CollectorErrors) {
  const Clock::time_point t0 = Clock::now();
  {
    StreamCollector col(t0);
    col.feed(text_event("a"), at(t0, 1));  // no [DONE]
    RequestResult r;
    col.finish(r, at(t0, 2));
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error_kind, "incomplete");
    EXPECT_EQ(r.n_output_tokens, 1);
  }
  {
    StreamCollector col(t0);
    col.feed(text_event("a") + "data: {\"choices\":[{\"te", at(t0, 1));  // cut mid-event
    RequestResult r;
    col.finish(r, at(t0, 2));
    EXPECT_EQ(r.error_kind, "incomplete");
    EXPECT_NE(r.error.find("middle of an event"), std::string::npos);
  }
  {
    StreamCollector col(t0);
    col.feed("data: {\"error\":{\"message\":\"kv exhausted\"}}\n\ndata: [DONE]\n\n", at(t0, 1));
    RequestResult r;
    col.finish(r, at(t0, 2));
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error_kind, "stream_error");
    EXPECT_EQ(r.error, "kv exhausted");
  }
  {
    StreamCollector col(t0);
    col.feed("data: garbage\n\ndata: [DONE]\n\n", at(t0, 1));
    RequestResult r;
    col.finish(r, at(t0, 2));
    EXPECT_EQ(r.error_kind, "stream_error");
  }
}

TEST(BenchSse, RequestBody) {
  EndpointConfig cfg;
  RequestSpec spec;
  spec.index = 3;
  spec.prompt = "tell me";
  spec.max_tokens = 7;
  nlohmann::json b = request_body(cfg, spec);
  EXPECT_EQ(b["prompt"], "tell me");
  EXPECT_EQ(b["max_tokens"], 7);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_FALSE(b.contains("model"));
  EXPECT_FALSE(b.contains("temperature"));
  cfg.endpoint = "/v1/chat/completions";
  cfg.model = "m";
  cfg.ignore_eos = true;
  cfg.temperature = 0;
  b = request_body(cfg, spec);
  EXPECT_FALSE(b.contains("prompt"));
  EXPECT_EQ(b["messages"][0]["role"], "user");
  EXPECT_EQ(b["messages"][0]["content"], "tell me");
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["temperature"], 0.0);
}

}  // namespace
}  // namespace ubatch::bench
