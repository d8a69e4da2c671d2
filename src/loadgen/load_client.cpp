#include "loadgen/load_client.h"

#include <algorithm>

#include <fmt/format.h>

#include "loadgen/http_client.h"

namespace ubatch::loadgen {

using json = nlohmann::json;

bool EndpointConfig::is_chat() const { return endpoint.find("chat") != std::string::npos; }

Status validate(const EndpointConfig& cfg) {
  HttpClientOptions o;
  if (Status s = parse_base_url(cfg.url, o); !s) return Status::error("--url: " + s.message());
  if (cfg.endpoint.empty() || cfg.endpoint[0] != '/')
    return Status::error(fmt::format("--endpoint: must start with '/', got '{}'", cfg.endpoint));
  if (!(cfg.timeout_s > 0) || !(cfg.connect_timeout_s > 0)) return Status::error("timeouts must be positive");
  return Status::ok();
}

const std::string& spec_endpoint(const EndpointConfig& cfg, const RequestSpec& spec) {
  return spec.endpoint.empty() ? cfg.endpoint : spec.endpoint;
}

bool is_embeddings(const std::string& endpoint) { return endpoint.find("embeddings") != std::string::npos; }

json request_body(const EndpointConfig& cfg, const RequestSpec& spec) {
  json b = json::object();
  const std::string& endpoint = spec_endpoint(cfg, spec);
  const std::string& model = spec.model.empty() ? cfg.model : spec.model;
  if (!model.empty()) b["model"] = model;
  if (is_embeddings(endpoint)) {
    b["input"] = spec.prompt;
    return b;
  }
  if (endpoint.find("chat") != std::string::npos)
    b["messages"] = json::array({json{{"role", "user"}, {"content", spec.prompt}}});
  else
    b["prompt"] = spec.prompt;
  b["max_tokens"] = spec.max_tokens;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  if (cfg.ignore_eos) b["ignore_eos"] = true;
  if (spec.priority != 0) b["priority"] = spec.priority;
  if (spec.deadline_ms > 0) b["deadline_ms"] = spec.deadline_ms;
  if (cfg.temperature >= 0) b["temperature"] = cfg.temperature;
  return b;
}

namespace {

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

int64_t int_or(const json* j, int64_t fallback) {
  return j && j->is_number_integer() ? j->get<int64_t>() : fallback;
}

std::string error_message(const json& e) {
  if (const json* m = member(e, "message"); m && m->is_string()) return m->get<std::string>();
  if (e.is_string()) return e.get<std::string>();
  return e.dump();
}

}  // namespace

bool parse_stream_chunk(std::string_view data, StreamChunk& chunk) {
  chunk = StreamChunk{};
  json j = json::parse(data.begin(), data.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    chunk.error = fmt::format("event data is not JSON: '{}'", data.substr(0, 80));
    return false;
  }
  if (const json* e = member(j, "error"); e && !e->is_null()) {
    chunk.error = error_message(*e);
    if (chunk.error.empty()) chunk.error = "error";
  }
  if (const json* choices = member(j, "choices"); choices && choices->is_array() && !choices->empty()) {
    const json& c = (*choices)[0];
    if (const json* t = member(c, "text"); t && t->is_string()) {
      chunk.text = t->get<std::string>();
    } else if (const json* d = member(c, "delta")) {
      if (const json* content = member(*d, "content"); content && content->is_string())
        chunk.text = content->get<std::string>();
    }
    if (const json* f = member(c, "finish_reason"); f && f->is_string()) chunk.finish_reason = f->get<std::string>();
  }
  if (const json* u = member(j, "usage"); u && u->is_object()) {
    chunk.has_usage = true;
    chunk.prompt_tokens = int_or(member(*u, "prompt_tokens"), -1);
    chunk.completion_tokens = int_or(member(*u, "completion_tokens"), -1);
  }
  return true;
}

bool RequestResult::deadline_missed() const {
  return (ok && finish_reason == "deadline") || status == 504 || error_code == "deadline_unattainable";
}

double RequestResult::tpot_ms() const {
  if (ttft_ms < 0 || n_output_tokens < 2) return -1;
  return (e2e_ms - ttft_ms) / static_cast<double>(n_output_tokens - 1);
}

void StreamCollector::feed(std::string_view bytes, TimePoint now) {
  events_.clear();
  parser_.feed(bytes, events_);
  for (const SseEvent& ev : events_) {
    if (done_) break;  // nothing counts after [DONE]
    if (ev.is_done()) {
      done_ = true;
      break;
    }
    StreamChunk c;
    parse_stream_chunk(ev.data, c);
    if (!c.error.empty()) {
      if (stream_error_.empty()) stream_error_ = c.error;
      continue;
    }
    if (!c.text.empty()) {
      const double t = ms(now);
      if (ttft_ms_ < 0)
        ttft_ms_ = t;
      else
        itl_ms_.push_back(t - last_text_ms_);
      last_text_ms_ = t;
      ++n_text_chunks_;
    }
    if (c.has_usage) {
      has_usage_ = true;
      prompt_tokens_ = c.prompt_tokens;
      completion_tokens_ = c.completion_tokens;
    }
    if (!c.finish_reason.empty()) finish_reason_ = c.finish_reason;
  }
}

void StreamCollector::finish(RequestResult& r, TimePoint now) const {
  r.e2e_ms = ms(now);
  r.ttft_ms = ttft_ms_;
  r.itl_ms = itl_ms_;
  r.n_text_chunks = n_text_chunks_;
  r.usage_reported = has_usage_ && completion_tokens_ >= 0;
  r.n_output_tokens = r.usage_reported ? completion_tokens_ : n_text_chunks_;
  r.n_prompt_tokens = has_usage_ ? prompt_tokens_ : -1;
  r.finish_reason = finish_reason_;
  if (!stream_error_.empty()) {
    r.ok = false;
    r.error_kind = "stream_error";
    r.error = stream_error_;
  } else if (!done_) {
    r.ok = false;
    r.error_kind = "incomplete";
    r.error = parser_.has_partial() ? "stream cut off in the middle of an event" : "stream ended without [DONE]";
  } else {
    r.ok = true;
    r.error_kind.clear();
    r.error.clear();
  }
}

struct HttpStreamClient::Impl {
  static HttpClientOptions options(const EndpointConfig& c) {
    HttpClientOptions o;
    parse_base_url(c.url, o);  // validated by run_load (validate()); a bad one fails to connect
    o.connect_timeout_s = c.connect_timeout_s;
    o.io_timeout_s = c.timeout_s;
    return o;
  }
  explicit Impl(const EndpointConfig& c) : cfg(c), cli(options(c)) {}
  EndpointConfig cfg;
  HttpClient cli;
  HttpHeaders fields(bool stream) const {
    HttpHeaders h;
    if (stream) h.emplace("Accept", "text/event-stream");
    h.emplace("Content-Type", "application/json");
    if (!cfg.api_key.empty()) h.emplace("Authorization", "Bearer " + cfg.api_key);
    return h;
  }
};

HttpStreamClient::HttpStreamClient(const EndpointConfig& cfg) : impl_(std::make_unique<Impl>(cfg)) {}

HttpStreamClient::~HttpStreamClient() = default;

namespace {

// The message of an OpenAI-style error body, else its start; `code` gets error.code if any.
std::string http_error_text(int status, const std::string& body, std::string& code) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_discarded())
    if (const json* e = member(j, "error")) {
      if (const json* c = member(*e, "code"); c && c->is_string()) code = c->get<std::string>();
      return fmt::format("HTTP {}: {}", status, error_message(*e));
    }
  return fmt::format("HTTP {}: {}", status, body.substr(0, 200));
}

}  // namespace

