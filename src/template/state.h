// State: one render's sandbox budget and context — what the evaluator and every builtin
// (filters, tests, methods, functions) consult while a template runs.
//
// The sandbox is a budget, not a hope: every node evaluated costs one unit of fuel (and
// building text or lists one more per 64 bytes / 8 elements), which bounds the work; every
// string and list built counts against an allocation budget, which bounds memory; output (and
// any one string or list) is bounded in size, macro calls and evaluation in depth, values in
// nesting depth, and the whole render in wall time (checked every 1,024 steps). Exceeding
// any of them stops the render with a kLimit error at the node being evaluated. One State
// per render; not shared between threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "template/error.h"
#include "template/value.h"

namespace ubatch::jinja {

class Evaluator;

// Sandbox limits of one render. The defaults leave ample room for real chat templates (the
// whole corpus of docs/CHAT.md renders with under 1% of the fuel) and bound a hostile one to
// well under a second of CPU and a few tens of MiB.
struct RenderLimits {
  uint64_t fuel = 20'000'000;               // evaluation steps
  size_t max_output_bytes = 32u << 20;      // rendered text; also any single string (and a list
                                            // of up to max_output_bytes / 64 elements)
  size_t max_alloc_bytes = 256u << 20;      // all strings and lists the render builds, summed
  uint32_t max_call_depth = 64;             // nested macro calls (jinja2 stops near 100-300)
  std::chrono::milliseconds max_time{5000}; // wall time of the render
};

class State {
 public:
  State(const RenderLimits& limits, const std::tm& now);
  ~State();  // releases tracked objects (breaks reference cycles)
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // One evaluation step (a node).
  void step() {
    if (fuel_ == 0) out_of_fuel();
    --fuel_;
    if ((++steps_ & 1023u) == 0) check_time();
  }
  // Bulk work: `units` steps.
  void charge(uint64_t units) {
    if (units >= fuel_) out_of_fuel();
    fuel_ -= units;
  }
  // Before building a string of `bytes` or a list of `elements`: the size limits, the
  // allocation budget, and their cost in fuel (a step per 64 bytes / per 8 elements).
  void check_string_size(size_t bytes) {
    if (bytes > limits_.max_output_bytes) too_large("string", bytes);
    note_alloc(bytes);
    charge(bytes / 64);
  }
  void check_list_size(size_t elements) {
    if (elements > limits_.max_output_bytes / 64) too_large("list", elements);
    note_alloc(elements * sizeof(Value));
    charge(elements / 8);
  }
  void note_alloc(size_t bytes) {
    alloc_bytes_ += bytes;
    if (alloc_bytes_ > limits_.max_alloc_bytes) out_of_memory();
  }
  // Output written so far by the render (all capture buffers included).
  void add_output(size_t bytes);

  void enter_call();  // a macro call; throws kLimit past max_call_depth
  void leave_call() { --call_depth_; }
  // One level of evaluation nesting (node inside node, across macro calls); throws kLimit
  // past kMaxEvalDepth, which bounds the evaluator's stack use.
  static constexpr uint32_t kMaxEvalDepth = 1200;
  void enter_eval() {
    if (++eval_depth_ > kMaxEvalDepth) {
      --eval_depth_;
      limit_error("template evaluation nested deeper than " + std::to_string(kMaxEvalDepth) + " levels");
    }
  }
  void leave_eval() { --eval_depth_; }

  const std::tm& now() const { return now_; }
  const RenderLimits& limits() const { return limits_; }
  uint64_t fuel_used() const { return limits_.fuel - fuel_; }

  // Objects that may take part in reference cycles (namespaces, macros and the scopes they
  // capture): released when the render ends.
  void track(std::shared_ptr<Object> obj) { tracked_.push_back(std::move(obj)); }

  Evaluator* evaluator = nullptr;  // set by the evaluator for the render (macro calls)
  SourcePos pos;                   // the node being evaluated (errors without a position get it)

  [[noreturn]] void limit_error(std::string message) const;

 private:
  [[noreturn]] void out_of_fuel() const;
  [[noreturn]] void out_of_memory() const;
  [[noreturn]] void too_large(const char* what, size_t n) const;
  void check_time() const;

  RenderLimits limits_;
  std::tm now_;
  uint64_t fuel_;
  uint64_t steps_ = 0;
  size_t output_bytes_ = 0;
  size_t alloc_bytes_ = 0;
  uint32_t call_depth_ = 0;
  uint32_t eval_depth_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<std::shared_ptr<Object>> tracked_;
};

}  // namespace ubatch::jinja
