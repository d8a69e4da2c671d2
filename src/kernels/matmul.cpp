// matmul: dispatch to a SIMD level, the scalar reference, the packed-GEMM launcher, and scratch buffers.
#include "kernels/matmul.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/gemm_internal.h"
#include "kernels/matmul_float_inl.h"
#include "kernels/matmul_internal.h"
#include "kernels/matmul_unpack.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "kernels/simd16_scalar.h"

namespace ubatch::kernels {

namespace detail {

bool quant_info(TensorType t, bool q8_unsigned, QuantInfo& info) {
  switch (t) {
    case TensorType::Q4_0: info = {32, 32, 8, false}; return true;
    case TensorType::Q4_1: info = {32, 32, 0, true}; return true;
    case TensorType::Q5_0: info = {32, 32, 16, false}; return true;
    case TensorType::Q5_1: info = {32, 32, 0, true}; return true;
    case TensorType::Q8_0: info = {32, 32, q8_unsigned ? 128 : 0, false}; return true;
    case TensorType::Q2_K: info = {16, 256, 0, true}; return true;
    case TensorType::Q3_K: info = {16, 256, 4, false}; return true;
    case TensorType::Q4_K: info = {32, 256, 0, true}; return true;
    case TensorType::Q5_K: info = {32, 256, 0, true}; return true;
    case TensorType::Q6_K: info = {16, 256, 32, false}; return true;
    case TensorType::MXFP4: info = {32, 32, 12, false}; return true;
    default: return false;
  }
}

namespace {

// A growable, 64-byte aligned byte buffer (one per thread and purpose): allocates only when a
// call needs more than any earlier one.
class Scratch {
 public:
  uint8_t* get(size_t n) {
    if (n + 64 > cap_) {
      cap_ = std::max(n + 64, cap_ + cap_ / 2);
      buf_ = std::make_unique<uint8_t[]>(cap_);
    }
    const uintptr_t p = reinterpret_cast<uintptr_t>(buf_.get());
    return buf_.get() + ((64 - (p & 63)) & 63);
  }

