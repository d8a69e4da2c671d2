#include "template/state.h"

#include <string_view>

namespace ubatch::jinja {

State::State(const RenderLimits& limits, const std::tm& now)
    : limits_(limits), now_(now), fuel_(limits.fuel), deadline_(std::chrono::steady_clock::now() + limits.max_time) {}

State::~State() {
  // Release in a loop: releasing one object may drop the last reference to another tracked
  // one, which then is destroyed with everything it held already released.
  for (auto& obj : tracked_) obj->release();
  tracked_.clear();
}

void State::add_output(size_t bytes) {
  output_bytes_ += bytes;
  if (output_bytes_ > limits_.max_output_bytes) too_large("output", output_bytes_);
  note_alloc(bytes);
  charge(bytes / 64);
}

void State::enter_call() {
  if (call_depth_ >= limits_.max_call_depth)
    limit_error("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  ++call_depth_;
}

void State::limit_error(std::string message) const { throw_error(ErrorKind::kLimit, std::move(message), pos); }

void State::out_of_fuel() const {
  limit_error("render budget exhausted (" + std::to_string(limits_.fuel) + " evaluation steps)");
}

void State::out_of_memory() const {
  limit_error("render allocation budget exhausted (" + std::to_string(limits_.max_alloc_bytes) + " bytes of strings and lists)");
}

void State::too_large(const char* what, size_t n) const {
  const bool list = std::string_view(what) == "list";
  std::string msg(what);
  msg.append(" of ").append(std::to_string(n)).append(list ? " elements" : " bytes");
  msg.append(" exceeds the render limit (")
      .append(std::to_string(list ? limits_.max_output_bytes / 64 : limits_.max_output_bytes))
      .append(list ? " elements)" : " bytes)");
  limit_error(std::move(msg));
}

void State::check_time() const {
  if (std::chrono::steady_clock::now() > deadline_)
    limit_error("render time limit (" + std::to_string(limits_.max_time.count()) + " ms) exceeded");
}

}  // namespace ubatch::jinja
