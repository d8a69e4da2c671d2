// A persistent pool of worker threads for kernels.
//
// run(fn) calls fn(ith, nth) once on each of nth = n_threads() threads (the caller is
// thread 0) and returns when all calls have returned. Work is split by rows with (ith, nth);
// a split must never change the order of any per-element reduction (batch invariance).
// Workers spin briefly between jobs (a decode step issues hundreds of small jobs) and then
// sleep on a condition variable. Only one thread may call run() at a time.
//
// Placement: given CPUs (a heterogeneous CPU's fast cores, common/cpu_topology.h), every worker
// is pinned to them (the set, not one CPU each: the OS still balances within it), and so is
// each thread that calls run(), on its first call (it computes share 0).
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
  // n_threads <= 0: the machine's default, threads and CPUs (default_thread_choice() of
  // common/cpu_topology.h: one per physical core, on a heterogeneous CPU the fast ones).
  // `cpus` non-empty: pin there (see above); a refusal by the OS is logged once on stderr and
  // the threads run unpinned.
  explicit ThreadPool(int n_threads = 0, std::vector<int> cpus = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }
  const std::vector<int>& cpus() const { return cpus_; }  // where the threads are pinned (empty: anywhere)
  void run(const std::function<void(int ith, int nth)>& fn);

  // Splits [0, n) into nth near-equal contiguous ranges; returns thread ith's [begin, end).
  static void split(int64_t n, int ith, int nth, int64_t& begin, int64_t& end) {
    const int64_t per = n / nth, rem = n % nth;
    begin = ith * per + (ith < rem ? ith : rem);
    end = begin + per + (ith < rem ? 1 : 0);
  }

 private:
  void worker(int ith);
  void pin();  // the calling thread, to cpus_

  int n_threads_;
  std::vector<int> cpus_;
  std::thread::id pinned_caller_;  // the last thread run() pinned
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace ubatch::kernels
