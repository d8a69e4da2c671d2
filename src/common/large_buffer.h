#pragma once
// Memory for large, long-lived arrays that the kernels stream through (the packed weights).
//
// Asked for huge pages, a buffer of at least kHugeThreshold bytes is an anonymous mapping whose
// start is aligned to 2 MiB and which is marked MADV_HUGEPAGE (Linux, madvise(2)), so that where
// transparent huge pages are enabled ("always" or "madvise" in
// /sys/kernel/mm/transparent_hugepage/enabled) the kernel backs it with 2 MiB pages: a decode
// step that streams gigabytes of weights then walks 512 times fewer pages (fewer TLB misses and
// page walks). Where the kernel says no, the same mapping keeps 4 KiB pages, silently. The price
// is paid at allocation: on a machine whose free memory is fragmented (a full page cache), the
// kernel compacts memory to find 2 MiB pages (measured: a 3.8 GB model loaded in 61 s instead of
// 43 s on a busy 2-vCPU VM), which is why the model asks for them only for large weights
// (Model::kHugePageMinBytes). Other buffers come from aligned_alloc. Contents start zeroed.
#include <cstddef>
#include <cstdint>
#include <string>

namespace ubatch {

class LargeBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kHugeThreshold = kHugePage;

  LargeBuffer() = default;
  // `bytes` zeroed bytes, 64-byte aligned (with huge_pages, 2 MiB aligned and advised from
  // kHugeThreshold up). Returns an empty buffer (data() == nullptr) when the memory cannot be had.
  static LargeBuffer allocate(size_t bytes, bool huge_pages = false);

  LargeBuffer(LargeBuffer&& o) noexcept { *this = std::move(o); }
  LargeBuffer& operator=(LargeBuffer&& o) noexcept;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;
  ~LargeBuffer() { reset(); }

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool huge_advised() const { return advised_; }
  void reset();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;     // bytes of the mapping (0: the buffer came from aligned_alloc)
  bool advised_ = false;  // madvise(MADV_HUGEPAGE) accepted
};

// What the process holds in huge pages now, for the load log: the kernel's transparent huge
// page mode, the bytes of live LargeBuffers advised MADV_HUGEPAGE, and the anonymous memory the
// kernel has actually backed with huge pages (AnonHugePages of /proc/self/smaps_rollup; the whole
// process, so it may include memory other than the weights). E.g. "huge pages: THP madvise;
// 3890 MiB of packed weights advised, 3886 MiB in 2 MiB pages".
std::string huge_page_summary();

}  // namespace ubatch
