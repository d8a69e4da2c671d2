// Several models in one server (server/model_registry.h), on loopback with two tiny reference
// models: routing by "model", 404 model_not_found with several models and any name with one,
// GET /v1/models, loading on demand, unloading the least recently used idle model under a
// budget that holds one model at a time (each answer equal to the same request on a
// single-model server), requests waiting for a loading model, separate prefix caches, the
// model label of /metrics, and the start-up refusal of a model that can never fit.
#include "test_server_fixture.h"

#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <future>

#include "loadgen/load_driver.h"
#include "loadgen/load_mix.h"
#include "loadgen/prompts.h"

namespace ubatch::test {
namespace {

std::string tiny_gemma() { return reference_path("models/tiny-gemma3-q8_0.gguf"); }

// A model loaded the way the fixture's serve_model loads one: model, tokenizer, context, engine.
class TestModel : public server::LoadedModel {
 public:
  sched::Engine& engine() override { return *engine_; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  ~TestModel() override { engine_.reset(); }

  static Result<std::unique_ptr<server::LoadedModel>> load(const std::string& path) {
    auto m = std::make_unique<TestModel>();
    Result<std::unique_ptr<gguf::File>> file = gguf::File::open(path);
    if (!file) return file.status();
    std::shared_ptr<const gguf::File> shared(std::move(file.value()));
    Result<std::unique_ptr<Model>> model = Model::load(shared);
    if (!model) return model.status();
    m->model_ = std::shared_ptr<Model>(std::move(model.value()));
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*shared);
    if (!tok) return tok.status();
    m->tokenizer_ = std::move(tok.value());
    ContextParams cp;
    cp.n_ctx = 2048;
    cp.n_batch = sched::EngineConfig{}.n_batch;
    cp.n_ubatch = cp.n_batch;
    cp.n_threads = 1;
    Result<std::unique_ptr<Context>> ctx = Context::create(m->model_, cp);
    if (!ctx) return ctx.status();
    m->context_ = std::move(ctx.value());
    m->engine_ = std::make_unique<sched::Engine>(*m->context_, *m->tokenizer_, sched::EngineConfig{});
    std::unique_ptr<server::LoadedModel> out = std::move(m);
    return out;
  }

