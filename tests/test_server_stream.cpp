// The HTTP server on the embedded default model (Gemma 3 270M): many concurrent streaming
// clients against solo greedy runs, stop strings across token boundaries, UTF-8 safety of
// every frame, and cancellation when a client disconnects.
#include "test_server_fixture.h"

#include <future>

#include "server/json_request.h"

namespace ubatch::test {
namespace {

class ServerStream : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(default_model())) return;
    ServeOptions o;
    o.engine.n_parallel = 16;
    o.engine.n_batch = 256;
    o.n_ctx = 4096;
    o.n_threads = 2;
    served_ = serve_model(default_model(), o).release();
  }
  static void TearDownTestSuite() {
    delete served_;
    served_ = nullptr;
  }
  void SetUp() override {
    UBATCH_REQUIRE_DEFAULT_MODEL();
    ASSERT_NE(served_, nullptr);
  }
  static int port() { return served_->port; }
  static ServedModel* served_;
};
ServedModel* ServerStream::served_ = nullptr;

json greedy(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// Non-streamed completion → (text, finish_reason); fails the test on a non-200.
std::pair<std::string, std::string> complete(int port, const json& body) {
  Reply r = post(port, "/v1/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return {};
  json j = r.parsed();
  return {j["choices"][0]["text"], j["choices"][0]["finish_reason"]};
}

TEST_F(ServerStream, ThirtyTwoConcurrentStreamsMatchNonStreamedAndSoloRuns) {
  const std::vector<std::string> prompts = {
      "The capital of France is", "Once upon a time, there was a", "The three primary colors are",
      "In computer science, a linked list is", "The best way to learn a language is", "Water boils at",
      "My favourite recipe for pancakes:", "The history of the Roman Empire"};
  constexpr int kMax = 24;
  // Solo greedy runs, one at a time, with the token boundaries of their text.
  std::vector<std::string> solo_text(prompts.size());
  std::vector<std::string> solo_finish(prompts.size());
  std::vector<std::vector<int64_t>> solo_offsets(prompts.size());
  for (size_t p = 0; p < prompts.size(); ++p) {
    json body = greedy(prompts[p], kMax);
    body["logprobs"] = 0;
    Reply r = post(port(), "/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    json c = r.parsed()["choices"][0];
    solo_text[p] = c["text"];
    solo_finish[p] = c["finish_reason"];
    for (const json& off : c["logprobs"]["text_offset"]) solo_offsets[p].push_back(off.get<int64_t>());
  }
  // 32 streaming and 32 non-streaming clients at once, mixed lengths.
  constexpr int kClients = 32;
  std::vector<int> prompt_of(kClients), len_of(kClients);
  std::vector<std::future<StreamResult>> streams;
  std::vector<std::future<std::pair<std::string, std::string>>> plains;
  for (int i = 0; i < kClients; ++i) {
    prompt_of[i] = i % static_cast<int>(prompts.size());
    len_of[i] = 4 + (i * 7) % (kMax - 3);  // 4 … 24
    json body = greedy(prompts[prompt_of[i]], len_of[i]);
    plains.push_back(std::async(std::launch::async, [body] { return complete(port(), body); }));
    body["stream"] = true;
    streams.push_back(std::async(std::launch::async, [body] { return post_stream(port(), "/v1/completions", body); }));
  }
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE("client " + std::to_string(i) + ", prompt " + std::to_string(prompt_of[i]) + ", max_tokens " +
                 std::to_string(len_of[i]));
    StreamResult s = streams[i].get();
    auto [plain_text, plain_finish] = plains[i].get();
    ASSERT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text[0], plain_text);
    EXPECT_EQ(s.finish[0], plain_finish);
    // The solo run's first len_of[i] tokens (or all of it, when it stopped earlier).
    const size_t p = static_cast<size_t>(prompt_of[i]);
    const size_t n = static_cast<size_t>(len_of[i]);
    const std::string expected = n < solo_offsets[p].size() ? solo_text[p].substr(0, solo_offsets[p][n]) : solo_text[p];
    EXPECT_EQ(plain_text, expected);
    EXPECT_EQ(plain_finish, n >= solo_offsets[p].size() ? solo_finish[p] : std::string("length"));
  }
  EXPECT_EQ(get(port(), "/health").status, 200);
}

TEST_F(ServerStream, StopStringsAcrossTokenBoundaries) {
  constexpr int kMax = 24;
  json body = greedy("The capital of France is", kMax);
  body["logprobs"] = 0;
  Reply r = post(port(), "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200);
  json c = r.parsed()["choices"][0];
  const std::string text = c["text"];
  std::vector<std::string> pieces;
  for (const json& t : c["logprobs"]["tokens"]) pieces.push_back(t);
  ASSERT_GE(pieces.size(), 8u) << text;
  // A stop string spanning three tokens: the end of one, all of the next, the start of the third.
  size_t k = 0;
  for (size_t i = 2; i + 2 < pieces.size() && !k; ++i)
    if (pieces[i].size() >= 2 && pieces[i + 1].size() >= 1 && pieces[i + 2].size() >= 2) k = i;
  ASSERT_GT(k, 0u) << text;
  const std::string stop = pieces[k].substr(pieces[k].size() - 2) + pieces[k + 1] + pieces[k + 2].substr(0, 2);
  const size_t at = text.find(stop);
  ASSERT_NE(at, std::string::npos);

  struct Case {
    std::string name;
    json stop;
    std::string expected;
    std::string finish;
  };
  const std::vector<Case> cases = {
      {"spanning three tokens", stop, text.substr(0, at), "stop"},
      {"in a list with one that never matches", json::array({"\x01never", stop}), text.substr(0, at), "stop"},
      // Partial matches that fail later must be flushed: the text comes out whole, once.
      {"partial match then mismatch", stop + "\x01", text, "length"},
      {"partial match at the very end", text.substr(text.size() - 3) + "\x02zz", text, "length"},
  };
  // All cases at once, streamed and not (greedy output does not depend on the batch).
  std::vector<std::future<std::pair<std::string, std::string>>> plains;
  std::vector<std::future<StreamResult>> streams;
  for (const Case& cs : cases) {
    json b = greedy("The capital of France is", kMax);
    b["stop"] = cs.stop;
    plains.push_back(std::async(std::launch::async, [b] { return complete(port(), b); }));
    b["stream"] = true;
    streams.push_back(std::async(std::launch::async, [b] { return post_stream(port(), "/v1/completions", b); }));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& cs = cases[i];
    SCOPED_TRACE(cs.name + ": stop " + cs.stop.dump());
    auto [plain, finish] = plains[i].get();
    EXPECT_EQ(plain, cs.expected);
    EXPECT_EQ(finish, cs.finish);
    StreamResult s = streams[i].get();
    ASSERT_EQ(s.status, 200);
    EXPECT_EQ(s.text[0], cs.expected);
    EXPECT_EQ(s.finish[0], cs.finish);
    if (cs.finish == "stop") {
      EXPECT_EQ(s.text[0].find(stop), std::string::npos);
    }
  }
}

// Emoji that the vocabulary spells with byte tokens (4 per character) and CJK text, streamed
// token by token: every frame parses as JSON with valid UTF-8 and no character is split.
TEST_F(ServerStream, EmojiAndCjkFramesNeverSplitACharacter) {
  for (const char* prompt : {"\xf0\x9f\xa6\x9c\xf0\x9f\xa6\xa9\xf0\x9f\xa6\x9a\xf0\x9f\xa6\x9c\xf0\x9f\xa6\xa9"
                             "\xf0\x9f\xa6\x9a\xf0\x9f\xa6\x9c\xf0\x9f\xa6\xa9",  // 🦜🦩🦚🦜🦩🦚🦜🦩
                             "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9"
                             "\xe3\x83\x88\xef\xbc\x9a\xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xaf\xe6\x97\xa5\xe6\x9c\xac"
                             "\xe3\x81\xae\xe9\xa6\x96\xe9\x83\xbd\xe3\x81\xa7\xe3\x81\x99\xe3\x80\x82\xe5\xa4\xa7"
                             "\xe9\x98\xaa\xe3\x81\xaf"}) {  // 日本語のテキスト：東京は日本の首都です。大阪は
    SCOPED_TRACE(prompt);
    json body = greedy(prompt, 16);
    auto plain_future = std::async(std::launch::async, [body] { return complete(port(), body); });
    body["stream"] = true;
    Reply raw = post(port(), "/v1/completions", body.dump());
    auto [plain, finish] = plain_future.get();
    ASSERT_EQ(raw.status, 200);
    std::string streamed;
    int n_frames = 0;
    for (const std::string& payload : sse_payloads(raw.body)) {
      if (payload == "[DONE]") break;
      ASSERT_TRUE(server::is_valid_utf8(payload)) << payload;
      json chunk = json::parse(payload, nullptr, false);
      ASSERT_FALSE(chunk.is_discarded()) << payload;
      for (const json& c : chunk["choices"]) {
        const std::string piece = c["text"];
        ASSERT_TRUE(server::is_valid_utf8(piece));
        streamed += piece;
        ++n_frames;
      }
    }
    EXPECT_EQ(streamed, plain);
    EXPECT_GT(n_frames, 1);
    EXPECT_EQ(plain.find("\xef\xbf\xbd"), std::string::npos) << "U+FFFD in " << plain;  // nothing replaced
    EXPECT_TRUE(std::any_of(plain.begin(), plain.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; }))
        << "expected non-ASCII output, got " << plain;
  }
}

TEST_F(ServerStream, ChatAnswers) {
  Reply r = post(port(), "/v1/chat/completions",
                 R"({"messages": [{"role": "system", "content": "You are terse."},
                                  {"role": "user", "content": "What is the capital of France?"}],
                     "max_tokens": 12, "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.parsed();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_FALSE(j["choices"][0]["message"]["content"].get<std::string>().empty());
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 10);  // the template's turn markers are in the prompt
}

}  // namespace

