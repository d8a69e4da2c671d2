#include "sched/request.h"

namespace ubatch::sched {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
    case FinishReason::Deadline: return "deadline";
  }
  return "error";
}

const char* deadline_policy_name(DeadlinePolicy p) {
  return p == DeadlinePolicy::BestEffort ? "best_effort" : "strict";
}

const char* submit_error_name(SubmitError::Code c) {
  switch (c) {
    case SubmitError::Code::QueueFull: return "queue_full";
    case SubmitError::Code::TooLong: return "too_long";
    case SubmitError::Code::Invalid: return "invalid";
    case SubmitError::Code::ShuttingDown: return "shutting_down";
    case SubmitError::Code::DeadlineUnattainable: return "deadline";
  }
  return "invalid";
}

bool Stream::pop_locked(Event& out) {
  if (events_.empty()) return false;
  out = std::move(events_.front());
  events_.pop_front();
  if (out.kind == Event::Kind::Done) done_popped_ = true;
  return true;
}

bool Stream::next(Event& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (events_.empty()) {
    if (timeout.count() <= 0) return false;  // poll without touching the condition variable
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  }
  return pop_locked(out);
}

bool Stream::try_next(Event& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  return pop_locked(out);
}

bool Stream::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_popped_;
}

void Stream::set_notifier(Notifier notifier) {
  std::shared_ptr<const Notifier> n = notifier ? std::make_shared<const Notifier>(std::move(notifier)) : nullptr;
  bool pending = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    notifier_ = n;
    pending = !events_.empty();
  }
  if (n && pending) (*n)();
}

void Stream::push(Event e) {
  std::shared_ptr<const Notifier> n;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(e));
    n = notifier_;
  }
  cv_.notify_all();
  if (n) (*n)();
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::None: return "none";
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
  }
  return "?";
}

}  // namespace ubatch::sched