 private:
  std::shared_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Context> context_;
  std::unique_ptr<sched::Engine> engine_;
};

struct MultiServer {
  std::unique_ptr<server::HttpServer> http;
  int port = -1;
  std::atomic<int> loads{0};
  ~MultiServer() {
    if (http) http->stop();
  }
};

struct MultiOptions {
  uint64_t budget = 0;          // 0: no limit
  uint64_t model_bytes = 100;   // each model's memory estimate (the budget counts these)
  int load_delay_ms = 0;        // the loader sleeps this long first (a slow load)
  double model_wait_s = 120;
  bool preload = true;
  std::string default_chat;     // --chat-model ("": the first)
};

// "llama" (tiny-llama-q8_0) and "gemma" (tiny-gemma3-q8_0) behind one server.
std::unique_ptr<MultiServer> serve_two(MultiOptions o = {}) {
  spdlog::set_level(spdlog::level::warn);
  auto s = std::make_unique<MultiServer>();
  server::ServerConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.model_wait_s = o.model_wait_s;
  s->http = std::make_unique<server::HttpServer>(cfg);
  std::vector<server::ModelInfo> models(2);
  models[0] = {"llama", tiny_model(), "llama", 0, o.model_bytes};
  models[1] = {"gemma", tiny_gemma(), "gemma3", 0, o.model_bytes};
  server::RegistryOptions ropt;
  ropt.budget_bytes = o.budget;
  ropt.default_chat = o.default_chat;
  MultiServer* raw = s.get();
  const int delay = o.load_delay_ms;
  Status st = s->http->serve_models(models, [raw, delay](const server::ModelInfo& info) {
    if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    raw->loads++;
    return TestModel::load(info.path);
  }, ropt);
  if (!st) return ADD_FAILURE() << st.message(), nullptr;
  Result<int> port = s->http->bind();
  if (!port) return ADD_FAILURE() << port.message(), nullptr;
  s->port = port.value();
  if (Status started = s->http->start(); !started) return ADD_FAILURE() << started.message(), nullptr;
  if (o.preload) s->http->preload_models();
  return s;
}

json completion(const std::string& model, int n = 8) {
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", n}, {"temperature", 0}};
  if (!model.empty()) body["model"] = model;
  return body;
}

// The text a single-model server answers to `body`.
std::string single_answer(const std::string& path, const json& body) {
  auto s = serve_model(path);
  if (!s) return "";
  Reply r = post(s->port, "/v1/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return r.parsed()["choices"][0]["text"];
}

std::map<std::string, std::string> model_states(int port) {
  std::map<std::string, std::string> out;
  Reply r = get(port, "/v1/models");
  EXPECT_EQ(r.status, 200);
  const json list = r.parsed();
  for (const json& m : list["data"]) out[m["id"].get<std::string>()] = m["meta"]["status"].get<std::string>();
  return out;
}

TEST(ServerModels, RoutesByNameAndNamesTheModelThatRan) {
  UBATCH_REQUIRE_REFERENCE();
  auto s = serve_two();
  ASSERT_TRUE(s);
  for (const std::string name : {"llama", "gemma"}) {
    Reply r = post(s->port, "/v1/completions", completion(name).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.parsed()["model"], name);
    EXPECT_EQ(r.parsed()["choices"][0]["text"],
              single_answer(name == "llama" ? tiny_model() : tiny_gemma(), completion("any")));
  }
  // Chat and embeddings route by name too.
  Reply chat = post(s->port, "/v1/chat/completions",
                    json({{"model", "gemma"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}})
                        .dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.parsed()["model"], "gemma");
  Reply embd = post(s->port, "/v1/embeddings", json({{"model", "gemma"}, {"input", "hello"}}).dump());
  ASSERT_EQ(embd.status, 200) << embd.body;
  EXPECT_EQ(embd.parsed()["model"], "gemma");
  // Without "model": the default (the first model).
  Reply none = post(s->port, "/v1/completions", completion("").dump());
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_EQ(none.parsed()["model"], "llama");
}

// The model a dashboard event stream watches: the one named, else the chat default (where the
// page's own "auto" chat goes), as the snapshot's settings say.
std::string watched_model(int port, const std::string& query) {
  std::string buf, model;
  get_stream(port, "/v1/dashboard/events?interval_ms=100" + query, {}, [&](int status, std::string_view data) {
    if (status != 200) return false;
    buf.append(data);
    const size_t at = buf.find("data: ");
    const size_t end = at == std::string::npos ? at : buf.find("\n\n", at);
    if (end == std::string::npos) return true;
    const json snap = json::parse(buf.substr(at + 6, end - at - 6), nullptr, false);
    model = snap.is_object() ? snap["settings"].value("model", "") : "";
    return false;
  });
  return model;
}

TEST(ServerModels, TheDashboardWatchesTheChatDefaultUnlessNamed) {
  UBATCH_REQUIRE_REFERENCE();
  MultiOptions o;
  o.default_chat = "gemma";
  auto s = serve_two(o);
  ASSERT_TRUE(s);
  EXPECT_EQ(watched_model(s->port, ""), "gemma");
  EXPECT_EQ(watched_model(s->port, "&model=llama"), "llama");
}

TEST(ServerModels, UnknownNameIs404WithSeveralModels) {
  UBATCH_REQUIRE_REFERENCE();
  auto s = serve_two();
  ASSERT_TRUE(s);
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/v1/embeddings"}) {
    json body = completion("no-such-model");
    body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
    body["input"] = "hi";
    Reply r = post(s->port, path, body.dump());
    EXPECT_EQ(r.status, 404) << path << " " << r.body;
    const json e = r.parsed()["error"];
    EXPECT_EQ(e["code"], "model_not_found") << r.body;
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["param"], "model");
    EXPECT_NE(e["message"].get<std::string>().find("no-such-model"), std::string::npos);
  }
  Reply bad = post(s->port, "/v1/completions", json({{"model", 5}, {"prompt", "x"}}).dump());
  EXPECT_EQ(bad.status, 400) << bad.body;
}

TEST(ServerModels, OneModelAcceptsAnyName) {
  UBATCH_REQUIRE_TINY_MODEL();
  auto s = serve_model(tiny_model());
  ASSERT_TRUE(s);
  Reply r = post(s->port, "/v1/completions", completion("gpt-4o").dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.parsed()["model"], "test-model");
}

TEST(ServerModels, ListsModelsWithStateSizeAndArchitecture) {
  UBATCH_REQUIRE_REFERENCE();
  MultiOptions o;
  o.preload = false;
  auto s = serve_two(o);
  ASSERT_TRUE(s);
  EXPECT_EQ(model_states(s->port), (std::map<std::string, std::string>{{"llama", "unloaded"}, {"gemma", "unloaded"}}));
  ASSERT_EQ(post(s->port, "/v1/completions", completion("gemma", 1).dump()).status, 200);
  Reply r = get(s->port, "/v1/models");
  ASSERT_EQ(r.status, 200);
  const json data = r.parsed()["data"];
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data[0]["id"], "llama");
  EXPECT_EQ(data[0]["object"], "model");
  EXPECT_EQ(data[0]["owned_by"], "ubatch");
  EXPECT_TRUE(data[0]["created"].is_number_integer());
  EXPECT_EQ(data[0]["meta"]["status"], "unloaded");
  EXPECT_EQ(data[1]["meta"]["status"], "loaded");
  EXPECT_EQ(data[1]["meta"]["architecture"], "gemma3");
  EXPECT_EQ(data[1]["meta"]["memory_bytes"], 100);
  EXPECT_EQ(data[1]["meta"]["n_vocab"], 512);
  EXPECT_EQ(s->loads.load(), 1);
}