RequestResult HttpStreamClient::send(const RequestSpec& spec, std::chrono::steady_clock::time_point t_run) {
  using Clock = std::chrono::steady_clock;
  RequestResult r;
  r.index = spec.index;
  r.kind = spec.kind;
  r.urgent = spec.urgent;
  r.has_deadline = spec.deadline_ms > 0;
  std::string body;
  try {
    body = request_body(impl_->cfg, spec).dump();
  } catch (const std::exception& e) {  // invalid UTF-8 in a prompt from a file
    r.error_kind = "client";
    r.error = std::string("cannot encode the request: ") + e.what();
    return r;
  }
  std::string err_body;
  const Clock::time_point t_sent = Clock::now();
  r.t_start_s = std::chrono::duration<double>(t_sent - t_run).count();
  StreamCollector col(t_sent);
  HttpReply reply;
  HttpClient::Outcome out;
  const std::string& endpoint = spec_endpoint(impl_->cfg, spec);
  const bool embeddings = is_embeddings(endpoint);
  std::string whole;  // embeddings: the JSON answer
  const HttpHeaders fields = impl_->fields(!embeddings);
  for (int attempt = 0;; ++attempt) {
    whole.clear();
    out = impl_->cli.request(
        "POST", endpoint, fields, body, reply, {}, [&](std::string_view bytes) {
          const Clock::time_point now = Clock::now();
          if (embeddings && reply.status >= 200 && reply.status < 300)
            whole.append(bytes);
          else if (reply.status >= 200 && reply.status < 300)
            col.feed(bytes, now);
          else if (err_body.size() < 4096)
            err_body.append(bytes.substr(0, 4096 - err_body.size()));
          return true;
        });
    // A server may close a kept-alive connection while the request is on its way (its idle
    // timeout, or it closes after each stream); the send then fails with no response at all.
    // As HTTP clients do for a reused connection, resend once on a new one (TTFT and latency
    // still count from the first send). Only a connection that already carried a response can
    // be stale, and only a quick failure: a read timeout is never resent.
    const double waited_s = std::chrono::duration<double>(Clock::now() - t_sent).count();
    const bool stale = !out.ok() && !out.any_bytes && out.reused && waited_s < 0.5 * impl_->cfg.timeout_s &&
                       (out.failure == HttpFailure::Read || out.failure == HttpFailure::Write);
    if (!stale || attempt == 1) break;
    ++r.reconnects;
  }
  const Clock::time_point t_end = Clock::now();
  if (!out.ok()) {
    col.finish(r, t_end);  // keep whatever timings arrived
    r.ok = false;
    r.status = reply.status;
    r.error_kind = http_failure_name(out.failure);
    r.error = out.message;
    return r;
  }
  r.status = reply.status;
  if (reply.status < 200 || reply.status >= 300) {
    r.ok = false;
    r.error_kind = fmt::format("http_{}", reply.status);
    r.error = http_error_text(reply.status, err_body, r.error_code);
    r.e2e_ms = std::chrono::duration<double, std::milli>(t_end - t_sent).count();
    return r;
  }
  if (embeddings) {
    // One answer: its latency is both TTFT and e2e; it generates no tokens.
    r.e2e_ms = std::chrono::duration<double, std::milli>(t_end - t_sent).count();
    const json j = json::parse(whole, nullptr, false);
    const json* data = member(j, "data");
    r.ok = data && data->is_array() && !data->empty() && member((*data)[0], "embedding");
    if (!r.ok) {
      r.error_kind = "bad_response";
      r.error = "embeddings answer without data[0].embedding: " + whole.substr(0, 200);
      return r;
    }
    r.ttft_ms = r.e2e_ms;
    if (const json* usage = member(j, "usage")) {
      r.n_prompt_tokens = int_or(member(*usage, "prompt_tokens"), -1);
      r.usage_reported = r.n_prompt_tokens >= 0;
    }
    r.finish_reason = "stop";
    return r;
  }
  col.finish(r, t_end);
  return r;
}

int HttpStreamClient::get(const std::string& path, std::string* body) {
  HttpReply reply;
  HttpClient::Outcome out = impl_->cli.request("GET", path, impl_->fields(false), "", reply);
  if (!out.ok()) return 0;
  *body = std::move(reply.body);
  return reply.status;
}

int HttpStreamClient::get_status(const std::string& path) {
  HttpReply reply;
  HttpClient::Outcome out = impl_->cli.request("GET", path, impl_->fields(false), "", reply);
  return out.ok() ? reply.status : 0;
}

}  // namespace ubatch::loadgen
