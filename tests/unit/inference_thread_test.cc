#include "models/requests/inference_thread.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace attnscope {
namespace {

TEST(InferenceThreadTest, RunsEveryCallOnTheSameOtherThread) {
  InferenceThread inference;
  std::thread::id first;
  inference.Run([&] { first = std::this_thread::get_id(); });
  EXPECT_NE(first, std::this_thread::get_id());
  std::vector<std::thread> callers;
  std::atomic<int> on_first{0};
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&] {
      for (int j = 0; j < 25; ++j) {
        inference.Run([&] { on_first += std::this_thread::get_id() == first; });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(on_first.load(), 100);
}

TEST(InferenceThreadTest, RunsOneAtATime) {
  InferenceThread inference;
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&] {
      for (int j = 0; j < 10; ++j) {
        inference.Run([&] {
          most = std::max(most.load(), ++running);
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          --running;
        });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(most.load(), 1);
}

TEST(InferenceThreadTest, RethrowsInTheCaller) {
  InferenceThread inference;
  EXPECT_THROW(inference.Run([] { throw std::runtime_error("boom"); }), std::runtime_error);
  // The thread survives its task's exception.
  int value = 0;
  inference.Run([&] { value = 7; });
  EXPECT_EQ(value, 7);
}

}  // namespace
}  // namespace attnscope
