// `ubatch serve`: the OpenAI-compatible HTTP server (src/server/) over the engine
// (src/sched/). With no arguments it serves the two embedded models (Gemma 3 270M for
// completions, SmolLM2-135M-Instruct for chat) on 127.0.0.1:8080; -m (repeatable, --alias after
// each) and --models-dir name others, loaded on demand within --models-memory
// (serve_models.h, server/model_registry.h). The port opens first (/health answers 503 until
// a first model is loaded). SIGINT or SIGTERM starts
// a graceful shutdown: /health answers 503 "draining", new requests are refused, running ones
// may finish within --shutdown-timeout seconds, then the rest are cancelled (a stream gets a
// final error event); exit status 0. A second signal skips the wait.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "sched/engine.h"
#include "server/http_server.h"
#include "tools/command.h"
#include "tools/options.h"
#include "tools/serve_models.h"

namespace ubatch::tools {
namespace {

struct ServeOptions {
  ModelOptions model;
  SamplingParams sampling;
  server::ServerConfig server;
  sched::EngineConfig engine;
  std::string policy = "ubatch";
  std::string pooling;  // --pooling: "" (the model file's, else mean), mean, cls, last
  std::string reasoning_format = "auto";  // --reasoning-format: none, auto, deepseek
  std::vector<ModelFile> models;         // -m (repeatable), each with the --alias after it
  std::string models_dir;
  std::string models_memory;             // "" : kDefaultModelsMemoryShare of MemAvailable
  std::string chat_model, completion_model;
  std::string log_level = "info";
  double shutdown_timeout_s = 10;
  bool perf = false;
  const CLI::Option* seed_option = nullptr;
  const CLI::Option* n_batch_option = nullptr;
};

int run_serve(ServeOptions& o) {
  // Signals are taken by sigwait() below: block them before any thread exists, so every
  // thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  spdlog::set_default_logger(spdlog::stderr_color_mt("serve"));
  spdlog::set_level(spdlog::level::from_str(o.log_level));

  if (!sched::parse_policy(o.policy, o.engine.policy)) {
    fmt::print(stderr, "error: --sched-policy: unknown policy '{}' (static, grouped, ubatch)\n", o.policy);
    return 1;
  }
  // Every running sequence decodes one token per step, so the budget must hold them all:
  // without --n-batch it grows to --n-parallel; an explicit smaller one is an error.
  if (o.model.n_batch < o.engine.n_parallel) {
    if (o.n_batch_option != nullptr && o.n_batch_option->count() > 0) {
      fmt::print(stderr, "error: --n-batch {} is below --n-parallel {}: each step decodes one token of every running "
                 "sequence (give --n-batch >= --n-parallel)\n", o.model.n_batch, o.engine.n_parallel);
      return 1;
    }
    o.model.n_batch = o.engine.n_parallel;
  }
  if (o.pooling == "mean") o.server.pooling = sched::Pooling::Mean;
  if (o.pooling == "cls") o.server.pooling = sched::Pooling::Cls;
  if (o.pooling == "last") o.server.pooling = sched::Pooling::Last;
  o.server.reasoning_format = chat::parse_reasoning_format(o.reasoning_format).value_or(chat::ReasoningFormat::Auto);
  o.engine.n_batch = o.model.n_batch;  // --n-batch: the engine's token budget per step
  o.engine.max_tokens_cap = o.server.max_tokens_cap;
  server::ServerConfig cfg = o.server;
  if (!cfg.chat_template.empty()) {
    Result<std::string> tmpl = read_chat_template_option(cfg.chat_template);
    if (!tmpl) return fmt::print(stderr, "error: {}\n", tmpl.message()), 1;
    cfg.chat_template = std::move(tmpl.value());
  }
  cfg.sampling = o.sampling;
  cfg.random_seed = o.seed_option == nullptr || o.seed_option->count() == 0;
  // Every connection is a descriptor: lift the soft limit to the hard one, and keep
  // --max-connections within it (with room for the model file, logs and the listener).
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    if (nofile.rlim_cur < nofile.rlim_max) {
      nofile.rlim_cur = nofile.rlim_max;
      setrlimit(RLIMIT_NOFILE, &nofile);
      getrlimit(RLIMIT_NOFILE, &nofile);
    }
    const size_t room = nofile.rlim_cur > 128 ? static_cast<size_t>(nofile.rlim_cur) - 64 : 64;
    if (cfg.max_connections > room) {
      spdlog::warn("--max-connections {} exceeds the open-file limit ({}): using {}", cfg.max_connections,
                   static_cast<uint64_t>(nofile.rlim_cur), room);
      cfg.max_connections = room;
    }
  }