 private:
  std::unique_ptr<uint8_t[]> buf_;
  size_t cap_ = 0;
};

thread_local Scratch t_row_scratch;  // per thread: float-weight scratch
thread_local Scratch t_packed_acts[kMaxMulti];  // caller: packed-GEMM activations, per layout

// Activations of the scalar reference: int8 rows in natural order and their block scales.
struct RefActs {
  std::vector<int8_t> q;  // [n_tokens, n_in]
  std::vector<float> d;   // [n_tokens, n_in / act_block]
};

void ref_quantize_acts(const QuantInfo& info, const float* x, int64_t n_in, int64_t n_tokens,
                       RefActs& a) {
  a.q.resize(static_cast<size_t>(n_tokens * n_in));
  a.d.resize(static_cast<size_t>(n_tokens * (n_in / info.act_block)));
  for (int64_t t = 0; t < n_tokens; ++t)
    quantize_act_row(x + t * n_in, n_in, info.act_block, a.q.data() + t * n_in,
                     a.d.data() + t * (n_in / info.act_block));
}

bool is_float_type(TensorType t) {
  return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16;
}

// Reference rows [r0, r1) of a K-quant weight: integer dots per segment, scaled by the
// integer sub-block scales in float within each super-block, then by d · dx (and the min term
// by −dmin · dx) — the canonical order of gemm_internal.h, from the GGUF blocks.
void reference_rows_kquant(const WeightView& w, const PackedFormat& f, const QuantInfo& info,
                           const RefActs& acts, int64_t n_tokens, float* y, int64_t r0, int64_t r1) {
  const int64_t n_in = w.n_in;
  const int64_t n_blocks = n_in / f.block_elems, n_seg = n_in / f.seg;
  const int segs = f.block_elems / f.seg;
  std::vector<uint8_t> u(static_cast<size_t>(n_in));
  std::vector<float> dw(static_cast<size_t>(n_seg)), mw(static_cast<size_t>(n_seg));
  std::vector<uint16_t> d16(static_cast<size_t>(n_blocks)), m16(static_cast<size_t>(n_blocks));
  std::vector<int8_t> sc(static_cast<size_t>(n_seg));
  std::vector<uint8_t> mn(static_cast<size_t>(n_seg));
  for (int64_t r = r0; r < r1; ++r) {
    const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
    unpack_row(w.type, row, n_in, true, u.data(), dw.data(), mw.data());
    UBATCH_CHECK(packed_row_scales(f, row, n_in, d16.data(), m16.data(), sc.data(), mn.data()));
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int8_t* xq = acts.q.data() + t * n_in;
      const float* xd = acts.d.data() + t * (n_in / info.act_block);
      float acc = 0.0f;
      for (int64_t b = 0; b < n_blocks; ++b) {
        float bacc = 0.0f;
        int32_t msum = 0;
        for (int64_t s = b * segs; s < (b + 1) * segs; ++s) {
          int32_t isum = 0, xsum = 0;
          for (int64_t i = s * f.seg; i < (s + 1) * f.seg; ++i) {
            isum += (static_cast<int32_t>(u[i]) - info.offset) * xq[i];
            xsum += xq[i];
          }
          bacc = std::fma(static_cast<float>(isum), static_cast<float>(sc[s]), bacc);
          msum += static_cast<int32_t>(mn[s]) * xsum;
        }
        const float dx = xd[b * f.block_elems / info.act_block];
        acc = std::fma(bacc, fp16_to_fp32(d16[b]) * dx, acc);
        if (f.has_min) acc = std::fma(static_cast<float>(msum), -fp16_to_fp32(m16[b]) * dx, acc);
      }
      y[t * w.n_out + r] = acc;
    }
  }
}

// Reference rows [r0, r1): float weights by the canonical float dot (matmul_float_inl.h, the
// scalar vocabulary: the bits of every SIMD level); quantized weights by integer dots per
// sub-block, scaled and summed in order.
void reference_rows(const WeightView& w, const float* x, const RefActs& acts, int64_t n_tokens,
                    float* y, int64_t r0, int64_t r1) {
  const int64_t n_in = w.n_in;
  if (is_float_type(w.type)) {
    std::vector<float> wr(static_cast<size_t>(n_in));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row_scalar(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_bytes,
                            wr.data(), n_in);
      for (int64_t t = 0; t < n_tokens; ++t)
        simd16::float_dot_tile<scalar::Simd16, 1>(wr.data(), n_in, x + t * n_in,
                                                  y + t * w.n_out + r, 0);
    }
    return;
  }
  QuantInfo info;
  UBATCH_CHECK(quant_info(w.type, true, info));
  PackedFormat pf;
  UBATCH_CHECK(packed_format(w.type, pf));
  if (pf.k_quant) {
    reference_rows_kquant(w, pf, info, acts, n_tokens, y, r0, r1);
    return;
  }
  const int64_t n_sub = n_in / info.sub_block;
  std::vector<uint8_t> u(static_cast<size_t>(n_in));
  std::vector<float> dw(static_cast<size_t>(n_sub)), mw(static_cast<size_t>(n_sub));
  for (int64_t r = r0; r < r1; ++r) {
    unpack_row(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_bytes, n_in, true,
               u.data(), dw.data(), mw.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int8_t* xq = acts.q.data() + t * n_in;
      const float* xd = acts.d.data() + t * (n_in / info.act_block);
      float acc = 0.0f;
      for (int64_t s = 0; s < n_sub; ++s) {
        int32_t isum = 0, xsum = 0;
        for (int64_t i = s * info.sub_block; i < (s + 1) * info.sub_block; ++i) {
          isum += (static_cast<int32_t>(u[i]) - info.offset) * xq[i];
          xsum += xq[i];
        }
        // The canonical order of gemm_internal.h: every packed path gives these bits.
        const float dx = xd[s * info.sub_block / info.act_block];
        acc = std::fma(static_cast<float>(isum), dw[s] * dx, acc);
        if (info.has_min) acc = std::fma(mw[s], dx * static_cast<float>(xsum), acc);
      }
      y[t * w.n_out + r] = acc;
    }
  }
}

// Thread ith's rows: whole multiples of kOutRows (the last range ends at n_out).
void split_rows(int64_t n_out, int ith, int nth, int64_t& r0, int64_t& r1) {
  ThreadPool::split((n_out + kOutRows - 1) / kOutRows, ith, nth, r0, r1);
  r0 = std::min(r0 * kOutRows, n_out);
  r1 = std::min(r1 * kOutRows, n_out);
}

void check_view(const WeightView& w) {
  UBATCH_CHECK_MSG(can_matmul(w.type), "matmul: unsupported weight type");
  UBATCH_CHECK(w.data != nullptr || w.n_out == 0);
  UBATCH_CHECK(w.n_in > 0 && w.n_out >= 0);
  UBATCH_CHECK(w.row_bytes == tensor_row_bytes(w.type, w.n_in));
}

thread_local Scratch t_gemm_scratch;  // per thread: unpacked weight panels

}  // namespace

