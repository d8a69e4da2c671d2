// One streaming request to an OpenAI-compatible endpoint (/v1/completions or
// /v1/chat/completions), timed token by token: the client side of `ubatch load`.
//
// The body asks for `stream: true` and `stream_options: {include_usage: true}`; the reply is
// read as Server-Sent Events (loadgen/sse.h) as it arrives. Each event's JSON is an OpenAI
// chunk: text in choices[0].text (completions) or choices[0].delta.content (chat); usage
// {prompt_tokens, completion_tokens} in the final chunk when the server reports it; an
// {"error": …} object for a failure mid-stream; the stream ends with "data: [DONE]".
//
// Timing (steady clock, milliseconds from just before the request is sent):
//   TTFT = arrival of the first chunk carrying non-empty text; ITL = gaps between successive
//   text chunks (chunks in one read share a time, so some gaps are 0); e2e = end of stream;
//   TPOT = (e2e − TTFT) / (output tokens − 1) when more than one token came.
// Output tokens = usage.completion_tokens when reported, else the number of text chunks.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/sse.h"
#include "common/status.h"

namespace ubatch::loadgen {

struct EndpointConfig {
  std::string url = "http://127.0.0.1:8080";  // scheme://host[:port]
  std::string endpoint = "/v1/completions";   // or /v1/chat/completions
  std::string model;                          // "model" field; empty: omitted
  std::string api_key;                        // non-empty: Authorization: Bearer <key>
  double timeout_s = 600;                     // read timeout per request
  double connect_timeout_s = 10;
  bool ignore_eos = false;                    // adds "ignore_eos": true (servers that know it)
  double temperature = -1;                    // < 0: omitted
  bool is_chat() const;
};

// Errors: url not "http://host[:port]" or "https://host[:port]", endpoint not starting with
// '/', non-positive timeouts.
Status validate(const EndpointConfig& cfg);

struct RequestSpec {
  int64_t index = 0;
  std::string prompt;
  int32_t max_tokens = 16;
  bool urgent = false;       // of the urgent class (RequestMix's UrgentClass)
  int32_t priority = 0;      // != 0: sent as "priority" (extension)
  int64_t deadline_ms = 0;   // > 0: sent as "deadline_ms" (extension)
  // A class of a mix (--mix; load_mix.h): its own endpoint and model ("" : the config's) and
  // its label ("" : no mix). The embeddings endpoint is answered in one JSON body, not a stream.
  std::string endpoint;
  std::string model;
  std::string kind;
};

// The endpoint a spec goes to: its own, else the config's.
const std::string& spec_endpoint(const EndpointConfig& cfg, const RequestSpec& spec);
// True for /v1/embeddings (and /embeddings): one JSON answer, no stream.
bool is_embeddings(const std::string& endpoint);

// The JSON body for spec (prompt, or messages [{"role": "user", "content": prompt}] for the
// chat endpoint, or {"input": prompt} for embeddings; priority and deadline_ms when set).
nlohmann::json request_body(const EndpointConfig& cfg, const RequestSpec& spec);

// What one chunk of an OpenAI stream says.
struct StreamChunk {
  std::string text;              // content of this chunk ("" if none)
  bool has_usage = false;
  int64_t prompt_tokens = -1;    // usage.prompt_tokens
  int64_t completion_tokens = -1;// usage.completion_tokens
  std::string finish_reason;     // "" if not finished
  std::string error;             // non-empty: the chunk is an error object (its message)
};

// Parses one event's data. Returns false (and an error in chunk.error) when it is not JSON.
bool parse_stream_chunk(std::string_view data, StreamChunk& chunk);

struct RequestResult {
  int64_t index = 0;
  std::string kind;          // the spec's mix class ("" : no mix)
  double t_start_s = 0;      // when it was sent, seconds from the start of the run
  bool ok = false;
  int status = 0;            // HTTP status; 0: no response
  std::string error_kind;    // "" when ok; "http_503", "connect", "read", "timeout", "stream_error", "incomplete", …
  std::string error;         // human-readable
  std::string error_code;    // an HTTP error body's error.code ("queue_full", "deadline_exceeded", …)
  bool urgent = false;       // the spec's class
  bool has_deadline = false; // the spec carried a deadline
  double ttft_ms = -1;       // -1: no text arrived
  double e2e_ms = 0;
  std::vector<double> itl_ms;
  int64_t n_output_tokens = 0;
  int64_t n_prompt_tokens = -1;  // from usage; -1 if not reported
  bool usage_reported = false;
  int64_t n_text_chunks = 0;
  std::string finish_reason;
  int32_t reconnects = 0;    // resent once on a fresh connection: the kept-alive one was closed
                             // by the server before any byte of the response (see send())
  double tpot_ms() const;    // -1 when fewer than two tokens or no TTFT
  // The request missed its deadline: a stream that ended with finish_reason "deadline", an
  // HTTP 504, or a 503 refusal with code "deadline_unattainable" (docs/API.md).
  bool deadline_missed() const;
};

// Accumulates one response stream (feed the body bytes as they arrive, with their arrival
// time); separate from the HTTP client so it can be tested on recorded bytes.
class StreamCollector {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit StreamCollector(TimePoint t_sent) : t_sent_(t_sent) {}
  // Body bytes of a 2xx response, in order.
  void feed(std::string_view bytes, TimePoint now);
  // Fills r's outcome (ok, error_kind/error, timings, tokens) for a stream that ended at `now`.
  void finish(RequestResult& r, TimePoint now) const;
  bool done() const { return done_; }  // [DONE] seen

 private:
  double ms(TimePoint t) const { return std::chrono::duration<double, std::milli>(t - t_sent_).count(); }

  TimePoint t_sent_;
  SseParser parser_;
  std::vector<SseEvent> events_;  // scratch
  bool done_ = false;
  std::string stream_error_;      // first error chunk or unparsable event
  double ttft_ms_ = -1, last_text_ms_ = -1;
  std::vector<double> itl_ms_;
  int64_t n_text_chunks_ = 0;
  bool has_usage_ = false;
  int64_t prompt_tokens_ = -1, completion_tokens_ = -1;
  std::string finish_reason_;
};

// A connection to one server, used by one thread at a time (keep-alive between requests).
class HttpStreamClient {
 public:
  explicit HttpStreamClient(const EndpointConfig& cfg);
  ~HttpStreamClient();
  HttpStreamClient(const HttpStreamClient&) = delete;
  HttpStreamClient& operator=(const HttpStreamClient&) = delete;

  // Sends spec and reads the reply to its end (or failure, or the read timeout). t_run is
  // the start of the run (for RequestResult::t_start_s). Never throws.
  RequestResult send(const RequestSpec& spec, std::chrono::steady_clock::time_point t_run);

  // GET path; returns the HTTP status (0 when no response).
  // GET path: the status (0: no response) and the body in *body.
  int get(const std::string& path, std::string* body);
  int get_status(const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ubatch::loadgen