// GET /v1/models/{id} (OpenAI's models.retrieve): the listed object, loaded or not; an unknown
// id is 404 model_not_found in OpenAI's shape, with one model served too.
TEST(ServerModels, RetrievesOneModelById) {
  UBATCH_REQUIRE_REFERENCE();
  MultiOptions o;
  o.preload = false;
  auto s = serve_two(o);
  ASSERT_TRUE(s);
  ASSERT_EQ(post(s->port, "/v1/completions", completion("gemma", 1).dump()).status, 200);
  const json data = get(s->port, "/v1/models").parsed()["data"];
  for (const json& m : data) {
    for (const std::string prefix : {"/v1/models/", "/models/"}) {
      Reply r = get(s->port, prefix + m["id"].get<std::string>());
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.parsed(), m);
    }
  }
  EXPECT_EQ(get(s->port, "/v1/models/%67emma").parsed()["id"], "gemma");  // percent-escapes decoded
  for (const char* path : {"/v1/models/no-such-model", "/v1/models/gemma/extra", "/models/x%2Fy"}) {
    Reply r = get(s->port, path);
    EXPECT_EQ(r.status, 404) << path << " " << r.body;
    const json e = r.parsed()["error"];
    EXPECT_EQ(e["code"], "model_not_found") << r.body;
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["param"], "model");
  }
  EXPECT_EQ(post(s->port, "/v1/models/gemma", "{}").status, 404);  // GET only
}

TEST(ServerModels, RetrieveWithOneModelNamesOnlyIt) {
  UBATCH_REQUIRE_TINY_MODEL();
  auto s = serve_model(tiny_model());
  ASSERT_TRUE(s);
  EXPECT_EQ(get(s->port, "/v1/models/test-model").status, 200);
  Reply r = get(s->port, "/v1/models/gpt-4o");  // any name runs a request, but is no model's id
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(r.parsed()["error"]["code"], "model_not_found");
}