uint8_t* thread_gemm_scratch(size_t bytes) { return t_gemm_scratch.get(bytes); }

void matmul_packed(SimdLevel level, const PackedWeight& w, const float* x, int64_t n_tokens,
                   float* y, ThreadPool& pool) {
  const PackedWeight* ws[1] = {&w};
  float* ys[1] = {y};
  matmul_packed_multi(level, ws, ys, 1, x, n_tokens, pool);
}

void matmul_packed_multi(SimdLevel level, const PackedWeight* const* ws, float* const* ys, int n,
                         const float* x, int64_t n_tokens, ThreadPool& pool) {
  UBATCH_CHECK(n >= 1 && n <= kMaxMulti);
  const LevelKernels lk = level_kernels(level);
  const GemmPanelsFn gemm = lk.gemm;
  const PackActsFn pack = lk.pack;
  // Activations quantized once per distinct type (the layout depends on nothing else; every
  // weight of one call has the same n_in).
  ActLayout acts[kMaxMulti];
  uint8_t* xps[kMaxMulti];
  int act_of[kMaxMulti], owner[kMaxMulti];
  int n_acts = 0;
  const int64_t n_in = ws[0]->n_in;
  for (int i = 0; i < n; ++i) {
    UBATCH_CHECK(ws[i]->n_in == n_in);
    act_of[i] = -1;
    for (int k = 0; k < n_acts; ++k)
      if (ws[owner[k]]->fmt.type == ws[i]->fmt.type) act_of[i] = k;
    if (act_of[i] >= 0) continue;
    act_of[i] = n_acts;
    owner[n_acts] = i;
    acts[n_acts] = act_layout(ws[i]->fmt, n_in);
    xps[n_acts] = t_packed_acts[n_acts].get(static_cast<size_t>(n_tokens * acts[n_acts].stride));
    ++n_acts;
  }
  auto pack_rows = [&](int64_t t0, int64_t t1) {
    for (int k = 0; k < n_acts; ++k) pack(ws[owner[k]]->fmt, acts[k], x, t0, t1, xps[k]);
  };
  // On the pool from 8,192 values (one token stays on this thread: split by token, the others
  // would only wait): bench_matmul Q8_0 1024 1024 2 32, 2 threads, 0.115 -> 0.107 ms with the
  // 32 x 1,024 activations quantized on both threads rather than one (the limit was 65,536).
  if (n_tokens < 2 || n_tokens * n_in < (1 << 13) || pool.n_threads() == 1) {
    pack_rows(0, n_tokens);
  } else {
    pool.run([&](int ith, int nth) {
      int64_t t0, t1;
      ThreadPool::split(n_tokens, ith, nth, t0, t1);
      if (t0 < t1) pack_rows(t0, t1);
    });
  }
  // One job for all weights: threads take contiguous runs of whole panel pairs (the
  // micro-kernel covers two panels at a time) over the weights laid end to end.
  int64_t pairs_end[kMaxMulti];
  size_t scratch_bytes = 0;
  for (int i = 0; i < n; ++i) {
    pairs_end[i] = (i ? pairs_end[i - 1] : 0) + (ws[i]->n_panels + 1) / 2;
    scratch_bytes = std::max(scratch_bytes, static_cast<size_t>(gemm_scratch_bytes(*ws[i])));
  }
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(pairs_end[n - 1], ith, nth, b, e);
    for (int i = 0; i < n && b < e; ++i) {
      const int64_t first = i ? pairs_end[i - 1] : 0;
      if (b >= pairs_end[i]) continue;
      const int64_t q0 = b - first, q1 = std::min(e, pairs_end[i]) - first;
      const PackedWeight& w = *ws[i];
      const int k = act_of[i];
      gemm(w, acts[k], xps[k], n_tokens, ys[i], w.n_out, 2 * q0, std::min(2 * q1, w.n_panels),
           t_gemm_scratch.get(scratch_bytes));
      b = pairs_end[i];
    }
  });
}

