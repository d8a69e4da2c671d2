#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>

#include "common/cpu_topology.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define UBATCH_PAUSE() _mm_pause()
#elif defined(__aarch64__)
// A short pipeline-draining delay between polls (what x86's PAUSE is for; the YIELD hint is a
// no-op on most ARM cores), without a system call.
#define UBATCH_PAUSE() __asm__ __volatile__("isb" ::: "memory")
#else
#define UBATCH_PAUSE() std::this_thread::yield()
#endif

namespace ubatch::kernels {

namespace {
// Between jobs a worker spins briefly (a decode step issues hundreds of small jobs), then
// yields its core (so an oversubscribed machine still makes progress), then sleeps.
constexpr int kSpinIterations = 2000;
constexpr int kYieldIterations = 200;
}

ThreadPool::ThreadPool(int n_threads, std::vector<int> cpus) : cpus_(std::move(cpus)) {
  if (n_threads <= 0) {
    const ThreadChoice choice = default_thread_choice();
    n_threads = choice.n_threads;
    cpus_ = choice.cpus;
  }
  n_threads_ = std::max(1, n_threads);
  for (int i = 1; i < n_threads_; ++i)
    threads_.emplace_back([this, i] {
      pin();
      worker(i);
    });
}

void ThreadPool::pin() {
  if (cpus_.empty()) return;
  if (Status s = pin_current_thread(cpus_); !s) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) std::fprintf(stderr, "warning: %s; threads run unpinned\n", s.message().c_str());
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (!cpus_.empty() && pinned_caller_ != std::this_thread::get_id()) {
    pin();
    pinned_caller_ = std::this_thread::get_id();
  }
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  fn(0, n_threads_);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) UBATCH_PAUSE();
    else std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations + kYieldIterations; ++spin) {
      if (spin < kSpinIterations) UBATCH_PAUSE();
      else std::this_thread::yield();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace ubatch::kernels
