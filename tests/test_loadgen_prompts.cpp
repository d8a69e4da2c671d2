// The shared-prefix request mix of `ubatch load` (--shared-prefixes, --prefix-tokens): every
// prompt starts with one of N fixed prefixes, all N are used, and the rest of each request is
// that of the same run without prefixes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "loadgen/prompts.h"

namespace ubatch::bench {

using namespace ::ubatch::loadgen;
namespace {

TEST(BenchPrompts, SharedPrefixesStartEveryPrompt) {
  const RequestMix plain(7, {5, 9}, {3, 7});
  const RequestMix shared(7, {5, 9}, {3, 7}, {}, {}, SharedPrefixes{8, 40});
  std::vector<std::string> prefixes;
  for (int32_t k = 0; k < 8; ++k) {
    prefixes.push_back(shared.shared_prefix(k));
    EXPECT_EQ(std::count(prefixes.back().begin(), prefixes.back().end(), ' '), 39) << prefixes.back();
    EXPECT_EQ(prefixes.back(), RequestMix(7, {1, 1}, {1, 1}, {}, {}, SharedPrefixes{8, 40}).shared_prefix(k));
  }
  EXPECT_EQ(std::set<std::string>(prefixes.begin(), prefixes.end()).size(), 8u);
  EXPECT_NE(prefixes[0], RequestMix(8, {5, 9}, {3, 7}, {}, {}, SharedPrefixes{8, 40}).shared_prefix(0));

  std::map<size_t, int> uses;
  for (int64_t i = 0; i < 400; ++i) {
    const RequestSpec a = plain.make(i), b = shared.make(i);
    EXPECT_EQ(b.max_tokens, a.max_tokens);
    int matched = 0;
    for (size_t k = 0; k < prefixes.size(); ++k) {
      if (b.prompt == prefixes[k] + " " + a.prompt) {
        ++uses[k];
        ++matched;
      }
    }
    EXPECT_EQ(matched, 1) << b.prompt;
    EXPECT_EQ(shared.make(i).prompt, b.prompt);  // a pure function of (seed, i)
  }
  EXPECT_EQ(uses.size(), 8u);  // each of the 8 is drawn (400 draws)
  for (const auto& [k, n] : uses) EXPECT_GT(n, 20) << "prefix " << k;
}

TEST(BenchPrompts, SharedPrefixesWithJsonlPrompts) {
  const RequestMix mix(3, {1, 1}, {4, 4}, {PromptEntry{"question one", 5}, PromptEntry{"question two", -1}}, {},
                       SharedPrefixes{2, 3});
  for (int64_t i = 0; i < 20; ++i) {
    const RequestSpec s = mix.make(i);
    const bool one = s.prompt.ends_with(" question one"), two = s.prompt.ends_with(" question two");
    EXPECT_TRUE(one || two) << s.prompt;
    EXPECT_EQ(s.max_tokens, one ? 5 : 4);
    EXPECT_TRUE(s.prompt.starts_with(mix.shared_prefix(0) + " ") || s.prompt.starts_with(mix.shared_prefix(1) + " "));
  }
}

}  // namespace
}  // namespace ubatch::bench
