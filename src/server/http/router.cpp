#include "server/http/router.h"

namespace ubatch::server::http {

namespace {
AsyncHandler wrap(Handler h) {
  return [h = std::move(h)](const std::shared_ptr<Exchange>& ex) {
    Response res;
    h(ex->request(), res);
    ex->respond(std::move(res));
  };
}
}  // namespace

void Router::get(const std::string& path, Handler h) { add("GET", path, wrap(std::move(h))); }
void Router::post(const std::string& path, Handler h) { add("POST", path, wrap(std::move(h))); }
void Router::post_async(const std::string& path, AsyncHandler h) { add("POST", path, std::move(h)); }
void Router::add(const std::string& method, const std::string& path, AsyncHandler h) {
  routes_[{path, method}] = std::move(h);
}

void Router::add_prefix(const std::string& method, const std::string& prefix, AsyncHandler h) {
  prefixes_[{prefix, method}] = std::move(h);
}
void Router::get_prefix(const std::string& prefix, Handler h) { add_prefix("GET", prefix, wrap(std::move(h))); }

const AsyncHandler* Router::find_prefix(const std::string& method, const std::string& path) const {
  for (const auto& [key, handler] : prefixes_)
    if (path.size() > key.first.size() && path.compare(0, key.first.size(), key.first) == 0 &&
        (method.empty() || key.second == method))
      return &handler;
  return nullptr;
}

const AsyncHandler* Router::find(const std::string& method, const std::string& path) const {
  const std::string m = method == "HEAD" ? std::string("GET") : method;
  auto it = routes_.find({path, m});
  if (it != routes_.end()) return &it->second;
  if (routes_.lower_bound({path, std::string()}) != routes_.end() &&
      routes_.lower_bound({path, std::string()})->first.first == path)
    return nullptr;  // an exact path answers other methods only
  return find_prefix(m, path);
}

bool Router::knows(const std::string& path) const {
  auto it = routes_.lower_bound({path, std::string()});
  return (it != routes_.end() && it->first.first == path) || find_prefix("", path);
}

std::string Router::allowed_methods(const std::string& path) const {
  std::string out;
  for (auto it = routes_.lower_bound({path, std::string()}); it != routes_.end() && it->first.first == path; ++it) {
    out += it->first.second;
    out += ", ";
    if (it->first.second == "GET") out += "HEAD, ";
  }
  if (out.empty())
    for (const auto& [key, handler] : prefixes_)
      if (path.size() > key.first.size() && path.compare(0, key.first.size(), key.first) == 0) {
        out += key.second;
        out += ", ";
        if (key.second == "GET") out += "HEAD, ";
      }
  if (out.empty()) return out;
  return out + "OPTIONS";
}

}  // namespace ubatch::server::http
