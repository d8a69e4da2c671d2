// LargeBuffer (common/large_buffer.h): the packed weights' memory, 2 MiB aligned and advised for
// transparent huge pages from 2 MiB up.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "common/large_buffer.h"

namespace ubatch {
namespace {

std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t l = line.find('['), r = line.find(']');
  return l == std::string::npos || r == std::string::npos ? "" : line.substr(l + 1, r - l - 1);
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

TEST(LargeBuffer, SmallBuffersAre64ByteAlignedAndZeroed) {
  LargeBuffer b = LargeBuffer::allocate(1000);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_TRUE(all_zero(b.data(), b.size()));
  EXPECT_FALSE(b.huge_advised());
}

TEST(LargeBuffer, HugePagesOnlyWhenAsked) {
  LargeBuffer b = LargeBuffer::allocate(size_t{4} << 20);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_FALSE(b.huge_advised());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_TRUE(all_zero(b.data(), b.size()));
}

TEST(LargeBuffer, LargeBuffersStartOnA2MiBBoundaryZeroedAndWritable) {
  const size_t n = (size_t{5} << 20) + 123;  // not a multiple of any page size
  LargeBuffer b = LargeBuffer::allocate(n, true);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % LargeBuffer::kHugePage, 0u);
  EXPECT_TRUE(all_zero(b.data(), n));
  for (size_t i = 0; i < n; i += 4096) b.data()[i] = 1;
  b.data()[n - 1] = 7;  // the last byte is ours
  EXPECT_EQ(b.data()[n - 1], 7);
}

TEST(LargeBuffer, LargeBuffersAreAdvisedWhereTheKernelOffersHugePages) {
  const std::string mode = thp_mode();
  if (mode.empty() || mode == "never")
    GTEST_SKIP() << "transparent huge pages unavailable here (mode '" << mode << "')";
  LargeBuffer b = LargeBuffer::allocate(size_t{8} << 20, true);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_TRUE(b.huge_advised());
  const std::string s = huge_page_summary();
  EXPECT_NE(s.find("THP " + mode), std::string::npos) << s;
  EXPECT_NE(s.find("advised"), std::string::npos) << s;
}

TEST(LargeBuffer, MoveTransfersOwnershipAndResetReleases) {
  LargeBuffer a = LargeBuffer::allocate(size_t{3} << 20, true);
  uint8_t* p = a.data();
  LargeBuffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), p);
  b.reset();
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.size(), 0u);
}

}  // namespace
}  // namespace ubatch
