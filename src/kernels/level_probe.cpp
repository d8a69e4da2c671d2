// The start-up measurement behind the level plan (level_plan.h): each SIMD level runs one
// probe product per shape class on the calling thread, and a level whose outputs differ from
// the scalar level's fails its self-check.
//
// Probes (random weights; the kernels' speed does not depend on the values):
//   decode       1 row  × (Q8_0 640 → 4096  +  Q4_K 1024 → 1024)    3.8 MiB of packed weights
//   small batch 24 rows × (Q8_0 640 → 1024  +  Q4_K 1024 → 512)
//   prefill     96 rows × (Q8_0 640 → 512   +  Q4_K 1024 → 256)
// Q8_0 and Q4_K are the two packed formats that dominate the default model's bytes (the
// output projection, the layer matrices), with n_in of its embedding and feed-forward widths.
// The decode probe streams a few MiB: from the last-level cache after the first pass on most
// CPUs, so it ranks the levels' one-row kernels, not the memory.
//
// Each product is activation packing + the GEMM over all panels (2 panels, then 16 per call); a
// level's time for a class is the best of up to kReps passes, the levels taking turns within a
// pass (highest first) so that drift of the machine's speed hits all of them alike. A level
// that is already more than kLoserFactor times slower than the best so far is stopped within
// its pass (its time extrapolated from the panels it did) and not measured again — the
// scalar level costs about one short pass. The whole measurement stops after kBudgetSeconds.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/status.h"
#include "kernels/amx.h"
#include "kernels/gemm_internal.h"
#include "kernels/level_plan.h"
#include "kernels/matmul_internal.h"
#include "kernels/quant.h"

namespace ubatch::kernels::detail {

namespace {

constexpr int kReps = 5;
constexpr double kLoserFactor = 2.0;
constexpr double kBudgetSeconds = 0.25;
constexpr int64_t kChunkPanels = 16;  // panels per GEMM call (a check of the time after each)
constexpr int64_t kCheckPanels = 2;   // the first call's panels: every level computes them (self-check)

struct ProbeMat {
  TensorType type;
  int64_t n_in, n_out;
};
struct ProbeShape {
  ShapeClass cls;
  int64_t n_tokens;
  ProbeMat mats[2];
};
constexpr ProbeShape kProbes[kShapeClasses] = {
    {ShapeClass::Decode, 1, {{TensorType::Q8_0, 640, 4096}, {TensorType::Q4_K, 1024, 1024}}},
    {ShapeClass::SmallBatch, 24, {{TensorType::Q8_0, 640, 1024}, {TensorType::Q4_K, 1024, 512}}},
    {ShapeClass::Prefill, 96, {{TensorType::Q8_0, 640, 512}, {TensorType::Q4_K, 1024, 256}}},
};

// A 64-byte aligned buffer.
struct Aligned {
  std::vector<uint8_t> bytes;
  uint8_t* get() {
    const uintptr_t p = reinterpret_cast<uintptr_t>(bytes.data());
    return bytes.data() + ((64 - (p & 63)) & 63);
  }
  explicit Aligned(size_t n) : bytes(n + 64) {}
};

// A packed weight of m's shape: random GGUF rows of type t with small finite f16 scales for
// the first kPatternPanels panels, packed, and those panels' bytes repeated over the rest (the
// kernels' speed does not depend on the values; packing every row would cost more than the
// measurement).
constexpr int64_t kPatternPanels = 4;
std::unique_ptr<PackedWeight> probe_weight(const ProbeMat& m, std::mt19937& rng) {
  const int64_t rows = std::min<int64_t>(m.n_out, kPatternPanels * kPanelRows);
  const size_t row_bytes = tensor_row_bytes(m.type, m.n_in);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(rows));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(m.type));
  const int64_t n_blocks = m.n_in * rows / static_cast<int64_t>(tr->block_size);
  const uint16_t h = fp32_to_fp16(0.01f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = w.data() + b * static_cast<int64_t>(tr->type_size);
    std::memcpy(blk, &h, 2);                                      // d (Q8_0, Q4_K)
    if (m.type == TensorType::Q4_K) std::memcpy(blk + 2, &h, 2);  // dmin
  }
  Result<std::unique_ptr<PackedWeight>> small = pack_weight(m.type, w.data(), m.n_in, rows);
  UBATCH_CHECK_MSG(small.is_ok(), "level probe: cannot pack its weight");
  const PackedWeight& src = *small.value();
  auto out = std::make_unique<PackedWeight>();
  out->fmt = src.fmt;
  out->n_in = m.n_in;
  out->n_out = m.n_out;
  out->n_panels = (m.n_out + kPanelRows - 1) / kPanelRows;
  out->panel_bytes = src.panel_bytes;
  const size_t total = (out->bytes() + 63) & ~size_t(63);
  out->storage = LargeBuffer::allocate(total);
  UBATCH_CHECK_MSG(out->storage.data() != nullptr, "level probe: out of memory");
  out->data = out->storage.data();
  for (int64_t p = 0; p < out->n_panels; ++p)
    std::memcpy(out->storage.data() + p * out->panel_bytes, src.panel(p % src.n_panels),
                static_cast<size_t>(out->panel_bytes));
  return out;
}