// A budget that holds one model: each request unloads the other (idle) model first; every
// answer equals a single-model server's.
TEST(ServerModels, LoadsOnDemandAndUnloadsTheLeastRecentlyUsed) {
  UBATCH_REQUIRE_REFERENCE();
  MultiOptions o;
  o.budget = 150;
  auto s = serve_two(o);
  ASSERT_TRUE(s);
  const std::string want_llama = single_answer(tiny_model(), completion("x"));
  const std::string want_gemma = single_answer(tiny_gemma(), completion("x"));
  EXPECT_EQ(get(s->port, "/health").status, 200);
  for (const std::string name : {"llama", "gemma", "llama", "gemma", "gemma"}) {
    Reply r = post(s->port, "/v1/completions", completion(name).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.parsed()["model"], name);
    EXPECT_EQ(r.parsed()["choices"][0]["text"], name == "llama" ? want_llama : want_gemma) << name;
    std::map<std::string, std::string> st = model_states(s->port);
    EXPECT_EQ(st[name], "loaded");
    EXPECT_EQ(st[name == "llama" ? "gemma" : "llama"], "unloaded");
    EXPECT_EQ(get(s->port, "/health").status, 200);
  }
  EXPECT_EQ(s->loads.load(), 4);  // preload llama, then gemma, llama, gemma (the last gemma was loaded)
  // On one kept-alive connection: an answered request no longer holds its model.
  auto c = client(s->port);
  for (const std::string name : {"llama", "gemma"}) {
    loadgen::HttpReply reply;
    ASSERT_TRUE(c->request("POST", "/v1/completions", {{"Content-Type", "application/json"}},
                           completion(name).dump(), reply).ok());
    EXPECT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"], name == "llama" ? want_llama : want_gemma);
  }
  std::map<std::string, double> m = metrics(s->port);
  // Swaps: llama → gemma → llama → gemma, then on the kept-alive connection → llama → gemma.
  EXPECT_EQ(m["ubatch_model_unloads_total{model=\"llama\"}"], 3);
  EXPECT_EQ(m["ubatch_model_unloads_total{model=\"gemma\"}"], 2);
  EXPECT_EQ(m["ubatch_model_state{model=\"gemma\",state=\"loaded\"}"], 1);
  EXPECT_EQ(m["ubatch_models_memory_budget_bytes"], 150);
}

// A request for a model that is loading waits for it (and /v1/models shows it waiting); one
// whose wait runs out gets 503 model_loading.
TEST(ServerModels, RequestsWaitForALoadingModel) {
  UBATCH_REQUIRE_REFERENCE();
  MultiOptions o;
  o.preload = false;
  o.load_delay_ms = 600;
  auto s = serve_two(o);
  ASSERT_TRUE(s);
  Reply waited;
  std::thread t([&] { waited = post(s->port, "/v1/completions", completion("gemma", 2).dump()); });
  json seen;
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = get(s->port, "/v1/models").parsed()["data"][1]["meta"];
    if (seen["status"] == "loading") break;
  }
  EXPECT_EQ(seen["status"], "loading");
  EXPECT_EQ(seen["requests_waiting"], 1);
  t.join();
  EXPECT_EQ(waited.status, 200) << waited.body;

  MultiOptions quick = o;
  quick.model_wait_s = 0.1;
  auto q = serve_two(quick);
  ASSERT_TRUE(q);
  Reply r = post(q->port, "/v1/completions", completion("gemma", 2).dump());
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.parsed()["error"]["code"], "model_loading");
  EXPECT_FALSE(r.headers.find("Retry-After") == r.headers.end());
  // A request's own deadline bounds its wait too.
  json d = completion("llama", 2);
  d["deadline_ms"] = 50;
  EXPECT_EQ(post(q->port, "/v1/completions", d.dump()).status, 503);
}

// Two models never share KV blocks: a prompt cached by one is not a hit for the other.
TEST(ServerModels, PrefixCachesAreSeparate) {
  UBATCH_REQUIRE_REFERENCE();
  auto s = serve_two();
  ASSERT_TRUE(s);
  json prompt = json::array();
  for (int i = 0; i < 96; ++i) prompt.push_back(3 + (i * 7) % 250);
  auto cached = [&](const std::string& model) {
    json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}};
    Reply r = post(s->port, "/v1/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.parsed()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(cached("llama"), 0);
  EXPECT_GT(cached("llama"), 0);  // its own cache hits
  EXPECT_EQ(cached("gemma"), 0);  // the same ids are no hit in the other model's cache
  EXPECT_GT(cached("gemma"), 0);
  std::map<std::string, double> m = metrics(s->port);
  EXPECT_GT(m["ubatch_cached_prompt_tokens_total{model=\"llama\"}"], 0);
  EXPECT_GT(m["ubatch_cached_prompt_tokens_total{model=\"gemma\"}"], 0);
  EXPECT_EQ(m["ubatch_generated_tokens_total{model=\"llama\"}"], 2);
  EXPECT_EQ(m["ubatch_generated_tokens_total{model=\"gemma\"}"], 2);
}

