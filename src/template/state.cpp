#include "template/state.h"

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

void State::too_large(const char* what, size_t n) const {
  limit_error(std::string(what) + " of " + std::to_string(n) + (std::string(what) == "list" ? " elements" : " bytes") +
              " exceeds the render limit (" + std::to_string(limits_.max_output_bytes) + " bytes)");
}

void State::check_time() const {
  if (std::chrono::steady_clock::now() > deadline_)
    limit_error("render time limit (" + std::to_string(limits_.max_time.count()) + " ms) exceeded");
}

}  // namespace ubatch::jinja
