// An event-driven HTTP/1.1 server on Boost.Beast + Boost.Asio (RFC 9110, RFC 9112): a fixed
// pool of I/O threads multiplexes every connection (no thread per connection); a connection
// never blocks a thread while it waits for bytes, for the engine or for a slow reader.
//
// What it enforces for every connection (Limits): header bytes (431), body bytes whatever the
// transfer coding (413 before the body is read when Content-Length says so, at the chunk
// that crosses the limit for a chunked body), time to the first byte of a request (idle
// keep-alive), time from that byte to the end of the header and from there to the end of the
// body (408), time a write may stall (the connection is closed), bytes a stream may queue
// (the exchange is aborted as a slow client), and open connections (beyond the limit a new
// connection is accepted and closed at once). A request refused before its body was read
// (401, 404, 413, …) is answered with "Connection: close" and the connection closes, so no
// later request is ever parsed out of an unread body. Pipelined requests are answered in
// order, one at a time. `Expect: 100-continue` is answered only after the API-key check,
// the route lookup and the size check pass. Malformed HTTP (including a bad chunk) gets 400
// and the connection closes.
//
// Lifecycle: construct → bind() → start() → [drain()] → stop(). Threads: bind/start/drain/
// stop from one controlling thread (never an I/O thread); handlers and hooks run on I/O
// threads. The route layer (http_server.h) knows nothing of Beast.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "server/http/cors.h"
#include "server/http/router.h"

namespace ubatch::server::http {

struct Limits {
  int io_threads = 2;                 // threads running every connection (>= 1)
  size_t max_connections = 8192;      // open connections; more are accepted and closed at once
  size_t max_header_bytes = 16 << 10; // request line + header fields (431 beyond)
  size_t max_body_bytes = 4 << 20;    // de-chunked body (413 beyond)
  double idle_timeout_s = 5;          // a connection waits this long for the first byte of a request
  double header_timeout_s = 10;       // first byte → end of the header (408 beyond)
  double body_timeout_s = 30;         // end of the header → end of the body (408 beyond)
  double send_timeout_s = 30;         // a write that makes no progress this long closes the connection
  size_t stream_buffer_bytes = 1 << 20;  // streamed bytes queued but not yet taken by the socket
};

struct Hooks {
  // After the header, before the body (and before 100 Continue), for every request but
  // OPTIONS: a refusal to send instead (e.g. 401), or nullopt to go on.
  std::function<std::optional<Response>(const Request&)> check;
  // The response for a status the transport decides itself (400, 404, 408, 413, 431, 500),
  // `message` saying why. Default: a text/plain body.
  std::function<Response(int status, const std::string& message, const Request* req)> error;
  // Every response whose head is sent, and 499 for an exchange whose client went away (or
  // was too slow) before a response started. On an I/O thread.
  std::function<void(const Request&, int status)> on_response;
};

// Counters of the transport (monotonic unless said otherwise).
struct TransportStats {
  std::atomic<int64_t> connections_open{0};           // gauge
  std::atomic<uint64_t> connections_accepted{0};
  std::atomic<uint64_t> connections_refused{0};       // over max_connections
  std::atomic<uint64_t> timeouts_idle{0};
  std::atomic<uint64_t> timeouts_header{0};
  std::atomic<uint64_t> timeouts_body{0};
  std::atomic<uint64_t> timeouts_send{0};
  std::atomic<uint64_t> slow_clients{0};              // streams aborted: buffer limit exceeded
  std::atomic<uint64_t> bad_requests{0};              // malformed HTTP, 400 and closed
  std::atomic<int64_t> exchanges_active{0};           // gauge: requests dispatched, not yet answered
};

class Server {
 public:
  Server(Limits limits, CorsPolicy cors, Router router, Hooks hooks);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (0: an ephemeral port) with SO_REUSEADDR (not SO_REUSEPORT: a port in
  // use is an error) and the system's largest listen backlog. Returns the port.
  Result<int> bind(const std::string& host, int port);
  // Starts the I/O threads and accepting. Errors: not bound, already started.
  Status start();
  // Keeps accepting (so health probes get their answer), but idle keep-alive connections
  // close now and every other one after its current response. Idempotent.
  void drain();
  // Stops accepting, aborts every exchange in progress with ShuttingDown (handlers answer at
  // once), waits up to `grace` for the answers to be written, closes what is left and joins
  // the threads. Idempotent; never hangs past grace + 1 s.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  int port() const;
  const TransportStats& stats() const;
  const Limits& limits() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ubatch::server::http
