// POST /v1/embeddings on a real server (loopback, tiny reference models): vectors equal the
// pooled, normalised final hidden state computed independently through the Context API (one
// sequence alone, one decode), batch invariance byte for byte (alone, among other inputs,
// while a generation runs), float and base64 agree, dimensions, the 400s, and the official
// OpenAI Python client's embeddings.create against the built binary.
#include "test_server_fixture.h"

#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "gguf/gguf_writer.h"
#include "server/embedding_request.h"

namespace ubatch::test {
namespace {

std::vector<int32_t> tokenize_for_embeddings(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = tok.tokenize(text, tok.add_bos_default(), true);
  if (tok.add_eos_default() && tok.eos() >= 0) ids.push_back(tok.eos());
  return ids;
}

// The reference: the prompt decoded alone in a fresh context (one decode, every row's final
// hidden state), pooled in double precision, L2-normalised.
std::vector<double> reference_vector(const std::string& model_path, const std::vector<int32_t>& ids,
                                     sched::Pooling pooling) {
  Result<std::unique_ptr<gguf::File>> file = gguf::File::open(model_path);
  EXPECT_TRUE(file) << file.message();
  std::shared_ptr<const gguf::File> shared(std::move(file.value()));
  Result<std::unique_ptr<Model>> model = Model::load(shared);
  EXPECT_TRUE(model) << model.message();
  ContextParams cp;
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_threads = 1;
  Result<std::unique_ptr<Context>> ctx = Context::create(std::shared_ptr<Model>(std::move(model.value())), cp);
  EXPECT_TRUE(ctx) << ctx.message();
  Context& c = *ctx.value();
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int32_t>(i), 0, false, true);
  EXPECT_TRUE(c.decode(b).ok());
  const int32_t E = c.n_embd();
  std::vector<double> v(static_cast<size_t>(E), 0.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool use = pooling == sched::Pooling::Mean || (pooling == sched::Pooling::Cls && i == 0) ||
                     (pooling == sched::Pooling::Last && i + 1 == ids.size());
    if (!use) continue;
    const float* h = c.embedding(static_cast<int32_t>(i));
    EXPECT_NE(h, nullptr);
    for (int32_t j = 0; j < E; ++j) v[j] += h[j];
  }
  double ss = 0;
  for (double x : v) ss += x * x;
  for (double& x : v) x /= std::sqrt(ss);
  return v;
}

double cosine_distance(const std::vector<double>& a, const std::vector<float>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return 1.0 - dot / std::sqrt(na * nb);
}

std::vector<float> floats(const json& arr) {
  std::vector<float> v;
  for (const json& x : arr) v.push_back(x.get<float>());
  return v;
}

std::vector<float> decode_base64_floats(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::vector<uint8_t> bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) break;  // padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= static_cast<uint32_t>(bytes[i * 4 + k]) << (8 * k);
    out[i] = std::bit_cast<float>(u);
  }
  return out;
}

Reply embed(int port, const json& body) { return post(port, "/v1/embeddings", body.dump()); }

ServeOptions embedding_options(sched::Pooling pooling) {
  ServeOptions o;
  o.engine.n_batch = 16;  // prompts longer than this are pooled across several steps
  o.engine.n_parallel = 4;
  o.server.pooling = pooling;
  return o;
}

const char* const kTexts[] = {
    "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest.",
    "Embeddings map text to vectors.",
    "A third, unrelated sentence about the weather in spring.",
};

class EmbeddingsPooling : public ::testing::TestWithParam<std::tuple<std::string, sched::Pooling>> {};

