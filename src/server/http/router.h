// Routes (method, exact path) to handlers. Paths are matched byte for byte — no decoding, no
// dot-segment removal — so "/v1/completions/../models" is simply unknown (404). HEAD is
// served by the GET route (the connection sends no body). A prefix route (add_prefix) serves
// every path that starts with its prefix and goes on (e.g. "/v1/models/" + an id); exact
// routes win.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "server/http/exchange.h"

namespace ubatch::server::http {

// Fills res; the connection sends it when the handler returns.
using Handler = std::function<void(const Request& req, Response& res)>;
// Answers through the exchange, now or later (exchange.h).
using AsyncHandler = std::function<void(const std::shared_ptr<Exchange>& exchange)>;

class Router {
 public:
  void get(const std::string& path, Handler h);
  void post(const std::string& path, Handler h);
  void post_async(const std::string& path, AsyncHandler h);
  // Any method.
  void add(const std::string& method, const std::string& path, AsyncHandler h);
  // Every path `prefix` + at least one more byte (the handler reads the rest from the request).
  void add_prefix(const std::string& method, const std::string& prefix, AsyncHandler h);
  void get_prefix(const std::string& prefix, Handler h);

  // The handler for (method, path); null when none. HEAD finds the GET handler.
  const AsyncHandler* find(const std::string& method, const std::string& path) const;
  // True when some method has a route at path.
  bool knows(const std::string& path) const;
  // The methods path answers, comma-separated (for Allow and Access-Control-Allow-Methods),
  // always with OPTIONS (answered by the connection; cors.h); "" for an unknown path.
  std::string allowed_methods(const std::string& path) const;

 private:
  // The prefix route (prefix, method) that serves path for method ("" any), null when none.
  const AsyncHandler* find_prefix(const std::string& method, const std::string& path) const;

  std::map<std::pair<std::string, std::string>, AsyncHandler> routes_;    // (path, method)
  std::map<std::pair<std::string, std::string>, AsyncHandler> prefixes_;  // (prefix, method)
};

}  // namespace ubatch::server::http