  // The models: -m files (with their aliases), --models-dir; none: the two embedded models,
  // chat to the instruct model (SmolLM2) and completions to the base model (Gemma 3).
  std::vector<ModelFile> files = o.models;
  server::RegistryOptions ropt;
  ropt.default_chat = o.chat_model;
  ropt.default_completion = o.completion_model;
  if (files.empty() && o.models_dir.empty()) {
    const std::filesystem::path base = default_model_path();
    const std::filesystem::path chat = base.parent_path() / "smollm2-135m-instruct-q4_1.gguf";
    files.push_back({base.string(), ""});
    std::error_code ec;
    if (std::filesystem::exists(chat, ec)) {
      files.push_back({chat.string(), ""});
      if (ropt.default_chat.empty()) ropt.default_chat = chat.stem().string();
      if (ropt.default_completion.empty()) ropt.default_completion = base.stem().string();
    }
  }
  Result<std::vector<ModelFile>> collected =
      collect_model_files(std::move(files), o.models_dir, [](bool warning, const std::string& line) {
        if (warning)
          spdlog::warn("{}", line);
        else
          spdlog::info("{}", line);
      });
  if (!collected) return fmt::print(stderr, "error: {}\n", collected.message()), 1;
  o.model.ctx_sequences = o.engine.n_parallel;  // --n-ctx 0: a full context for every slot
  std::vector<server::ModelInfo> infos;
  for (const ModelFile& f : collected.value()) {
    Result<server::ModelInfo> info = probe_model(f, o.model);
    // A file named by -m must be a model; one found in --models-dir that is not is skipped
    // (the directory may hold other files), and the message never shows the file's bytes.
    if (!info && f.from_dir) {
      spdlog::warn("--models-dir: skipping {}", info.message());  // the message starts with the path
      continue;
    }
    if (!info) return fmt::print(stderr, "error: {}\n", info.message()), 1;
    infos.push_back(std::move(info.value()));
  }
  if (infos.empty()) return fmt::print(stderr, "error: --models-dir {}: no file in it is a GGUF model\n", o.models_dir), 1;
  const uint64_t available = available_memory_bytes();
  if (!o.models_memory.empty()) {
    Result<uint64_t> budget = parse_memory_budget(o.models_memory, available);
    if (!budget) return fmt::print(stderr, "error: {}\n", budget.message()), 1;
    ropt.budget_bytes = budget.value();
  } else {
    ropt.budget_bytes = static_cast<uint64_t>(static_cast<double>(available) * kDefaultModelsMemoryShare);
  }
  cfg.model_name = infos.front().name;
  server::HttpServer http(cfg);
  if (Status s = http.serve_models(infos, make_model_loader(o.model, o.engine), ropt); !s)
    return fmt::print(stderr, "error: {}\n", s.message()), 1;
  Result<int> port = http.bind();
  if (!port) return fmt::print(stderr, "error: {}\n", port.message()), 1;
  if (Status s = http.start(); !s) return fmt::print(stderr, "error: {}\n", s.message()), 1;
  spdlog::info("listening on http://{}:{} ({} HTTP I/O threads, at most {} connections); {} models, memory budget "
               "{:.0f} MiB", cfg.host, port.value(), cfg.http_threads, cfg.max_connections, infos.size(),
               static_cast<double>(ropt.budget_bytes) / 1048576.0);
  for (const server::ModelInfo& m : infos)
    spdlog::info("model {}: {} ({}, {:.0f} MiB file, about {:.0f} MiB loaded){}{}", m.name, m.path, m.arch,
                 static_cast<double>(m.file_bytes) / 1048576.0, static_cast<double>(m.memory_bytes) / 1048576.0,
                 m.name == ropt.default_chat ? "; default for chat" : "",
                 m.name == ropt.default_completion ? "; default for completions" : "");
  // A model that failed to load may load on a later request (a file being copied in), but when
  // every model failed and none loaded, nothing could ever answer: exit instead of serving 503s.
  if (Status s = http.preload_models(); !s) {
    http.stop();
    return fmt::print(stderr, "error: {}\n", s.message()), 1;
  }
  spdlog::info("ready: policy {}, n_parallel {}, n_batch {} per model", sched::policy_name(o.engine.policy),
               o.engine.n_parallel, o.engine.n_batch);
  int exit_code = 0;
  {
    for (const std::string& line : machine_lines(o.model.n_threads)) spdlog::info("{}", line);
    if (cfg.webui)
      spdlog::info("web page (playground, live dashboard): http://{}:{}/", cfg.host, port.value());
    const auto t_ready = std::chrono::steady_clock::now();
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info("signal {}: draining (health answers 503; {} requests running, waiting up to {:g} s)", sig,
                 http.requests_in_flight(), o.shutdown_timeout_s);
    http.drain();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout_s * 1000));
    const timespec tick{0, 100 * 1000 * 1000};
    while (!http.wait_idle(std::chrono::milliseconds(0)) && std::chrono::steady_clock::now() < deadline) {
      if (sigtimedwait(&signals, nullptr, &tick) > 0) {
        spdlog::info("second signal: not waiting any longer");
        break;
      }
    }
    if (http.requests_in_flight() > 0)
      spdlog::info("shutting down: cancelling {} requests still running", http.requests_in_flight());
    else
      spdlog::info("shutting down: no request running");
    http.stop();  // the engines go with the server (its model registry)
    if (o.perf) {
      const double wall_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_ready).count();
      for (const auto& [name, metrics] : http.model_metrics())
        fmt::print(stderr, "perf: model {}\n{}", name, sched::perf_summary(metrics, wall_ms));
    }
  }
  return exit_code;
}

