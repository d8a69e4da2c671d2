#include "sched/active_requests.h"

namespace ubatch::sched {

const char* request_state_name(RequestState s) {
  switch (s) {
    case RequestState::Waiting: return "waiting";
    case RequestState::Prefilling: return "prefilling";
    case RequestState::Decoding: return "decoding";
    case RequestState::Preempted: return "preempted";
  }
  return "?";
}

void RequestBoard::publish(std::vector<ActiveRequest>& rows, double now_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  published_.rows.swap(rows);
  published_.published_ms = now_ms;
}

ActiveRequests RequestBoard::read() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return published_;
}

size_t RequestBoard::n_published() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return published_.rows.size();
}

}  // namespace ubatch::sched
