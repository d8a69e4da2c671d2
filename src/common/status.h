// Status and Result<T>: how input and API boundaries report failure without aborting.
//
// A Status is ok or carries a human-readable message naming what was wrong and where
// (e.g. "gguf: tensor 'blk.0.attn_q.weight': data [1024, 4096) past end of file (2048 bytes)").
// Broken internal invariants use UBATCH_CHECK instead, which aborts with file and line.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace ubatch {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message), 0); }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  Status(std::string message, int) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

// Result<T>: a value or an error Status (never both).
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {
    if (status_.is_ok()) status_ = Status::error("internal: Result built from an ok Status");
  }
  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  const std::string& message() const { return status_.message(); }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "ubatch: internal check failed: %s at %s:%d%s%s\n", expr, file, line,
               msg[0] ? ": " : "", msg);
  std::abort();
}

}  // namespace ubatch

// Always-on invariant check (not compiled out under NDEBUG).
#define UBATCH_CHECK(cond) \
  do { if (!(cond)) ::ubatch::check_failed(#cond, __FILE__, __LINE__, ""); } while (0)
#define UBATCH_CHECK_MSG(cond, msg) \
  do { if (!(cond)) ::ubatch::check_failed(#cond, __FILE__, __LINE__, (msg)); } while (0)
