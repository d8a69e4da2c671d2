// sched::StepGate (step_gate.h), the turn-taking of several engines on one machine's threads:
// callers run one at a time, in the order they asked; two callers that always have work
// alternate turn by turn; a caller alone is never held back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sched/step_gate.h"

namespace ubatch::sched {
namespace {

TEST(StepGate, BusyCallersAlternateOneAtATime) {
  StepGate gate;
  std::mutex m;
  std::vector<int> order;
  std::atomic<int> inside{0}, most_inside{0}, ready{0};
  auto worker = [&](int id) {
    // Both threads running before the first turn (starting a thread can take milliseconds).
    ++ready;
    while (ready.load() < 2) std::this_thread::yield();
    for (int i = 0; i < 100; ++i) {
      gate.enter();
      const int now = ++inside;
      most_inside = std::max(most_inside.load(), now);
      {
        std::lock_guard<std::mutex> lock(m);
        order.push_back(id);
      }
      // A step. An engine's step runs on its thread pool while the engine thread waits for it;
      // sleeping here leaves the CPU likewise (a spinning holder on a shared core could keep
      // the other caller from drawing its ticket: the OS, not the gate, would decide).
      std::this_thread::sleep_for(std::chrono::microseconds(1000));
      --inside;
      gate.leave();
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  EXPECT_EQ(most_inside.load(), 1);
  ASSERT_EQ(order.size(), 200u);
  int switches = 0;
  for (size_t i = 1; i < order.size(); ++i) switches += order[i] != order[i - 1];
  // Strict alternation is 199 switches; a caller descheduled between two turns can lose one.
  std::string seen;
  for (int id : order) seen += static_cast<char>('0' + id);
  EXPECT_GE(switches, 180) << "turns did not alternate: " << seen;
}

TEST(StepGate, ACallerAloneIsNotHeld) {
  StepGate gate;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100000; ++i) {
    gate.enter();
    gate.leave();
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(us / 100000, 50.0) << "an uncontended turn took " << us / 100000 << " us";
}

}  // namespace
}  // namespace ubatch::sched