struct ProbeData {
  std::unique_ptr<PackedWeight> w[2];
  std::vector<float> x[2];  // [n_tokens][n_in]
  ActLayout acts[2];
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One pass of `level` over a probe: y[m] gets the products. Returns the time, extrapolated to
// all panels when stopped early because it passed `give_up` seconds (0: never).
double run_probe(const LevelKernels& k, const ProbeShape& shape, ProbeData& d, uint8_t* xp,
                 uint8_t* scratch, std::vector<float>* y, double give_up) {
  double total = 0;
  for (int m = 0; m < 2; ++m) {
    const PackedWeight& w = *d.w[m];
    const auto t0 = Clock::now();
    k.pack(w.fmt, d.acts[m], d.x[m].data(), 0, shape.n_tokens, xp);
    int64_t p = 0;
    double elapsed = 0;
    while (p < w.n_panels) {
      const int64_t p1 = std::min(w.n_panels, p == 0 ? kCheckPanels : p + kChunkPanels);
      k.gemm(w, d.acts[m], xp, shape.n_tokens, y[m].data(), w.n_out, p, p1, scratch);
      p = p1;
      elapsed = seconds_since(t0);
      if (give_up > 0 && total + elapsed > give_up && p < w.n_panels) {
        // Extrapolate this product and count the rest as equally slow per panel; the
        // products not started still get their first chunk (untimed) for the self-check.
        const double per_panel = elapsed / static_cast<double>(p);
        double rest = per_panel * static_cast<double>(w.n_panels - p);
        for (int o = m + 1; o < 2; ++o) {
          const PackedWeight& wo = *d.w[o];
          rest += per_panel * static_cast<double>(wo.n_panels);
          k.pack(wo.fmt, d.acts[o], d.x[o].data(), 0, shape.n_tokens, xp);
          k.gemm(wo, d.acts[o], xp, shape.n_tokens, y[o].data(), wo.n_out, 0,
                 std::min(wo.n_panels, kCheckPanels), scratch);
        }
        return total + elapsed + rest;
      }
    }
    total += elapsed;
  }
  return total;
}

}  // namespace

LevelKernels level_kernels(SimdLevel level) {
  switch (level) {
#if defined(UBATCH_X86_KERNELS)
    case SimdLevel::Amx: return {&gemm_panels_amx, &pack_acts_avx512};
    case SimdLevel::Avx512: return {&gemm_panels_avx512, &pack_acts_avx512};
    case SimdLevel::Avx2: return {&gemm_panels_avx2, &pack_acts_avx2};
#elif defined(UBATCH_ARM_KERNELS)
    case SimdLevel::Dotprod: return {&gemm_panels_dotprod, &pack_acts_neon};
    case SimdLevel::Neon: return {&gemm_panels_neon, &pack_acts_neon};
#endif
    default: return {&gemm_panels_scalar, &pack_acts};  // Scalar
  }
}