// `ubatch load --mix`'s traffic: chat on one model, completions on another, embeddings, from 4
// users at once; with both models loaded and with a budget that holds one at a time (the
// models then swap under load, requests waiting for their model's turn). No errors, nothing
// lost, every kind answered by its model.
void run_mix(uint64_t budget) {
  MultiOptions o;
  o.budget = budget;
  auto s = serve_two(o);
  ASSERT_TRUE(s);
  loadgen::LoadConfig cfg;
  cfg.endpoint.url = "http://127.0.0.1:" + std::to_string(s->port);
  cfg.endpoint.timeout_s = 120;
  cfg.users = 4;
  cfg.n_requests = 48;
  loadgen::RequestMix mix(7, {4, 24}, {2, 8});
  Result<std::vector<loadgen::MixClass>> classes = loadgen::parse_mix("chat@gemma:2,completion@llama:1,embedding@llama:1");
  ASSERT_TRUE(classes) << classes.message();
  mix.set_classes(classes.value());
  const std::string before = get(s->port, "/metrics").body;
  Result<loadgen::LoadReport> r = loadgen::run_load(cfg, mix);
  ASSERT_TRUE(r) << r.message();
  for (const auto& [kind, example] : r->error_examples) ADD_FAILURE() << kind << ": " << example;
  EXPECT_EQ(r->n_errors, 0);
  EXPECT_EQ(r->n_lost, 0);
  EXPECT_EQ(r->n_completed, 48);
  ASSERT_EQ(r->kinds.size(), 3u);
  for (const auto& [kind, c] : r->kinds) {
    EXPECT_GT(c.n_started, 0) << kind;
    EXPECT_EQ(c.n_completed, c.n_started) << kind;
  }
  std::map<std::string, double> m = metrics(s->port);
  if (budget > 0) {
    // The models swapped under load (an unloaded model's engine series are gone with it).
    EXPECT_GT(m["ubatch_model_unloads_total{model=\"llama\"}"] + m["ubatch_model_unloads_total{model=\"gemma\"}"], 0);
    return;
  }
  // Each model ran its own kinds: busy time for both.
  const std::map<std::string, double> busy = loadgen::busy_seconds_delta(before, get(s->port, "/metrics").body);
  EXPECT_GT(busy.count("llama") ? busy.at("llama") : 0.0, 0.0);
  EXPECT_GT(busy.count("gemma") ? busy.at("gemma") : 0.0, 0.0);
}

TEST(ServerModels, LoadMixBothLoaded) {
  UBATCH_REQUIRE_REFERENCE();
  run_mix(0);
}

TEST(ServerModels, LoadMixUnderAOneModelBudget) {
  UBATCH_REQUIRE_REFERENCE();
  run_mix(150);
}

TEST(ServerModels, ParsesTheMix) {
  Result<std::vector<loadgen::MixClass>> m = loadgen::parse_mix("chat@a:2,completion,embedding@b:0.5");
  ASSERT_TRUE(m) << m.message();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].endpoint, "/v1/chat/completions");
  EXPECT_EQ((*m)[0].model, "a");
  EXPECT_EQ((*m)[0].weight, 2);
  EXPECT_EQ((*m)[1].label(), "completion");
  EXPECT_EQ((*m)[2].endpoint, "/v1/embeddings");
  EXPECT_EQ((*m)[2].weight, 0.5);
  for (const char* bad : {"", "chat:0", "chat:x", "image@a", "chat@a:-1"}) EXPECT_FALSE(loadgen::parse_mix(bad)) << bad;
  // The draw follows the weights (a seeded function of the index).
  std::map<std::string, int> n;
  for (int64_t i = 0; i < 4000; ++i) n[loadgen::pick_class(*m, 1, i).label()]++;
  EXPECT_NEAR(n["chat@a"] / 4000.0, 2 / 3.5, 0.03);
  EXPECT_NEAR(n["embedding@b"] / 4000.0, 0.5 / 3.5, 0.03);
  EXPECT_EQ(loadgen::pick_class(*m, 1, 17).label(), loadgen::pick_class(*m, 1, 17).label());
}

