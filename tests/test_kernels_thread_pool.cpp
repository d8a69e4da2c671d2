// kernels::ThreadPool: every share runs once, and a pool given CPUs runs all its threads —
// the workers and the thread calling run() — there (the fast cores of a heterogeneous CPU,
// common/cpu_topology.h).
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/cpu_topology.h"
#include "kernels/thread_pool.h"

namespace ubatch::kernels {
namespace {

TEST(ThreadPool, EveryShareRunsOnce) {
  ThreadPool pool(3);
  std::mutex m;
  std::multiset<int> seen;
  pool.run([&](int ith, int nth) {
    EXPECT_EQ(nth, 3);
    std::lock_guard<std::mutex> lock(m);
    seen.insert(ith);
  });
  EXPECT_EQ(seen, (std::multiset<int>{0, 1, 2}));
  EXPECT_TRUE(pool.cpus().empty());
}

TEST(ThreadPool, DefaultIsTheMachinesChoice) {
  ThreadPool pool;
  const ThreadChoice c = default_thread_choice();
  EXPECT_EQ(pool.n_threads(), c.n_threads);
  EXPECT_EQ(pool.cpus(), c.cpus);
}

TEST(ThreadPool, PinnedPoolRunsEveryThreadOnItsCpus) {
  const std::vector<int> allowed = process_cpu_affinity();
  if (allowed.empty()) GTEST_SKIP() << "sched_getaffinity is not available";
  const std::vector<int> target = {allowed.back()};
  std::mutex m;
  std::vector<std::vector<int>> affinities;
  // From a thread of its own: run() pins its caller.
  std::thread([&] {
    ThreadPool pool(2, target);
    pool.run([&](int, int) {
      std::vector<int> a = process_cpu_affinity();  // this thread's
      std::lock_guard<std::mutex> lock(m);
      affinities.push_back(std::move(a));
    });
  }).join();
  ASSERT_EQ(affinities.size(), 2u);
  for (const std::vector<int>& a : affinities) EXPECT_EQ(a, target);
  EXPECT_EQ(process_cpu_affinity(), allowed);  // the test's own thread is untouched
}

}  // namespace
}  // namespace ubatch::kernels