namespace {

// The levels this build has kernels for that the CPU runs, up to `ceiling` (which already
// passed its checks: VNNI for AVX-512, the self-check for AMX), lowest first.
std::vector<SimdLevel> usable_levels(SimdLevel ceiling) {
  std::vector<SimdLevel> out = {SimdLevel::Scalar};
#if defined(UBATCH_X86_KERNELS)
  for (SimdLevel l : {SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Amx})
    if (l <= ceiling) out.push_back(l);
#elif defined(UBATCH_ARM_KERNELS)
  for (SimdLevel l : {SimdLevel::Neon, SimdLevel::Dotprod})
    if (l <= ceiling) out.push_back(l);
#else
  (void)ceiling;
#endif
  return out;
}

std::string read_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1u << 16)) text.append(buf, n);
  std::fclose(f);
  return text;
}

// Writes the cache file (creating its directory), atomically: a temporary file renamed over
// it. "" on success, else the reason.
std::string write_text(const std::string& path, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return "cannot create its directory: " + ec.message();
  const std::string tmp = path + ".tmp" + std::to_string(static_cast<long>(getpid()));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return std::string("cannot write it: ") + std::strerror(errno);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return "cannot write it";
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return std::string("cannot rename it: ") + std::strerror(errno);
  }
  return "";
}

struct LevelChoice {
  SimdLevel level;  // the ceiling: highest level the CPU, UBATCH_SIMD and the self-checks allow
  std::string why;
  MatmulLevels levels;
};

// The plan: one level per shape class, the fastest measured of the usable levels (cached per
// CPU model), unless UBATCH_KERNEL_TUNE=off or only one level is usable.
void decide_plan(LevelChoice& c) {
  MatmulLevels& m = c.levels;
  m.ceiling = c.level;
  m.plan = LevelPlan::uniform(c.level);
  const std::vector<SimdLevel> usable = usable_levels(c.level);
  const char* tune = std::getenv("UBATCH_KERNEL_TUNE");
  const std::string mode = tune ? tune : "";
  if (mode != "" && mode != "off" && mode != "measure")
    std::fprintf(stderr, "ubatch: warning: UBATCH_KERNEL_TUNE=%s is not one of off, measure; ignored\n", tune);
  if (mode == "off") {
    m.source = "UBATCH_KERNEL_TUNE=off: the highest level for every shape";
    return;
  }
  if (usable.size() == 1) {
    m.source = "the only level here";
    return;
  }
  const std::string& key = level_cache_key();
  const std::string path = level_cache_path(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"), key);
  if (mode != "measure" && !path.empty()) {
    std::vector<LevelTiming> cached;
    if (parse_level_cache(read_text(path), key, &cached)) {
      bool complete = true;
      for (SimdLevel l : usable) {
        bool found = false;
        for (const LevelTiming& t : cached) found = found || t.level == l;
        complete = complete && found;
      }
      if (complete) {
        m.timings = cached;
        m.plan = choose_level_plan(cached, c.level);
        m.source = "measured earlier on this CPU model (" + path + ")";
        return;
      }
    }
  }
  double spent = 0;
  m.timings = measure_levels(usable, &spent);
  m.plan = choose_level_plan(m.timings, c.level);
  char took[64];
  std::snprintf(took, sizeof took, "measured now in %.0f ms", 1000.0 * spent);
  m.source = took;
  // Only an uncapped measurement of every level this CPU runs is worth keeping.
  const bool capped = std::string(simd_level_reason()).rfind("capped by", 0) == 0;
  if (path.empty()) {
    m.source += "; not cached: neither XDG_CACHE_HOME nor HOME is set";
  } else if (capped) {
    m.source += "; not cached: UBATCH_SIMD caps the levels";
  } else if (const std::string err = write_text(path, format_level_cache(key, m.timings)); !err.empty()) {
    m.source += "; not cached: " + path + ": " + err;
  } else {
    m.source += ", cached in " + path;
  }
}

const LevelChoice& level_choice() {
  static const LevelChoice choice = [] {
    LevelChoice c{simd_level(), "", {}};
#if defined(UBATCH_X86_KERNELS)
    if (c.level == SimdLevel::Avx512 && !cpu_features().avx512_vnni) {
      c.level = SimdLevel::Avx2;
      c.why = "AVX-512 without VNNI";
    }
    if (c.level == SimdLevel::Amx && !amx_gemm_self_check(&c.why)) {
      std::fprintf(stderr, "ubatch: AMX matmul disabled, using AVX-512: %s\n", c.why.c_str());
      c.level = SimdLevel::Avx512;
    }
#endif
    decide_plan(c);
    return c;
  }();
  return choice;
}

// The float-weight kernels of a level; nullptr for the scalar reference.
const Backend* float_backend(SimdLevel level) {
  switch (level) {
#if defined(UBATCH_X86_KERNELS)
    case SimdLevel::Amx:
    case SimdLevel::Avx512: return &backend_avx512();
    case SimdLevel::Avx2: return &backend_avx2();
#elif defined(UBATCH_ARM_KERNELS)
    case SimdLevel::Dotprod:
    case SimdLevel::Neon: return &backend_neon();
#endif
    default: return nullptr;
  }
}
}  // namespace