// One sequence at a time, so a request left running after its client went away would block the next.
class ServerDisconnect : public ::testing::Test {
 protected:
  void SetUp() override {
    UBATCH_REQUIRE_DEFAULT_MODEL();
    ServeOptions o;
    o.engine.n_parallel = 1;
    o.engine.n_batch = 64;
    o.n_ctx = 1024;
    o.n_threads = 2;
    served_ = serve_model(default_model(), o);
    ASSERT_NE(served_, nullptr);
  }
  std::unique_ptr<ServedModel> served_;
};

TEST_F(ServerDisconnect, StreamingClientGoneAfterThreeFramesIsCancelled) {
  const int port = served_->port;
  std::map<std::string, double> before = metrics(port);
  {
    RawConnection conn(port);
    ASSERT_TRUE(conn.ok());
    ASSERT_TRUE(conn.send_post("/v1/completions",
                               R"({"prompt": "Count to one thousand: 1, 2, 3,", "max_tokens": 500, "ignore_eos": true,
                                   "temperature": 0, "stream": true})"));
    const std::string got = conn.read_until("\n\n", 3);
    ASSERT_NE(got.find("200 OK"), std::string::npos) << got;
  }  // closed after 3 frames
  // The next request runs at once: with n_parallel 1 it could not if the first still held the slot.
  auto [text, finish] = complete(port, greedy("Hello", 4));
  EXPECT_EQ(finish, "length");
  std::map<std::string, double> after = wait_metrics(port, [&](std::map<std::string, double>& m) {
    return m["ubatch_requests_cancelled_total"] >= before["ubatch_requests_cancelled_total"] + 1 &&
           m["ubatch_requests_running"] == 0 && m["ubatch_kv_blocks_used"] == 0;
  });
  EXPECT_EQ(after["ubatch_requests_cancelled_total"] - before["ubatch_requests_cancelled_total"], 1);
  EXPECT_EQ(after["ubatch_http_disconnects_total"] - before["ubatch_http_disconnects_total"], 1);
  EXPECT_EQ(after["ubatch_kv_blocks_used"], 0);
  EXPECT_EQ(after["ubatch_requests_running"], 0);
  EXPECT_LT(after["ubatch_generated_tokens_total"] - before["ubatch_generated_tokens_total"], 500);
  EXPECT_EQ(get(port, "/health").status, 200);
}

