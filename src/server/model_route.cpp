#include "server/model_route.h"

#include <chrono>

#include "server/json_request.h"

namespace ubatch::server {

namespace {

using Clock = std::chrono::steady_clock;

ApiError acquire_error(const ModelRegistry::Acquired& a) {
  switch (a.failure) {
    case ModelRegistry::Failure::LoadFailed: {
      ApiError e = server_error(a.message);
      e.code = "model_load_failed";
      return e;
    }
    case ModelRegistry::Failure::ShuttingDown: return unavailable(a.message, kDrainingRetryAfterS);
    case ModelRegistry::Failure::NotLoaded:
    case ModelRegistry::Failure::Timeout:
    case ModelRegistry::Failure::None: break;
  }
  ApiError e = unavailable(a.message, 1);
  e.code = "model_loading";
  return e;
}

}  // namespace

std::optional<ApiError> requested_model(const nlohmann::json& body, std::string& name) {
  name.clear();
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return invalid_request("'model' must be a string", "model", "invalid_type");
  name = it->get<std::string>();
  return std::nullopt;
}

ApiError model_not_found(const ModelRegistry& models, const std::string& name) {
  std::string names;
  for (size_t i = 0; i < models.size(); ++i) names += (i ? ", " : "") + models.info(i).name;
  ApiError e;
  e.status = 404;
  e.type = "invalid_request_error";
  e.param = "model";
  e.code = "model_not_found";
  e.message = "The model '" + name + "' does not exist (served: " + names + "; GET /v1/models lists them)";
  return e;
}

void with_model(ServerState& state, const std::shared_ptr<http::Exchange>& ex, const nlohmann::json& body,
                RequestKind kind, std::function<void(ModelRegistry::Lease)> next, ErrorShape shape) {
  auto fail = [&ex, shape](const ApiError& e) {
    http::Response res;
    send_error(res, e, shape);
    ex->respond(std::move(res));
  };
  std::string name;
  if (auto e = requested_model(body, name)) return fail(*e);
  ModelRegistry& models = *state.models;
  const std::optional<size_t> index = models.resolve(name, kind);
  if (!index) return fail(model_not_found(models, name));
  auto wait = std::chrono::milliseconds(static_cast<int64_t>(state.config.model_wait_s * 1000));
  if (auto d = body.find("deadline_ms"); d != body.end() && d->is_number_integer() && d->get<int64_t>() > 0)
    wait = std::min(wait, std::chrono::milliseconds(d->get<int64_t>()));
  // The registry may answer on its loader thread: the result goes to the connection's strand.
  auto slot = std::make_shared<ModelRegistry::Acquired>();
  auto wake = ex->waker([slot, weak = std::weak_ptr<http::Exchange>(ex), next = std::move(next), shape] {
    std::shared_ptr<http::Exchange> ex = weak.lock();
    if (!ex) return;
    if (!slot->backend) {
      http::Response res;
      send_error(res, acquire_error(*slot), shape);
      return ex->respond(std::move(res));
    }
    next(std::move(slot->backend));
  });
  models.acquire(*index, Clock::now() + wait, [slot, wake](ModelRegistry::Acquired a) {
    *slot = std::move(a);
    wake();
  });
}

void with_body_and_model(ServerState& state, const std::shared_ptr<http::Exchange>& ex, RequestKind kind,
                         BodyNext next, ErrorShape shape) {
  struct Parsed {
    std::optional<ApiError> error;
    std::shared_ptr<const nlohmann::json> body;
  };
  // The body is copied (about a millisecond for the largest --max-body): the worker holds no
  // reference to the exchange.
  auto text = std::make_shared<const std::string>(ex->request().body);
  off_io<Parsed>(
      *state.workers, ex,
      [text] {
        Parsed p;
        auto body = std::make_shared<nlohmann::json>();
        p.error = parse_json_body(*text, *body);
        p.body = std::move(body);
        return p;
      },
      [&state, kind, text, next = std::move(next), shape](const std::shared_ptr<http::Exchange>& ex, Parsed& p) {
        if (p.error) {
          http::Response res;
          send_error(res, *p.error, shape);
          return ex->respond(std::move(res));
        }
        std::shared_ptr<const nlohmann::json> body = p.body;
        with_model(state, ex, *body, kind,
                   [weak = std::weak_ptr<http::Exchange>(ex), text, body, next](ModelRegistry::Lease lease) {
                     std::shared_ptr<http::Exchange> e = weak.lock();
                     if (e && e->active()) next(e, text, body, std::move(lease));  // else: the client left
                   },
                   shape);
      });
}

http::AsyncHandler offloaded(ServerState& state, http::Handler handler) {
  return [&state, handler = std::move(handler)](const std::shared_ptr<http::Exchange>& ex) {
    auto req = std::make_shared<const http::Request>(ex->request());
    off_io<http::Response>(
        *state.workers, ex,
        [req, handler] {
          http::Response res;
          handler(*req, res);
          return res;
        },
        [](const std::shared_ptr<http::Exchange>& ex, http::Response& res) { ex->respond(std::move(res)); });
  };
}

ModelRegistry::Lease model_now(ServerState& state, const std::string& name, RequestKind kind, ApiError* error) {
  ModelRegistry& models = *state.models;
  const std::optional<size_t> index = models.resolve(name, kind);
  if (!index) {
    *error = model_not_found(models, name);
    return nullptr;
  }
  ModelRegistry::Lease lease = models.try_acquire(*index);
  if (!lease) {
    *error = models.size() == 1 ? unavailable("the model is loading; retry shortly", 1)
                                : unavailable("model '" + models.info(*index).name +
                                                  "' is not loaded (a completion or embedding request loads it)", 1);
    if (models.size() > 1) error->code = "model_not_loaded";
  }
  return lease;
}

}  // namespace ubatch::server