// `ubatch serve` with no -m serves the two embedded models: chat without "model" goes to the
// instruct model (SmolLM2), completions to the base model (Gemma 3).
TEST(ServerModels, ServesBothEmbeddedModelsByDefault) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  const std::filesystem::path smol = std::filesystem::path(default_model()).parent_path() /
                                     "smollm2-135m-instruct-q4_1.gguf";
  if (!std::filesystem::exists(smol)) GTEST_SKIP() << "SmolLM2 not installed at " << smol << " (scripts/setup.sh)";
  setenv("UBATCH_MODEL", default_model().c_str(), 1);
  const std::string log = testing::TempDir() + "/serve_default_models.log";
  SpawnedServer s = spawn_serve(ubatch_argv({"serve", "--port", "0", "--threads", "1", "--n-ctx", "512",
                                             "--n-parallel", "2"}), log);
  ASSERT_GT(s.pid, 0);
  struct Stop {
    pid_t pid;
    ~Stop() {
      kill(pid, SIGTERM);
      int status = 0;
      waitpid(pid, &status, 0);
    }
  } stop{s.pid};
  ASSERT_TRUE(s.ready) << "see " << log;
  // /health turns 200 with the first model in; both load at start-up (the budget holds both).
  std::map<std::string, std::string> states = model_states(s.port);
  ASSERT_EQ(states.size(), 2u);
  for (const auto& [id, state] : states) EXPECT_TRUE(state == "loaded" || state == "loading") << id << " " << state;
  Reply chat = post(s.port, "/v1/chat/completions",
                    json({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}}).dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.parsed()["model"], "smollm2-135m-instruct-q4_1");
  Reply completion = post(s.port, "/v1/completions", json({{"prompt", "Hello"}, {"max_tokens", 2}}).dump());
  ASSERT_EQ(completion.status, 200) << completion.body;
  EXPECT_EQ(completion.parsed()["model"], "gemma-3-270m-q4_k_m");
  Reply named = post(s.port, "/v1/chat/completions",
                     json({{"model", "gemma-3-270m-q4_k_m"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                           {"max_tokens", 2}}).dump());
  ASSERT_EQ(named.status, 200) << named.body;
  EXPECT_EQ(named.parsed()["model"], "gemma-3-270m-q4_k_m");
  EXPECT_EQ(model_states(s.port), (std::map<std::string, std::string>{{"gemma-3-270m-q4_k_m", "loaded"},
                                                                      {"smollm2-135m-instruct-q4_1", "loaded"}}));
}

// `ubatch serve` refuses, at start-up, a model that can never fit --models-memory.
// Unload races (a class of issue 31): under a budget that holds one model, streams to one model
// are cut mid-answer while requests for the other force it out, again and again. A model is
// never unloaded under a request (leases), a cut stream's lease is given back, and both models
// keep answering; nothing is left in use or waiting at the end.
TEST(ServerModels, UnloadRacesWithDisconnectsLeaveNothingBehind) {
  UBATCH_REQUIRE_REFERENCE();
  MultiOptions o;
  o.budget = 150;  // one model at a time
  std::unique_ptr<MultiServer> s = serve_two(o);
  ASSERT_NE(s, nullptr);
  for (int round = 0; round < 3; ++round) {
    const std::string cut_model = round % 2 ? "gemma" : "llama", other = round % 2 ? "llama" : "gemma";
    RawConnection cut(s->port);
    ASSERT_TRUE(cut.ok());
    json body = completion(cut_model, 400);
    body["stream"] = true;
    body["ignore_eos"] = true;
    ASSERT_TRUE(cut.send_post("/v1/completions", body.dump()));
    auto other_reply = std::async(std::launch::async, [&] { return post(s->port, "/v1/completions", completion(other, 4).dump()); });
    EXPECT_NE(cut.read_until("data: ", 2).find("200 OK"), std::string::npos) << "round " << round;
    cut.close();  // the client goes away mid-stream: its lease must come back
    const Reply r = other_reply.get();
    EXPECT_EQ(r.status, 200) << "round " << round << ": " << r.body;
  }
  for (const char* name : {"llama", "gemma"}) {
    const Reply r = post(s->port, "/v1/completions", completion(name, 2).dump());
    EXPECT_EQ(r.status, 200) << name << ": " << r.body;
  }
  const json list = get(s->port, "/v1/models").parsed();
  for (const json& m : list["data"]) {
    EXPECT_EQ(m["meta"]["requests_active"], 0) << m.dump();
    EXPECT_EQ(m["meta"]["requests_waiting"], 0) << m.dump();
  }
  EXPECT_EQ(get(s->port, "/health").status, 200);
}

