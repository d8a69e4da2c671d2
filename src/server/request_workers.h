// Request work that may take more than a few milliseconds — parsing a large JSON body, a
// logit_bias of many entries, tokenizing a long prompt, rendering a chat template, compiling a
// grammar or a JSON Schema — runs here, on a few worker threads, never on the HTTP I/O threads:
// those only move bytes and answer quick routes, so /health and every other connection stay
// responsive whatever one request costs (issue 31: three requests with 100,000-entry
// logit_bias held both I/O threads for 34 s).
//
// off_io(state, exchange, work, done) runs `work` on a worker, then `done` with its result on
// the exchange's strand (exchange.h) — unless the exchange can no longer be answered (client
// gone), when the result is dropped. `work` must not touch the exchange (it runs on another
// thread); it holds what it needs by value. While the work runs, a shutdown answers the
// request 503 at once (the later result is dropped).
//
// Threads: submit() from any thread; the pool's threads end in stop() (joined; work not yet
// started is dropped) or the destructor.
// Internal to src/server/.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/errors.h"
#include "server/http/exchange.h"

namespace ubatch::server {

class RequestWorkers {
 public:
  explicit RequestWorkers(int threads);
  ~RequestWorkers();  // stop()
  RequestWorkers(const RequestWorkers&) = delete;
  RequestWorkers& operator=(const RequestWorkers&) = delete;

  // Queues fn (FIFO). Dropped, never run, after stop().
  void submit(std::function<void()> fn);
  // Ends the threads after the task each is running; drops the queued ones. Idempotent.
  void stop();

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The 503 a request gets when the server shuts down while its work runs.
void answer_shutting_down(http::Exchange& ex);

// The 500 a request gets when its work threw (the message says what).
void answer_work_failed(http::Exchange& ex, const std::string& what);

template <typename T>
void off_io(RequestWorkers& workers, const std::shared_ptr<http::Exchange>& ex, std::function<T()> work,
            std::function<void(const std::shared_ptr<http::Exchange>&, T&)> done) {
  struct Slot {
    std::optional<T> result;
    std::string failure;  // what the work threw
  };
  auto slot = std::make_shared<Slot>();
  const std::weak_ptr<http::Exchange> weak = ex;
  ex->on_abort([weak](http::AbortReason why) {
    if (why != http::AbortReason::ShuttingDown) return;
    if (std::shared_ptr<http::Exchange> e = weak.lock()) answer_shutting_down(*e);
  });
  // The waker holds the exchange weakly, and so does its task: the worker thread never holds
  // (nor drops) a reference to it.
  // What `work` and `done` hold (a model's lease) is let go as soon as each has run, not when
  // the last copy of the waker goes: a request answered holds nothing any more.
  auto wake = ex->waker([slot, weak, done = std::move(done)]() mutable {
    std::function<void(const std::shared_ptr<http::Exchange>&, T&)> once = std::move(done);
    done = nullptr;
    std::shared_ptr<http::Exchange> e = weak.lock();
    if (!once || !e || !e->active()) return;
    if (!slot->result) return answer_work_failed(*e, slot->failure);
    once(e, *slot->result);
  });
  workers.submit([slot, work = std::move(work), wake = std::move(wake)]() mutable {
    try {
      slot->result.emplace(work());
    } catch (const std::exception& x) {
      slot->failure = x.what();
    } catch (...) {
      slot->failure = "unknown error";
    }
    work = nullptr;
    wake();
  });
}

}  // namespace ubatch::server