std::vector<LevelTiming> measure_levels(std::vector<SimdLevel> levels, double* spent) {
  const auto start = Clock::now();
  std::sort(levels.begin(), levels.end(), [](SimdLevel a, SimdLevel b) { return a > b; });
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  if (std::find(levels.begin(), levels.end(), SimdLevel::Scalar) == levels.end())
    levels.push_back(SimdLevel::Scalar);  // the self-check's reference
  const size_t n_levels = levels.size();
  std::vector<LevelTiming> out(n_levels);
  for (size_t i = 0; i < n_levels; ++i) {
    out[i].level = levels[i];
    out[i].passed = true;
  }
  std::mt19937 rng(24);
  std::normal_distribution<float> nd;
  for (const ProbeShape& shape : kProbes) {
    const int c = static_cast<int>(shape.cls);
    ProbeData d;
    size_t scratch_bytes = 0, xp_bytes = 0;
    for (int m = 0; m < 2; ++m) {
      d.w[m] = probe_weight(shape.mats[m], rng);
      d.x[m].resize(static_cast<size_t>(shape.n_tokens * shape.mats[m].n_in));
      for (float& v : d.x[m]) v = nd(rng);
      d.acts[m] = act_layout(d.w[m]->fmt, shape.mats[m].n_in);
      scratch_bytes = std::max(scratch_bytes, static_cast<size_t>(gemm_scratch_bytes(*d.w[m])));
      xp_bytes = std::max(xp_bytes, static_cast<size_t>(shape.n_tokens * d.acts[m].stride));
    }
    Aligned scratch(scratch_bytes), xp(xp_bytes);
    // Outputs per level, for the self-check against the scalar level (the last one).
    std::vector<std::vector<float>> y(n_levels * 2);
    for (size_t i = 0; i < n_levels; ++i)
      for (int m = 0; m < 2; ++m) y[2 * i + m].assign(static_cast<size_t>(shape.n_tokens * shape.mats[m].n_out), 0.0f);
    std::vector<bool> dropped(n_levels, false);
    for (int rep = 0; rep < kReps; ++rep) {
      if (rep > 0 && seconds_since(start) > kBudgetSeconds) break;
      for (size_t i = 0; i < n_levels; ++i) {
        if (dropped[i]) continue;
        double best = 0;
        for (size_t j = 0; j < n_levels; ++j)
          if (out[j].seconds[c] > 0 && (best == 0 || out[j].seconds[c] < best)) best = out[j].seconds[c];
        const double give_up = best > 0 ? kLoserFactor * best : 0;
        const double t = run_probe(level_kernels(levels[i]), shape, d, xp.get(), scratch.get(), &y[2 * i], give_up);
        if (out[i].seconds[c] <= 0 || t < out[i].seconds[c]) out[i].seconds[c] = t;
        if (give_up > 0 && t > give_up) dropped[i] = true;
      }
    }
    // Self-check: the first kCheckPanels panels (every level computed at least those) of
    // each product must be the scalar level's bytes.
    const size_t ref = n_levels - 1;
    for (size_t i = 0; i + 1 < n_levels; ++i)
      for (int m = 0; m < 2; ++m) {
        const int64_t n_out = shape.mats[m].n_out;
        const int64_t cols = std::min<int64_t>(n_out, kCheckPanels * kPanelRows);
        for (int64_t t = 0; t < shape.n_tokens && out[i].passed; ++t)
          if (std::memcmp(y[2 * i + m].data() + t * n_out, y[2 * ref + m].data() + t * n_out,
                          static_cast<size_t>(cols) * sizeof(float)) != 0)
            out[i].passed = false;
      }
  }
  if (std::find(levels.begin(), levels.end(), SimdLevel::Amx) != levels.end()) amx_release();
  if (spent) *spent = seconds_since(start);
  return out;
}

}  // namespace ubatch::kernels::detail