TEST_P(EmbeddingsPooling, VectorEqualsTheContextReference) {
  const std::string path = reference_path("models/" + std::get<0>(GetParam()));
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "reference model not found at " << path;
  const sched::Pooling pooling = std::get<1>(GetParam());
  auto s = serve_model(path, embedding_options(pooling));
  ASSERT_TRUE(s);
  for (const char* text : kTexts) {
    Reply r = embed(s->port, {{"input", text}, {"model", "anything"}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = r.parsed();
    EXPECT_EQ(j["object"], "list");
    EXPECT_EQ(j["model"], "test-model");
    ASSERT_EQ(j["data"].size(), 1u);
    EXPECT_EQ(j["data"][0]["object"], "embedding");
    EXPECT_EQ(j["data"][0]["index"], 0);
    const std::vector<int32_t> ids = tokenize_for_embeddings(*s->tokenizer, text);
    EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
    EXPECT_EQ(j["usage"]["total_tokens"], ids.size());
    const std::vector<float> got = floats(j["data"][0]["embedding"]);
    ASSERT_EQ(static_cast<int32_t>(got.size()), s->context->n_embd());
    double norm = 0;
    for (float x : got) norm += static_cast<double>(x) * x;
    EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-5);
    const std::vector<double> want = reference_vector(path, ids, pooling);
    EXPECT_LT(cosine_distance(want, got), 1e-4) << text;
  }
}

INSTANTIATE_TEST_SUITE_P(
    TinyModels, EmbeddingsPooling,
    ::testing::Values(std::make_tuple("tiny-llama-q8_0.gguf", sched::Pooling::Mean),
                      std::make_tuple("tiny-llama-q8_0.gguf", sched::Pooling::Last),
                      std::make_tuple("tiny-gemma3-q8_0.gguf", sched::Pooling::Mean),
                      std::make_tuple("tiny-qwen2-q8_0.gguf", sched::Pooling::Last),
                      std::make_tuple("tiny-llama-q8_0.gguf", sched::Pooling::Cls)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param).substr(0, std::get<0>(info.param).find('.'));
      for (char& c : name)
        if (c == '-') c = '_';
      return name + "_" + sched::pooling_name(std::get<1>(info.param));
    });

// The same text's vector, as bytes (base64), is the same alone, among other inputs, repeated
// (last pooling reuses the cached prefix), and while a generation runs in the same steps.
class EmbeddingsInvariance : public ::testing::TestWithParam<sched::Pooling> {};

