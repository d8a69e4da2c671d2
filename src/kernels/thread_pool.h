// A persistent pool of worker threads for kernels.
//
// run(fn) calls fn(ith, nth) once on each of nth = n_threads() threads (the caller is
// thread 0) and returns when all calls have returned. Work is split by rows with (ith, nth);
// a split must never change the order of any per-element reduction (batch invariance).
// Workers spin briefly between jobs (a decode step issues hundreds of small jobs) and then
// sleep on a condition variable. Only one thread may call run() at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ubatch::kernels {

class ThreadPool {
 public:
  // n_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }
  void run(const std::function<void(int ith, int nth)>& fn);

  // Splits [0, n) into nth near-equal contiguous ranges; returns thread ith's [begin, end).
  static void split(int64_t n, int ith, int nth, int64_t& begin, int64_t& end) {
    const int64_t per = n / nth, rem = n % nth;
    begin = ith * per + (ith < rem ? ith : rem);
    end = begin + per + (ith < rem ? 1 : 0);
  }

 private:
  void worker(int ith);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace ubatch::kernels