UBATCH_REGISTER_COMMAND("serve", "OpenAI-compatible HTTP server (see docs/API.md)", [](CLI::App& sub) -> std::function<int()> {
  auto o = std::make_shared<ServeOptions>();
  o->model.n_batch = sched::EngineConfig{}.n_batch;  // one --n-batch: the context's limit is the engine's budget
  add_model_options(sub, o->model);
  add_sampling_options(sub, o->sampling);
  o->seed_option = sub.get_option("--seed");
  o->n_batch_option = sub.get_option("--n-batch");
  server::ServerConfig& s = o->server;
  sub.add_flag("--perf", o->perf, "print a performance summary (steps, batch fill, TTFT/TPOT, KV, hit rate) at exit");
  sub.add_option("--host", s.host, "address to bind (use 0.0.0.0 to accept other machines)")->capture_default_str();
  sub.add_option("--port", s.port, "TCP port (0: an ephemeral port, printed at start)")->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub.add_option("--api-key", s.api_key, "require \"Authorization: Bearer KEY\" on every route but /health")
      ->envname("UBATCH_API_KEY");
  sub.add_option("--max-body", s.max_body, "largest request body in bytes (larger: 413)")->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  sub.add_option("--max-n", s.max_n, "most samples (n) per request")->capture_default_str()->check(CLI::Range(1, 256));
  sub.add_option("--max-tokens", s.max_tokens_cap, "most tokens (max_tokens) per sample")->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub.add_flag("--log-prompts", s.log_prompts, "log prompt text (off: only ids and token counts)");
  sub.add_flag_callback("--no-parse-special", [&s] { s.parse_special = false; },
               "tokenize /v1/completions text prompts as plain text: special-token text such as "
               "<start_of_turn> stays text (chat content is always plain text)");
  sub.add_option("--reasoning-format", o->reasoning_format,
                 "reasoning in chat replies: none (left in content), auto (reasoning_content when the template "
                 "thinks or the prompt opens a <think> block), deepseek (always split <think> blocks); a request's "
                 "reasoning_format overrides it")
      ->capture_default_str()->check(CLI::IsMember({"none", "auto", "deepseek"}));
  sub.add_option("--pooling", o->pooling,
                 "how /v1/embeddings pools the final hidden states: mean, cls (first token), last (default: the "
                 "model file's <arch>.pooling_type, else mean)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  sub.add_flag_callback("--no-normalize", [&s] { s.embd_normalize = false; },
                        "/v1/embeddings returns the pooled vectors as they are, not L2-normalised");
  sub.add_flag_callback("--no-webui", [&s] { s.webui = false; },
                        "no web page: GET / (playground, dashboard) and /v1/dashboard/events answer 404");
  sub.add_option("--http-threads", s.http_threads,
                 "I/O threads serving every HTTP connection (connections do not hold threads)")
      ->capture_default_str()->check(CLI::Range(1, 256));
  sub.add_option("--request-threads", s.request_threads,
                 "threads parsing and checking requests (JSON, tokenizing, templates, grammars) off the I/O threads")
      ->capture_default_str()->check(CLI::Range(1, 256));
  sub.add_option("--max-logit-bias", s.max_logit_bias,
                 "most logit_bias entries per request (0: one per token of the vocabulary)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 24));
  sub.add_option("--max-connections", s.max_connections,
                 "most open connections; more are accepted and closed at once")
      ->capture_default_str()->check(CLI::Range(size_t{1}, size_t{1} << 20));
  sub.add_option("--max-header", s.max_header, "largest request line + header fields in bytes (larger: 431)")
      ->capture_default_str()->check(CLI::Range(size_t{1024}, size_t{1} << 20));
  sub.add_option("--keep-alive", s.keep_alive_timeout_s,
                 "seconds a connection may wait for the first byte of a request (idle keep-alive)")
      ->capture_default_str()->check(CLI::Range(1, 3600));
  sub.add_option("--header-timeout", s.header_timeout_s,
                 "seconds from a request's first byte to the end of its header (else 408, closed)")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  sub.add_option("--body-timeout", s.body_timeout_s, "seconds from the end of the header to the end of the body (else 408)")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  sub.add_option("--send-timeout", s.send_timeout_s, "seconds a write to a client may stall before the connection closes")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  sub.add_option("--stream-buffer", s.stream_buffer,
                 "bytes of a stream queued for a slow reader before its request is cancelled")
      ->capture_default_str()->check(CLI::Range(size_t{4096}, size_t{1} << 30));
  sub.add_option("--stream-keepalive", s.stream_keepalive_s,
                 "seconds a stream may stay silent (queued, prefilling a long prompt, preempted) before it sends "
                 "its status and headers and then a ': keep-alive' comment, again after each such silence, so "
                 "that a proxy's idle timeout does not cut it (0: off)")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  sub.add_option("--cors-origin", s.cors_origins,
                 "browser origin allowed to call the API (repeat, or comma-separate; '*': any); default none")
      ->delimiter(',');
  sub.add_option("--shutdown-timeout", o->shutdown_timeout_s,
                 "on SIGTERM/SIGINT, seconds running requests may take to finish before they are cancelled")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  sub.remove_option(sub.get_option("--model"));
  // Parsed as they come (trigger_on_parse), so that an --alias names the -m before it.
  sub.add_option_function<std::string>(
         "-m,--model", [o](const std::string& path) { o->models.push_back({path, ""}); },
         "GGUF model file to serve (repeat for several; default: the embedded Gemma 3 270M and, when "
         "installed, SmolLM2-135M-Instruct)")
      ->trigger_on_parse()->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub.add_option_function<std::string>(
         "--alias", [o](const std::string& alias) {
           if (o->models.empty()) throw CLI::ValidationError("--alias", "--alias must follow the -m it names");
           if (!o->models.back().name.empty())
             throw CLI::ValidationError("--alias", "two --alias for the -m " + o->models.back().path);
           o->models.back().name = alias;
         },
         "model id in /v1/models and responses for the -m before it (default: the file's stem)")
      ->trigger_on_parse()->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub.add_option("--models-dir", o->models_dir, "serve every .gguf file of this directory too (named by file stem)");
  sub.add_option("--models-memory", o->models_memory,
                 "most memory the loaded models may take together (estimates: file x2 + KV cache): bytes with an "
                 "optional K/M/G/T, or a percentage of available memory; past it the least recently used idle "
                 "model is unloaded (default: 75% of MemAvailable)");
  sub.add_option("--chat-model", o->chat_model, "model for chat requests that name none (default: the first)");
  sub.add_option("--completion-model", o->completion_model,
                 "model for completion and embedding requests that name none (default: the first)");
  sub.add_option("--model-wait", s.model_wait_s,
                 "seconds a request for a model that is not loaded waits for it (or its deadline_ms) before 503")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  sub.add_option("--chat-template", s.chat_template,
                 "chat format: a family (gemma, llama3, chatml, llama2, phi3), a template file, or a template's "
                 "text (default: the model's, else guessed from its vocabulary)");
  sub.add_option("--n-parallel", o->engine.n_parallel, "most sequences decoding at once (-np)")->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub.add_option("--max-queue", o->engine.max_queue, "waiting requests before 503")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--sched-policy", o->policy, "scheduling policy: static, grouped, ubatch")->capture_default_str();
  sub.add_option("--batch-window-ms", o->engine.batch_window_ms, "hold a small batch this long to gather more")
      ->capture_default_str()->check(CLI::Range(0.0, 60000.0));
  sub.add_option("--lambda", o->engine.lambda, "weight of the latency penalty")->capture_default_str();
  sub.add_option("--mu", o->engine.mu, "weight of the cache-hit bonus")->capture_default_str();
  sub.add_option("--aging-ms", o->engine.aging_ms, "waiting this long raises priority by one level (0: no aging)")
      ->capture_default_str()->check(CLI::Range(0.0, 1e9));
  sub.add_option("--preempt-margin", o->engine.preempt_margin,
                 "a waiting request preempts a running sequence ranked at least this many levels below it "
                 "(0: never preempt for priority)")
      ->capture_default_str()->check(CLI::Range(0, 2000000));
  sub.add_option("--preempt-min-run-ms", o->engine.preempt_min_run_ms,
                 "a sequence runs at least this long after (re)admission before a priority preemption")
      ->capture_default_str()->check(CLI::Range(0.0, 1e9));
  add_spec_options(sub, o->engine);
  sub.add_option("--log-level", o->log_level, "trace, debug, info, warn, error, off")->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  return [o] { return run_serve(*o); };
});

}  // namespace
}  // namespace ubatch::tools