SimdLevel matmul_level(int64_t n_tokens) { return level_choice().levels.plan.at(n_tokens); }

void matmul_at_level(SimdLevel level, const WeightView& w, const float* x, int64_t n_tokens,
                     float* y, ThreadPool& pool) {
  check_view(w);
  UBATCH_CHECK(n_tokens >= 0);
  if (n_tokens == 0 || w.n_out == 0) return;
  if (w.packed) return matmul_packed(level, *w.packed, x, n_tokens, y, pool);

  if (!is_float_type(w.type)) {
    // Quantized weights are multiplied packed; a view without its packed copy is packed for
    // this call.
    Result<std::unique_ptr<PackedWeight>> pw = pack_weight(w.type, w.data, w.n_in, w.n_out);
    UBATCH_CHECK_MSG(pw.is_ok(), "matmul: cannot pack the weight");
    return matmul_packed(level, **pw, x, n_tokens, y, pool);
  }
  const Backend* be = float_backend(level);
  if (!be) {
    pool.run([&](int ith, int nth) {
      int64_t r0, r1;
      ThreadPool::split(w.n_out, ith, nth, r0, r1);
      reference_rows(w, x, RefActs{}, n_tokens, y, r0, r1);
    });
    return;
  }
  pool.run([&](int ith, int nth) {
    int64_t r0, r1;
    split_rows(w.n_out, ith, nth, r0, r1);
    if (r0 == r1) return;
    uint8_t* scratch = t_row_scratch.get(static_cast<size_t>(float_scratch_bytes(w.n_in, n_tokens)));
    be->rows_float(w, x, n_tokens, y, r0, r1, scratch);
  });
}

}  // namespace detail

bool can_matmul(TensorType t) { return can_dequantize(t); }

bool amx_matmul_usable(std::string* why) {
#if defined(UBATCH_X86_KERNELS)
  return detail::amx_gemm_self_check(why);
#else
  if (why) *why = "AMX needs x86-64";
  return false;
#endif
}

const MatmulLevels& matmul_levels() { return detail::level_choice().levels; }

std::string describe_matmul_levels() {
  const MatmulLevels& m = matmul_levels();
  return describe_level_plan(m.plan) + " (" + m.source + ")";
}

SimdLevel matmul_simd_level(std::string* why) {
  if (why) *why = detail::level_choice().why;
  return detail::level_choice().level;
}

void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  detail::matmul_at_level(detail::matmul_level(n_tokens), w, x, n_tokens, y, pool);
}

void matmul_multi(const WeightView* const* ws, float* const* ys, int n, const float* x,
                  int64_t n_tokens, ThreadPool& pool) {
  UBATCH_CHECK(n >= 0 && n_tokens >= 0);
  bool all_packed = n >= 1 && n <= detail::kMaxMulti && n_tokens > 0;
  const PackedWeight* pws[detail::kMaxMulti] = {};
  for (int i = 0; i < n && all_packed; ++i) {
    detail::check_view(*ws[i]);
    all_packed = ws[i]->packed != nullptr && ws[i]->n_out > 0 && ws[i]->n_in == ws[0]->n_in;
    if (all_packed) pws[i] = ws[i]->packed;
  }
  if (!all_packed) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, n_tokens, ys[i], pool);
    return;
  }
  detail::matmul_packed_multi(detail::matmul_level(n_tokens), pws, ys, n, x, n_tokens, pool);
}

void matmul_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  detail::check_view(w);
  UBATCH_CHECK(n_tokens >= 0);
  detail::RefActs acts;
  detail::QuantInfo info;
  if (detail::quant_info(w.type, true, info))
    detail::ref_quantize_acts(info, x, w.n_in, n_tokens, acts);
  detail::reference_rows(w, x, acts, n_tokens, y, 0, w.n_out);
}

}  // namespace ubatch::kernels
