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

const AsyncHandler* Router::find(const std::string& method, const std::string& path) const {
  auto it = routes_.find({path, method == "HEAD" ? std::string("GET") : method});
  return it == routes_.end() ? nullptr : &it->second;
}

bool Router::knows(const std::string& path) const {
  auto it = routes_.lower_bound({path, std::string()});
  return it != routes_.end() && it->first.first == path;
}

std::string Router::allowed_methods(const std::string& path) const {
  std::string out;
  for (auto it = routes_.lower_bound({path, std::string()}); it != routes_.end() && it->first.first == path; ++it) {
    out += it->first.second;
    out += ", ";
    if (it->first.second == "GET") out += "HEAD, ";
  }
  if (out.empty()) return out;
  return out + "OPTIONS";
}

}  // namespace ubatch::server::http