// /health tells whether a model can serve (issue 31: it answered 200 when the only model had
// failed to load): 503 "loading" before start-up loading ends, 503 "no_model" naming each
// model's error once every model failed, 200 once one loads (here on demand, when a request
// retries the load after the cause went away).
TEST(ServerModels, HealthIs503WhenNoModelCanServe) {
  UBATCH_REQUIRE_REFERENCE();
  spdlog::set_level(spdlog::level::off);
  server::ServerConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  server::HttpServer http(cfg);
  std::atomic<bool> broken{true};
  Status st = http.serve_models({{"only", tiny_model(), "llama", 0, 100}},
                                [&broken](const server::ModelInfo& info) -> Result<std::unique_ptr<server::LoadedModel>> {
                                  if (broken) return Status::error("the file is broken");
                                  return TestModel::load(info.path);
                                },
                                {});
  ASSERT_TRUE(st) << st.message();
  Result<int> port = http.bind();
  ASSERT_TRUE(port) << port.message();
  ASSERT_TRUE(http.start());
  const Reply loading = get(port.value(), "/health");
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(loading.parsed()["status"], "loading") << loading.body;

  const Status preloaded = http.preload_models();
  EXPECT_FALSE(preloaded);
  EXPECT_NE(preloaded.message().find("only: the file is broken"), std::string::npos) << preloaded.message();
  const Reply none = get(port.value(), "/health");
  EXPECT_EQ(none.status, 503) << none.body;
  EXPECT_EQ(none.parsed()["status"], "no_model") << none.body;
  EXPECT_EQ(none.parsed()["error"]["code"], "no_model") << none.body;
  EXPECT_NE(none.body.find("the file is broken"), std::string::npos) << none.body;
  EXPECT_EQ(none.headers.count("Retry-After"), 1u);

  broken = false;  // the next request loads it
  const Reply r = post(port.value(), "/v1/completions", completion("", 2).dump());
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(get(port.value(), "/health").status, 200);
  http.stop();
}

TEST(ServerModels, RefusesAModelThatCanNeverFit) {
  UBATCH_REQUIRE_REFERENCE();
  int status = 0;
  const std::string out = run_command(ubatch_command() + " serve --port 0 -m " + tiny_model() + " -m " + tiny_gemma() +
                                          " --alias a --models-memory 1M 2>&1",
                                      &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("could never be loaded"), std::string::npos) << out;
  EXPECT_NE(out.find("--models-memory is 1 MiB"), std::string::npos) << out;
  // An --alias names the -m before it (the message names the first model by its alias).
  const std::string aliased = run_command(ubatch_command() + " serve --port 0 -m " + tiny_model() +
                                              " --alias first -m " + tiny_gemma() + " --models-memory 1M 2>&1",
                                          &status);
  EXPECT_NE(aliased.find("model 'first' (" + tiny_model() + ")"), std::string::npos) << aliased;
  const std::string orphan =
      run_command(ubatch_command() + " serve --port 0 --alias lost -m " + tiny_model() + " 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(orphan.find("must follow the -m"), std::string::npos) << orphan;
}

}  // namespace
}  // namespace ubatch::test