TEST_F(ServerDisconnect, NonStreamingClientGoneIsCancelled) {
  const int port = served_->port;
  std::map<std::string, double> before = metrics(port);
  {
    RawConnection conn(port);
    ASSERT_TRUE(conn.ok());
    ASSERT_TRUE(conn.send_post("/v1/completions",
                               R"({"prompt": "Count to one thousand: 1, 2, 3,", "max_tokens": 500, "ignore_eos": true,
                                   "temperature": 0})"));
    // Wait until it generates, then hang up without reading.
    wait_metrics(port, [&](std::map<std::string, double>& m) {
      return m["ubatch_generated_tokens_total"] >= before["ubatch_generated_tokens_total"] + 2;
    });
  }
  std::map<std::string, double> after = wait_metrics(port, [&](std::map<std::string, double>& m) {
    return m["ubatch_requests_cancelled_total"] >= before["ubatch_requests_cancelled_total"] + 1 &&
           m["ubatch_requests_running"] == 0 && m["ubatch_kv_blocks_used"] == 0;
  });
  EXPECT_EQ(after["ubatch_requests_cancelled_total"] - before["ubatch_requests_cancelled_total"], 1);
  EXPECT_EQ(after["ubatch_kv_blocks_used"], 0);
  EXPECT_LT(after["ubatch_generated_tokens_total"] - before["ubatch_generated_tokens_total"], 500);
  auto [text, finish] = complete(port, greedy("Hello", 4));
  EXPECT_EQ(finish, "length");
}

}  // namespace ubatch::test
