#include "server/request_workers.h"

#include <algorithm>

namespace ubatch::server {

RequestWorkers::RequestWorkers(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { loop(); });
}

RequestWorkers::~RequestWorkers() { stop(); }

void RequestWorkers::submit(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void RequestWorkers::stop() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  dropped.clear();  // after the join: nothing runs any more
}

void RequestWorkers::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    std::function<void()> fn = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    fn();
    fn = nullptr;  // its captures go before the lock is taken again
    lock.lock();
  }
}

void answer_shutting_down(http::Exchange& ex) {
  ApiError e = unavailable("the server is shutting down; the request was cancelled", kDrainingRetryAfterS);
  e.code = "shutting_down";
  http::Response res;
  send_error(res, e);
  ex.respond(std::move(res));
}

void answer_work_failed(http::Exchange& ex, const std::string& what) {
  http::Response res;
  send_error(res, server_error("the request could not be handled: " + what));
  ex.respond(std::move(res));
}

}  // namespace ubatch::server
