// A small blocking HTTP/1.1 client on Boost.Beast (http:// and https://): one connection,
// kept alive between requests, every operation bounded by a timeout, the response body
// handed over piece by piece as it arrives (for Server-Sent Events). The client side of
// `ubatch load`, also used by the server tests.
//
// Threads: one object per thread (it runs its own I/O context inside each call).
// TLS: the system's trusted roots, peer and host name verified, SNI sent (OpenSSL).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/http_headers.h"
#include "common/status.h"

namespace ubatch::loadgen {

struct HttpClientOptions {
  std::string scheme = "http";   // "http" or "https"
  std::string host = "127.0.0.1";
  int port = 80;
  double connect_timeout_s = 10;  // name resolution + TCP connect + TLS handshake
  double io_timeout_s = 600;      // each write, and each wait for response bytes
};

// Parses "http://host[:port][/]" or "https://…" (IPv6 in brackets) into o's scheme, host and
// port (80 / 443 by default). Errors: anything else.
Status parse_base_url(const std::string& url, HttpClientOptions& o);

struct HttpReply {
  int status = 0;       // 0: no response
  HttpHeaders headers;
  std::string body;     // the whole body, unless a body callback took it
};

// Where a request failed.
enum class HttpFailure { None, Connect, Write, Read, Timeout, Tls, Protocol };
// "", "connect", "write", "read", "timeout", "tls", "protocol"
const char* http_failure_name(HttpFailure f);

class HttpClient {
 public:
  explicit HttpClient(HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  struct Outcome {
    HttpFailure failure = HttpFailure::None;
    std::string message;        // human-readable, "" on success
    bool reused = false;        // sent on a kept-alive connection that had carried a response
    bool any_bytes = false;     // some byte of the response arrived
    bool stopped = false;       // on_body asked to stop before the body's end (the connection was closed)
    bool ok() const { return failure == HttpFailure::None; }
  };

  // Sends one request (Host, Content-Length and the given fields; `body` as is) and reads
  // the response to its end. `on_head` runs once the status and fields are in, `on_body` for
  // each piece of the body as it arrives (then reply.body stays empty); on_body returning
  // false stops the reading there — the connection is closed (the way to leave an endless
  // event stream) and the outcome says `stopped`. Connects first when needed; closes
  // afterwards when the server said so. Never throws.
  Outcome request(const std::string& method, const std::string& target, const HttpHeaders& fields,
                  const std::string& body, HttpReply& reply,
                  const std::function<void(const HttpReply&)>& on_head = {},
                  const std::function<bool(std::string_view)>& on_body = {});

  // Closes the connection (the next request opens a new one).
  void close();
  bool connected() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ubatch::loadgen