TEST_P(EmbeddingsInvariance, ByteForByteWhateverElseIsInTheBatch) {
  UBATCH_REQUIRE_TINY_MODEL();
  auto s = serve_model(tiny_model(), embedding_options(GetParam()));
  ASSERT_TRUE(s);
  const json alone_body = {{"input", kTexts[0]}, {"encoding_format", "base64"}};
  Reply alone = embed(s->port, alone_body);
  ASSERT_EQ(alone.status, 200) << alone.body;
  const std::string want = alone.parsed()["data"][0]["embedding"];

  Reply again = embed(s->port, alone_body);
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.parsed()["data"][0]["embedding"], want) << "the same text twice";

  Reply mixed = embed(s->port, {{"input", {kTexts[1], kTexts[0], kTexts[2]}}, {"encoding_format", "base64"}});
  ASSERT_EQ(mixed.status, 200) << mixed.body;
  const json m = mixed.parsed();
  ASSERT_EQ(m["data"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(m["data"][i]["index"], i);
  EXPECT_EQ(m["data"][1]["embedding"], want) << "among other inputs";
  EXPECT_NE(m["data"][0]["embedding"], want);

  // A long generation runs; the embedding is computed while it does (in the same steps).
  std::atomic<bool> generation_done{false};
  std::thread gen([&] {
    Reply r = post(s->port, "/v1/completions",
                   json{{"prompt", "Once upon a time"}, {"max_tokens", 1000}, {"ignore_eos", true}, {"temperature", 0},
                        {"speculative", false}}  // one token a step: it outlasts the embedding by far
                       .dump());
    EXPECT_EQ(r.status, 200) << r.body;
    generation_done = true;
  });
  for (int i = 0; i < 2000 && s->engine->metrics().generated_tokens == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Reply during = embed(s->port, {{"input", {kTexts[2], kTexts[0]}}, {"encoding_format", "base64"}});
  const bool overlapped = !generation_done;
  gen.join();
  ASSERT_EQ(during.status, 200) << during.body;
  EXPECT_TRUE(overlapped) << "the generation ended before the embedding was answered: the test did not overlap them";
  EXPECT_EQ(during.parsed()["data"][1]["embedding"], want) << "while a generation runs";
}

INSTANTIATE_TEST_SUITE_P(Poolings, EmbeddingsInvariance,
                         ::testing::Values(sched::Pooling::Mean, sched::Pooling::Last),
                         [](const auto& info) { return std::string(sched::pooling_name(info.param)); });

TEST(Embeddings, FloatAndBase64AreTheSameVectorAndTokenInputsMatchText) {
  UBATCH_REQUIRE_TINY_MODEL();
  auto s = serve_model(tiny_model(), embedding_options(sched::Pooling::Mean));
  ASSERT_TRUE(s);
  Reply f = embed(s->port, {{"input", kTexts[1]}, {"encoding_format", "float"}});
  Reply b = embed(s->port, {{"input", kTexts[1]}, {"encoding_format", "base64"}});
  ASSERT_EQ(f.status, 200) << f.body;
  ASSERT_EQ(b.status, 200) << b.body;
  const std::vector<float> vf = floats(f.parsed()["data"][0]["embedding"]);
  const std::vector<float> vb = decode_base64_floats(b.parsed()["data"][0]["embedding"]);
  ASSERT_EQ(vf.size(), vb.size());
  EXPECT_EQ(std::memcmp(vf.data(), vb.data(), vf.size() * sizeof(float)), 0);

  // Token ids, and arrays of them, embed like the text they tokenize_for_embeddings from.
  const std::vector<int32_t> ids = tokenize_for_embeddings(*s->tokenizer, kTexts[1]);
  Reply t = embed(s->port, {{"input", ids}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(floats(t.parsed()["data"][0]["embedding"]), vf);
  Reply tt = embed(s->port, {{"input", {ids, tokenize_for_embeddings(*s->tokenizer, kTexts[2])}}});
  ASSERT_EQ(tt.status, 200) << tt.body;
  EXPECT_EQ(floats(tt.parsed()["data"][0]["embedding"]), vf);
  EXPECT_EQ(tt.parsed()["usage"]["prompt_tokens"], ids.size() + tokenize_for_embeddings(*s->tokenizer, kTexts[2]).size());
}

TEST(Embeddings, DimensionsTruncatesAndRenormalises) {
  UBATCH_REQUIRE_TINY_MODEL();
  auto s = serve_model(tiny_model(), embedding_options(sched::Pooling::Mean));
  ASSERT_TRUE(s);
  Reply full = embed(s->port, {{"input", kTexts[0]}});
  Reply cut = embed(s->port, {{"input", kTexts[0]}, {"dimensions", 8}});
  ASSERT_EQ(full.status, 200) << full.body;
  ASSERT_EQ(cut.status, 200) << cut.body;
  const std::vector<float> vf = floats(full.parsed()["data"][0]["embedding"]);
  const std::vector<float> vc = floats(cut.parsed()["data"][0]["embedding"]);
  ASSERT_EQ(vc.size(), 8u);
  double n = 0;
  for (int i = 0; i < 8; ++i) n += static_cast<double>(vf[i]) * vf[i];
  n = std::sqrt(n);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(vc[i], vf[i] / n, 1e-6) << i;
}

TEST(Embeddings, NoNormalizeReturnsThePooledVector) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o = embedding_options(sched::Pooling::Last);
  o.server.embd_normalize = false;
  auto s = serve_model(tiny_model(), o);
  ASSERT_TRUE(s);
  Reply r = embed(s->port, {{"input", kTexts[1]}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<float> v = floats(r.parsed()["data"][0]["embedding"]);
  double norm = 0;
  for (float x : v) norm += static_cast<double>(x) * x;
  EXPECT_GT(std::abs(std::sqrt(norm) - 1.0), 1e-3) << "an RMS-normalised hidden state has norm ~sqrt(n_embd), not 1";
  const std::vector<double> want = reference_vector(tiny_model(), tokenize_for_embeddings(*s->tokenizer, kTexts[1]), sched::Pooling::Last);
  EXPECT_LT(cosine_distance(want, v), 1e-4);
}

TEST(Embeddings, BadInputIs400AndLongInputNamesTheLimitOrIsTruncated) {
  UBATCH_REQUIRE_TINY_MODEL();
  ServeOptions o = embedding_options(sched::Pooling::Mean);
  o.engine.n_ctx_seq = 24;  // one input may have at most 24 tokens
  auto s = serve_model(tiny_model(), o);
  ASSERT_TRUE(s);
  const int32_t n_vocab = s->context->n_vocab();
  const std::vector<std::pair<json, std::string>> bad = {
      {json::object(), "input"},
      {{{"input", ""}}, "input"},
      {{{"input", json::array()}}, "input"},
      {{{"input", {"a", ""}}}, "input"},
      {{{"input", {"a", 5}}}, "input"},
      {{{"input", {json::array(), {1, 2}}}}, "input"},
      {{{"input", {1, n_vocab}}}, "input"},
      {{{"input", {1, -1}}}, "input"},
      {{{"input", 42}}, "input"},
      {{{"input", "x"}, {"encoding_format", "int8"}}, "encoding_format"},
      {{{"input", "x"}, {"dimensions", 0}}, "dimensions"},
      {{{"input", "x"}, {"dimensions", s->context->n_embd() + 1}}, "dimensions"},
      {{{"input", "x"}, {"dimensions", "8"}}, "dimensions"},
      {{{"input", "x"}, {"truncate", "yes"}}, "truncate"},
      {{{"input", "x"}, {"model", 3}}, "model"},
  };
  for (const auto& [body, param] : bad) {
    Reply r = embed(s->port, body);
    EXPECT_EQ(r.status, 400) << body.dump() << " → " << r.body;
    EXPECT_EQ(r.parsed()["error"]["param"], param) << body.dump() << " → " << r.body;
  }
  Reply notjson = post(s->port, "/v1/embeddings", "{\"input\": ");
  EXPECT_EQ(notjson.status, 400);

  std::vector<int32_t> long_ids;
  for (int i = 0; i < 40; ++i) long_ids.push_back(100 + i);
  Reply too_long = embed(s->port, {{"input", long_ids}});
  EXPECT_EQ(too_long.status, 400) << too_long.body;
  EXPECT_EQ(too_long.parsed()["error"]["code"], "context_length_exceeded");
  EXPECT_NE(too_long.body.find("24 tokens"), std::string::npos) << too_long.body;
  Reply cut = embed(s->port, {{"input", long_ids}, {"truncate", true}});
  ASSERT_EQ(cut.status, 200) << cut.body;
  EXPECT_EQ(cut.parsed()["usage"]["prompt_tokens"], 24);
  Reply first = embed(s->port, {{"input", std::vector<int32_t>(long_ids.begin(), long_ids.begin() + 24)}});
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(cut.parsed()["data"][0]["embedding"], first.parsed()["data"][0]["embedding"]);
  // Still serving.
  EXPECT_EQ(embed(s->port, {{"input", "ok"}}).status, 200);
}

// A copy of the tiny model whose file says it is an embedding model (<arch>.pooling_type).
std::string embedding_model_copy(int64_t pooling_type) {
  Result<std::unique_ptr<gguf::File>> f = gguf::File::open(tiny_model());
  EXPECT_TRUE(f) << f.message();
  gguf::Writer w = gguf::Writer::from_file(*f.value());
  w.add_uint("llama.pooling_type", gguf::ValueType::UINT32, static_cast<uint64_t>(pooling_type));
  const std::vector<uint8_t> bytes = w.bytes();
  const std::string path = (std::filesystem::temp_directory_path() /
                            fmt::format("ubatch_embd_model_{}_{}.gguf", getpid(), pooling_type)).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  return path;
}

TEST(Embeddings, PoolingFromTheFileAndAnEmbeddingModelDoesNotGenerate) {
  UBATCH_REQUIRE_TINY_MODEL();
  for (const auto& [type, pooling] : {std::pair{1, sched::Pooling::Mean}, std::pair{3, sched::Pooling::Last}}) {
    const std::string path = embedding_model_copy(type);
    {
      ServeOptions o = embedding_options(sched::Pooling::None);  // no --pooling: the file's
      auto s = serve_model(path, o);
      ASSERT_TRUE(s);
      EXPECT_EQ(s->engine->model_pooling(), pooling);
      Reply c = post(s->port, "/v1/completions", json{{"prompt", "Hello"}, {"max_tokens", 4}}.dump());
      EXPECT_EQ(c.status, 400) << c.body;
      EXPECT_EQ(c.parsed()["error"]["code"], "model_not_supported") << c.body;
      Reply e = embed(s->port, {{"input", kTexts[1]}});
      ASSERT_EQ(e.status, 200) << e.body;
      const std::vector<double> want = reference_vector(path, tokenize_for_embeddings(*s->tokenizer, kTexts[1]), pooling);
      EXPECT_LT(cosine_distance(want, floats(e.parsed()["data"][0]["embedding"])), 1e-4) << type;
    }
    std::filesystem::remove(path);
  }
  // A pooling type the spec does not define for these models is refused at load, by name.
  const std::string rank = embedding_model_copy(4);
  Result<std::unique_ptr<Model>> m = Model::load_file(rank);
  std::filesystem::remove(rank);
  ASSERT_FALSE(m);
  EXPECT_NE(m.message().find("pooling_type"), std::string::npos) << m.message();
}

TEST(Embeddings, OfficialOpenAiPythonClient) {
  int rc = 0;
  run_command("python3 -c 'import openai' 2>/dev/null", &rc);
  if (rc != 0) GTEST_SKIP() << "python3 with the `openai` package not found (scripts/setup.sh installs it)";
  UBATCH_REQUIRE_TINY_MODEL();
  const std::string binary = ubatch_binary();
  if (!std::filesystem::exists(binary)) GTEST_SKIP() << "ubatch binary not built at " << binary;
  const std::string script = (std::filesystem::path(UBATCH_TESTS_DIR) / "python" / "test_openai_embeddings.py").string();
  ASSERT_TRUE(std::filesystem::exists(script)) << script;
  const std::string log =
      (std::filesystem::temp_directory_path() / ("ubatch_embd_" + std::to_string(getpid()) + ".log")).string();
  const SpawnedServer server = spawn_serve(
      ubatch_argv({"serve", "-m", tiny_model(), "--port", "0", "--threads", "1", "--n-ctx", "1024", "--n-parallel", "4",
                   "--pooling", "mean", "--log-level", "info"}),
      log);
  ASSERT_GT(server.pid, 0);
  std::string output;
  int status = -1;
  if (server.ready)
    output = run_command("python3 " + script + " --base-url http://127.0.0.1:" + std::to_string(server.port) + "/v1 2>&1",
                         &status);
  kill(server.pid, SIGTERM);
  int wstatus = 0;
  waitpid(server.pid, &wstatus, 0);
  std::ifstream in(log);
  const std::string server_log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(log);
  ASSERT_TRUE(server.ready) << server_log;
  EXPECT_EQ(status, 0) << output << "\nserver log:\n" << server_log;
  EXPECT_NE(output.find("5 passed, 0 failed"), std::string::npos) << output;
}

TEST(EmbeddingRequest, Base64IsLittleEndianFloat32) {
  // 1.0f = 0x3F800000 → bytes 00 00 80 3F; 2.0f = 0x40000000 → 00 00 00 40.
  EXPECT_EQ(server::base64_floats({1.0f}), "AACAPw==");
  EXPECT_EQ(server::base64_floats({1.0f, 2.0f}), "AACAPwAAAEA=");
  EXPECT_EQ(server::base64_floats({1.0f, 2.0f, -0.5f}), "AACAPwAAAEAAAAC/");
  EXPECT_EQ(decode_base64_floats("AACAPwAAAEAAAAC/"), (std::vector<float>{1.0f, 2.0f, -0.5f}));
}

}  // namespace
}  // namespace ubatch::test
