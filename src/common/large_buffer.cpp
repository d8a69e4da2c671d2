#include "common/large_buffer.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

namespace ubatch {

namespace {

std::atomic<uint64_t> g_advised_bytes{0};

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

LargeBuffer LargeBuffer::allocate(size_t bytes, bool huge_pages) {
  LargeBuffer b;
  if (bytes == 0) return b;
  if (huge_pages && bytes >= kHugeThreshold) {
    // Map one huge page more than needed, then unmap the head before the first 2 MiB boundary
    // and the tail after the last 4 KiB page in use.
    const size_t len = round_up(bytes, 4096);
    void* raw = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw != MAP_FAILED) {
      const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
      const uintptr_t aligned = round_up(start, kHugePage);
      if (aligned > start) munmap(raw, aligned - start);
      const uintptr_t end = start + len + kHugePage;
      if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
      b.data_ = reinterpret_cast<uint8_t*>(aligned);
      b.size_ = bytes;
      b.mapped_ = len;
#ifdef MADV_HUGEPAGE
      b.advised_ = madvise(b.data_, len, MADV_HUGEPAGE) == 0;
#endif
      if (b.advised_) g_advised_bytes += len;
      return b;
    }
  }
  void* p = std::aligned_alloc(64, round_up(bytes, 64));
  if (!p) return b;
  std::memset(p, 0, round_up(bytes, 64));
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = bytes;
  return b;
}

LargeBuffer& LargeBuffer::operator=(LargeBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
    advised_ = std::exchange(o.advised_, false);
  }
  return *this;
}

void LargeBuffer::reset() {
  if (!data_) return;
  if (mapped_) {
    if (advised_) g_advised_bytes -= mapped_;
    munmap(data_, mapped_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  size_ = mapped_ = 0;
  advised_ = false;
}

std::string huge_page_summary() {
  std::string mode = "unavailable";
  {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    if (std::getline(in, line)) {
      const size_t l = line.find('['), r = line.find(']');
      if (l != std::string::npos && r != std::string::npos && r > l) mode = line.substr(l + 1, r - l - 1);
    }
  }
  long long huge_kib = -1;
  {
    std::ifstream in("/proc/self/smaps_rollup");
    std::string key;
    long long value = 0;
    std::string unit;
    while (in >> key) {
      if (key == "AnonHugePages:") {
        if (in >> value >> unit) huge_kib = value;
        break;
      }
    }
  }
  std::string granted = huge_kib < 0 ? "huge pages in use unknown (no /proc/self/smaps_rollup)"
                                     : fmt::format("{:.0f} MiB in 2 MiB pages", huge_kib / 1024.0);
  return fmt::format("huge pages: THP {}; {:.0f} MiB of packed weights advised, {}", mode,
                     static_cast<double>(g_advised_bytes.load()) / 1048576.0, granted);
}

}  // namespace ubatch
