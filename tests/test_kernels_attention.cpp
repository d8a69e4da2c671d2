// Attention over listed KV cells: the reference and every SIMD path this CPU has against a
// double-precision computation on the dequantized cache values; every path against the
// reference bit for bit; GQA mapping, softcap, head ranges, n_cells = 0, and independence from
// unlisted cells.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/quant.h"

// The per-ISA entry points behind the dispatch (attention_avx2.cpp, attention_avx512.cpp,
// attention_neon.cpp), built for their architecture only.
#if defined(UBATCH_X86_KERNELS)
namespace ubatch::kernels::avx2 {
void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end);
}  // namespace ubatch::kernels::avx2
namespace ubatch::kernels::avx512 {
void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end);
}  // namespace ubatch::kernels::avx512
#elif defined(UBATCH_ARM_KERNELS)
namespace ubatch::kernels::neon {
void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end);
}  // namespace ubatch::kernels::neon
#endif

namespace ubatch::kernels {
namespace {

using AttentionFn = void (*)(const AttentionShape&, const float*, const void*, const void*,
                             const int32_t*, int, float*, float*, int, int);

struct Impl {
  std::string name;
  AttentionFn fn;
};

std::vector<Impl> all_impls() {
  std::vector<Impl> impls = {{"ref", &ref::attention}, {"dispatched", &kernels::attention}};
#if defined(UBATCH_X86_KERNELS)
  if (cpu_features().avx2) impls.push_back({"avx2", &avx2::attention});
  if (cpu_features().avx512) impls.push_back({"avx512", &avx512::attention});
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon) impls.push_back({"neon", &neon::attention});
#endif
  return impls;
}

// One layer's K and V cells stored as `type`, with the values they hold as floats.
struct Cache {
  TensorType type;
  int n_cells, n_kv_head, head_dim;
  size_t row_bytes;
  std::vector<uint8_t> k, v;        // [n_cells] rows of row_bytes
  std::vector<float> k_val, v_val;  // [n_cells, n_kv_head * head_dim] dequantized
};

// Encodes one row of n floats as type t at dst; returns the values it decodes to. Q8_0 is
// encoded here ({f16 d; int8 qs[32]}, d = max|x| / 127) so the test does not depend on the
// quantizer; the fp16 conversions come from quant.h.
std::vector<float> encode_row(TensorType t, const float* x, int n, uint8_t* dst) {
  std::vector<float> val(static_cast<size_t>(n));
  if (t == TensorType::F32) {
    std::memcpy(dst, x, sizeof(float) * static_cast<size_t>(n));
    std::memcpy(val.data(), x, sizeof(float) * static_cast<size_t>(n));
  } else if (t == TensorType::F16) {
    for (int i = 0; i < n; ++i) {
      const uint16_t h = fp32_to_fp16(x[i]);
      std::memcpy(dst + 2 * i, &h, 2);
      val[static_cast<size_t>(i)] = fp16_to_fp32(h);
    }
  } else {
    for (int b = 0; b < n / 32; ++b) {
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
      const uint16_t dh = fp32_to_fp16(amax / 127.0f);
      const float d = fp16_to_fp32(dh);
      uint8_t* blk = dst + b * 34;
      std::memcpy(blk, &dh, 2);
      for (int i = 0; i < 32; ++i) {
        const float qf = d > 0.0f ? std::round(x[b * 32 + i] / d) : 0.0f;
        const auto qv = static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, qf)));
        std::memcpy(blk + 2 + i, &qv, 1);
        val[static_cast<size_t>(b * 32 + i)] = d * static_cast<float>(qv);
      }
    }
  }
  return val;
}

Cache make_cache(TensorType type, int n_cells, int n_kv_head, int head_dim, uint64_t seed,
                 size_t pad_bytes = 0) {
  Cache c{type, n_cells, n_kv_head, head_dim, 0, {}, {}, {}, {}};
  const int row = n_kv_head * head_dim;
  c.row_bytes = tensor_row_bytes(type, row) + pad_bytes;
  c.k.assign(c.row_bytes * static_cast<size_t>(n_cells), 0xCD);
  c.v.assign(c.row_bytes * static_cast<size_t>(n_cells), 0xCD);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(row));
  for (int cell = 0; cell < n_cells; ++cell) {
    for (std::vector<uint8_t>* buf : {&c.k, &c.v}) {
      for (float& f : x) f = dist(rng);
      const std::vector<float> val =
          encode_row(type, x.data(), row, buf->data() + c.row_bytes * static_cast<size_t>(cell));
      std::vector<float>& dst = buf == &c.k ? c.k_val : c.v_val;
      dst.insert(dst.end(), val.begin(), val.end());
    }
  }
  return c;
}

AttentionShape shape_of(const Cache& c, int n_head, float softcap = 0.0f) {
  AttentionShape s;
  s.n_head = n_head;
  s.n_kv_head = c.n_kv_head;
  s.head_dim = c.head_dim;
  s.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  s.softcap = softcap;
  s.kv_type = c.type;
  s.k_row_bytes = c.row_bytes;
  s.v_row_bytes = c.row_bytes;
  return s;
}

// The definition, in double, on the cache's float values.
std::vector<double> oracle(const AttentionShape& s, const std::vector<float>& q, const Cache& c,
                           const std::vector<int32_t>& cells) {
  const int hd = s.head_dim, row = s.n_kv_head * hd, group = s.n_head / s.n_kv_head;
  std::vector<double> out(static_cast<size_t>(s.n_head * hd), 0.0);
  for (int h = 0; h < s.n_head; ++h) {
    const int g = h / group;
    std::vector<double> p(cells.size());
    double mx = -1e300;
    for (size_t j = 0; j < cells.size(); ++j) {
      double dot = 0.0;
      for (int d = 0; d < hd; ++d)
        dot += static_cast<double>(q[static_cast<size_t>(h * hd + d)]) *
               c.k_val[static_cast<size_t>(cells[j] * row + g * hd + d)];
      double sc = dot * s.scale;
      if (s.softcap > 0.0f) sc = s.softcap * std::tanh(sc / s.softcap);
      p[j] = sc;
      mx = std::max(mx, sc);
    }
    double z = 0.0;
    for (double& v : p) z += (v = std::exp(v - mx));
    for (size_t j = 0; j < cells.size(); ++j)
      for (int d = 0; d < hd; ++d)
        out[static_cast<size_t>(h * hd + d)] +=
            p[j] / z * c.v_val[static_cast<size_t>(cells[j] * row + g * hd + d)];
  }
  return out;
}

std::vector<float> random_q(int n, uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> q(static_cast<size_t>(n));
  for (float& v : q) v = dist(rng);
  return q;
}

std::vector<float> run(const Impl& impl, const AttentionShape& s, const std::vector<float>& q,
                       const Cache& c, const std::vector<int32_t>& cells, int head_begin = 0,
                       int head_end = -1) {
  if (head_end < 0) head_end = s.n_head;
  std::vector<float> out(static_cast<size_t>(s.n_head * s.head_dim),
                         std::numeric_limits<float>::quiet_NaN());
  std::vector<float> scratch(cells.size() + 1);
  impl.fn(s, q.data(), c.k.data(), c.v.data(), cells.data(), static_cast<int>(cells.size()),
          out.data(), scratch.data(), head_begin, head_end);
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

struct Case {
  TensorType type;
  int head_dim, n_head, n_kv_head, n_cells;
  float softcap;
};

std::string describe(const Case& c) {
  return std::string(tensor_type_name(c.type)) + " head_dim " + std::to_string(c.head_dim) +
         " heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_kv_head) + " cells " +
         std::to_string(c.n_cells) + " softcap " + std::to_string(c.softcap);
}

TEST(KernelsAttention, AllPathsMatchDoubleOracle) {
  std::vector<Case> cases;
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    for (int hd : {32, 64, 96, 128, 256}) {
      for (int nc : {1, 7, 40, 301}) {
        cases.push_back({t, hd, 8, 2, nc, 0.0f});
      }
      cases.push_back({t, hd, 6, 6, 19, 0.0f});
      cases.push_back({t, hd, 4, 1, 50, 5.0f});
    }
  }
  // head_dim with tails for the 8- and 16-wide vectors (F32/F16 only: Q8_0 needs % 32).
  for (TensorType t : {TensorType::F32, TensorType::F16}) {
    for (int hd : {4, 12, 20, 72, 136, 200}) cases.push_back({t, hd, 4, 2, 23, 0.0f});
  }
  uint64_t seed = 1;
  for (const Case& cs : cases) {
    const int n_total = cs.n_cells + 13;
    const Cache cache = make_cache(cs.type, n_total, cs.n_kv_head, cs.head_dim, ++seed, 6);
    const AttentionShape s = shape_of(cache, cs.n_head, cs.softcap);
    const std::vector<float> q = random_q(cs.n_head * cs.head_dim, ++seed, 2.0f);
    // Cells in a scrambled order, skipping some.
    std::vector<int32_t> cells;
    for (int j = 0; j < cs.n_cells; ++j) cells.push_back((j * 7 + 3) % n_total);
    const std::vector<double> expect = oracle(s, q, cache, cells);
    const double tol = 1e-5 * max_abs(expect);
    for (const Impl& impl : all_impls()) {
      const std::vector<float> out = run(impl, s, q, cache, cells);
      double worst = 0.0;
      for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - expect[i]));
      EXPECT_LE(worst, tol) << impl.name << " " << describe(cs);
    }
  }
}

// Every level against the reference, bit for bit (one arithmetic: attention_inl.h over the
// vocabularies of simd16.h): KV types, head_dim tails of the 16-lane slices, chunk boundaries
// of the online softmax (64 cells), GQA group sizes (passes of 8, 4, 2, 1 heads), softcap, and
// each head computed alone or with its group.
TEST(KernelsAttention, EveryLevelSameBitsAsRef) {
  struct Shape {
    int head_dim, n_head, n_kv_head;
  };
  const Shape shapes[] = {{64, 4, 2}, {128, 2, 1}, {256, 4, 1}, {32, 12, 1}, {96, 6, 2},
                          {64, 5, 5}, {20, 3, 1},  {4, 2, 1},   {72, 8, 1},  {136, 2, 2}};
  uint64_t seed = 500;
  int n_cases = 0;
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    for (const Shape& sh : shapes) {
      if (t == TensorType::Q8_0 && sh.head_dim % 32 != 0) continue;
      for (int n_cells : {1, 15, 16, 17, 63, 64, 65, 130, 257}) {
        for (float softcap : {0.0f, 3.0f}) {
          if (softcap > 0.0f && n_cells % 2 == 0) continue;  // fewer cases, same coverage
          const Cache cache = make_cache(t, n_cells + 5, sh.n_kv_head, sh.head_dim, ++seed, 6);
          const AttentionShape s = shape_of(cache, sh.n_head, softcap);
          // Large queries: peaked scores, maxima rising across chunks.
          const std::vector<float> q = random_q(sh.n_head * sh.head_dim, ++seed, 4.0f);
          std::vector<int32_t> cells;
          for (int j = 0; j < n_cells; ++j) cells.push_back((j * 3 + 1) % (n_cells + 5));
          const std::vector<float> r = run({"ref", &ref::attention}, s, q, cache, cells);
          const std::string what = std::string(tensor_type_name(t)) + " head_dim " +
                                   std::to_string(sh.head_dim) + " heads " +
                                   std::to_string(sh.n_head) + "/" + std::to_string(sh.n_kv_head) +
                                   " cells " + std::to_string(n_cells) + " softcap " +
                                   std::to_string(softcap);
          for (const Impl& impl : all_impls()) {
            ASSERT_EQ(std::memcmp(run(impl, s, q, cache, cells).data(), r.data(), r.size() * 4), 0)
                << impl.name << " " << what;
            // One head at a time: the same bits as in the group pass.
            std::vector<float> one(r.size(), std::numeric_limits<float>::quiet_NaN());
            for (int h = 0; h < sh.n_head; ++h) {
              std::vector<float> part = run(impl, s, q, cache, cells, h, h + 1);
              std::memcpy(one.data() + h * sh.head_dim, part.data() + h * sh.head_dim,
                          sizeof(float) * static_cast<size_t>(sh.head_dim));
            }
            ASSERT_EQ(std::memcmp(one.data(), r.data(), r.size() * 4), 0)
                << impl.name << " per head, " << what;
          }
          ++n_cases;
        }
      }
    }
  }
  std::printf("%d cases, levels:", n_cases);
  for (const Impl& impl : all_impls()) std::printf(" %s", impl.name.c_str());
  std::printf("\n");
}

// Special values in the cache: zeros, subnormals and huge values in K and V (scores of ±1e4
// with softcap off: a single cell takes everything), the same bits on every level.
TEST(KernelsAttention, SpecialValuesSameBits) {
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    const int hd = 64, n = 80;
    Cache cache = make_cache(t, n, 1, hd, 77);
    std::vector<float> row(static_cast<size_t>(hd));
    for (int c = 0; c < n; c += 7) {  // overwrite some K and V rows
      for (int d = 0; d < hd; ++d)
        row[static_cast<size_t>(d)] = c % 3 == 0 ? 0.0f : c % 3 == 1 ? 1e-7f * (d - 32) : 60.0f * (d % 5 - 2);
      encode_row(t, row.data(), hd, cache.k.data() + cache.row_bytes * static_cast<size_t>(c));
      encode_row(t, row.data(), hd, cache.v.data() + cache.row_bytes * static_cast<size_t>(c));
    }
    std::vector<int32_t> cells;
    for (int j = 0; j < n; ++j) cells.push_back(j);
    for (float qs : {0.0f, 1e-3f, 1.0f, 30.0f}) {
      const AttentionShape s = shape_of(cache, 2);
      const std::vector<float> q = random_q(2 * hd, 78, qs);
      const std::vector<float> r = run({"ref", &ref::attention}, s, q, cache, cells);
      for (float v : r) ASSERT_TRUE(std::isfinite(v)) << tensor_type_name(t) << " q scale " << qs;
      for (const Impl& impl : all_impls())
        ASSERT_EQ(std::memcmp(run(impl, s, q, cache, cells).data(), r.data(), r.size() * 4), 0)
            << impl.name << " " << tensor_type_name(t) << " q scale " << qs;
    }
  }
}

TEST(KernelsAttention, OneCellGivesItsValueRow) {
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    const Cache cache = make_cache(t, 5, 2, 64, 7);
    const AttentionShape s = shape_of(cache, 2);
    const std::vector<float> q = random_q(2 * 64, 8, 1.0f);
    for (const Impl& impl : all_impls()) {
      const std::vector<float> out = run(impl, s, q, cache, {3});
      for (int h = 0; h < 2; ++h)
        for (int d = 0; d < 64; ++d)
          EXPECT_FLOAT_EQ(out[static_cast<size_t>(h * 64 + d)],
                          cache.v_val[static_cast<size_t>(3 * 128 + h * 64 + d)])
              << impl.name;
    }
  }
}

// Head h reads KV head h / (n_head / n_kv_head): each output head equals a one-head attention
// over that KV head alone, bit for bit (a head's arithmetic does not depend on the heads
// computed with it; 12 heads on one KV head take more than one pass).
TEST(KernelsAttention, GqaMapsHeadsToKvGroups) {
  const int hd = 64;
  for (auto [n_head, n_kv_head] : {std::pair{8, 2}, std::pair{12, 1}, std::pair{6, 3}}) {
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
      const Cache cache = make_cache(t, 150, n_kv_head, hd, 11);
      const AttentionShape s = shape_of(cache, n_head);
      const std::vector<float> q = random_q(n_head * hd, 12, 2.0f);
      std::vector<int32_t> cells;
      for (int j = 0; j < 150; ++j) cells.push_back(j);
      const size_t head_bytes = tensor_row_bytes(t, hd);
      for (const Impl& impl : all_impls()) {
        const std::vector<float> out = run(impl, s, q, cache, cells);
        for (int h = 0; h < n_head; ++h) {
          const int g = h / (n_head / n_kv_head);
          AttentionShape one = s;
          one.n_head = 1;
          one.n_kv_head = 1;
          std::vector<float> o(hd), scratch(cells.size());
          impl.fn(one, q.data() + h * hd, cache.k.data() + g * head_bytes,
                  cache.v.data() + g * head_bytes, cells.data(), 150, o.data(), scratch.data(),
                  0, 1);
          for (int d = 0; d < hd; ++d)
            ASSERT_EQ(out[static_cast<size_t>(h * hd + d)], o[static_cast<size_t>(d)])
                << impl.name << " " << tensor_type_name(t) << " heads " << n_head << "/"
                << n_kv_head << " head " << h;
        }
      }
    }
  }
}

// The maximum score arriving late (rescaling what was accumulated) or early gives the same
// result up to rounding; a dominant cell's V row comes out.
TEST(KernelsAttention, MaximumInAnyChunk) {
  const int hd = 64, n = 200;
  for (int hot : {0, 70, 199}) {
    Cache cache = make_cache(TensorType::F32, n, 1, hd, 31);
    std::vector<float> q = random_q(hd, 32, 1.0f);
    // K[hot] = 4·q: its score (scale 1/8) is far above the others'.
    for (int d = 0; d < hd; ++d) {
      const float v = 4.0f * q[static_cast<size_t>(d)];
      std::memcpy(cache.k.data() + cache.row_bytes * hot + 4 * d, &v, 4);
      cache.k_val[static_cast<size_t>(hot * hd + d)] = v;
    }
    const AttentionShape s = shape_of(cache, 1);
    std::vector<int32_t> cells;
    for (int j = 0; j < n; ++j) cells.push_back(j);
    const std::vector<double> expect = oracle(s, q, cache, cells);
    for (const Impl& impl : all_impls()) {
      const std::vector<float> out = run(impl, s, q, cache, cells);
      for (int d = 0; d < hd; ++d) {
        EXPECT_NEAR(out[static_cast<size_t>(d)], expect[static_cast<size_t>(d)],
                    1e-5 * max_abs(expect))
            << impl.name << " hot " << hot;
        EXPECT_NEAR(out[static_cast<size_t>(d)], cache.v_val[static_cast<size_t>(hot * hd + d)],
                    1e-2)
            << impl.name << " hot " << hot;
      }
    }
  }
}

TEST(KernelsAttention, GqaConstantValuesPerGroup) {
  // V of KV head g is g + 1 everywhere: every query head of group g outputs g + 1.
  const int n_head = 6, n_kv_head = 3, hd = 32;
  Cache cache = make_cache(TensorType::F32, 10, n_kv_head, hd, 13);
  for (int cell = 0; cell < 10; ++cell)
    for (int g = 0; g < n_kv_head; ++g)
      for (int d = 0; d < hd; ++d) {
        const float v = static_cast<float>(g + 1);
        std::memcpy(cache.v.data() + cache.row_bytes * cell + 4 * (g * hd + d), &v, 4);
      }
  const AttentionShape s = shape_of(cache, n_head);
  const std::vector<float> q = random_q(n_head * hd, 14, 1.0f);
  for (const Impl& impl : all_impls()) {
    const std::vector<float> out = run(impl, s, q, cache, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    for (int h = 0; h < n_head; ++h)
      for (int d = 0; d < hd; ++d)
        EXPECT_NEAR(out[static_cast<size_t>(h * hd + d)], h / 2 + 1, 1e-5) << impl.name;
  }
}

TEST(KernelsAttention, SoftcapBoundsScores) {
  // Huge scores: without softcap the best cell takes (almost) everything; softcap 1 keeps
  // every score in (-1, 1), so the output is a broad mixture — both against the oracle.
  const int hd = 64;
  const Cache cache = make_cache(TensorType::F32, 16, 1, hd, 15);
  std::vector<int32_t> cells;
  for (int j = 0; j < 16; ++j) cells.push_back(j);
  const std::vector<float> q = random_q(hd, 16, 100.0f);
  for (const Impl& impl : all_impls()) {
    AttentionShape s = shape_of(cache, 1, 1.0f);
    const std::vector<float> capped = run(impl, s, q, cache, cells);
    const std::vector<double> expect = oracle(s, q, cache, cells);
    for (int d = 0; d < hd; ++d)
      EXPECT_NEAR(capped[static_cast<size_t>(d)], expect[static_cast<size_t>(d)],
                  1e-5 * max_abs(expect))
          << impl.name;
    s.softcap = 0.0f;
    const std::vector<float> plain = run(impl, s, q, cache, cells);
    const std::vector<double> expect_plain = oracle(s, q, cache, cells);
    EXPECT_GT(std::fabs(plain[0] - capped[0]), 1e-3);
    EXPECT_NEAR(plain[0], expect_plain[0], 1e-5 * max_abs(expect_plain)) << impl.name;
  }
}

TEST(KernelsAttention, NoCellsWritesZerosInRangeOnly) {
  const Cache cache = make_cache(TensorType::F16, 4, 2, 64, 17);
  const AttentionShape s = shape_of(cache, 4);
  const std::vector<float> q = random_q(4 * 64, 18, 1.0f);
  for (const Impl& impl : all_impls()) {
    std::vector<float> out(4 * 64, std::numeric_limits<float>::quiet_NaN());
    impl.fn(s, q.data(), cache.k.data(), cache.v.data(), nullptr, 0, out.data(), nullptr, 1, 3);
    for (int i = 0; i < 4 * 64; ++i) {
      if (i >= 64 && i < 3 * 64)
        EXPECT_EQ(out[static_cast<size_t>(i)], 0.0f) << impl.name;
      else
        EXPECT_TRUE(std::isnan(out[static_cast<size_t>(i)])) << impl.name;
    }
  }
}

TEST(KernelsAttention, HeadRangesSplitExactly) {
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    const Cache cache = make_cache(t, 50, 2, 128, 19);
    const AttentionShape s = shape_of(cache, 8);
    const std::vector<float> q = random_q(8 * 128, 20, 2.0f);
    std::vector<int32_t> cells;
    for (int j = 49; j >= 0; j -= 3) cells.push_back(j);
    for (const Impl& impl : all_impls()) {
      const std::vector<float> full = run(impl, s, q, cache, cells);
      const std::vector<float> part = run(impl, s, q, cache, cells, 3, 7);
      for (int i = 0; i < 8 * 128; ++i) {
        if (i >= 3 * 128 && i < 7 * 128)
          ASSERT_EQ(part[static_cast<size_t>(i)], full[static_cast<size_t>(i)]) << impl.name;
        else
          ASSERT_TRUE(std::isnan(part[static_cast<size_t>(i)])) << impl.name;
      }
    }
  }
}

// The task size callers deal heads in (block_attention.cpp): the largest divisor of the group
// that leaves four tasks per thread, else one head per task. (Any grouping gives the same bits:
// HeadRangesSplitExactly.)
TEST(KernelsAttention, HeadsPerTaskLeavesFourTasksPerThread) {
  EXPECT_EQ(attention_heads_per_task(32, 8, 1, 2), 4);   // Llama-3-8B, 1 token: 8 tasks of a whole group
  EXPECT_EQ(attention_heads_per_task(32, 8, 4, 2), 4);
  EXPECT_EQ(attention_heads_per_task(32, 32, 1, 2), 1);  // no grouped heads
  EXPECT_EQ(attention_heads_per_task(4, 1, 1, 2), 1);    // 4 heads, 1 token: too few tasks to group
  EXPECT_EQ(attention_heads_per_task(4, 1, 2, 2), 1);
  EXPECT_EQ(attention_heads_per_task(4, 1, 4, 2), 2);    // 8 tasks of 2, not 4 of 4
  EXPECT_EQ(attention_heads_per_task(4, 1, 8, 2), 4);
  EXPECT_EQ(attention_heads_per_task(64, 8, 1, 2), 8);   // gpt-oss
  EXPECT_EQ(attention_heads_per_task(14, 2, 1, 1), 1);   // a group of 7: 2 tasks < 4
  EXPECT_EQ(attention_heads_per_task(14, 2, 2, 1), 7);
  EXPECT_EQ(attention_heads_per_task(14, 2, 2, 2), 1);   // 7 does not leave 8 tasks, and nothing between 7 and 1 divides 7
}

// The result depends only on q, the listed cells and their contents: rewriting every other
// cell, or placing the same cells elsewhere in a bigger cache, changes nothing.
TEST(KernelsAttention, OnlyListedCellsMatter) {
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    Cache cache = make_cache(t, 40, 2, 64, 21);
    const AttentionShape s = shape_of(cache, 4);
    const std::vector<float> q = random_q(4 * 64, 22, 2.0f);
    const std::vector<int32_t> cells = {5, 17, 2, 33};
    for (const Impl& impl : all_impls()) {
      const std::vector<float> before = run(impl, s, q, cache, cells);
      Cache other = make_cache(t, 40, 2, 64, 99);
      for (int32_t c : cells) {
        std::memcpy(other.k.data() + cache.row_bytes * c, cache.k.data() + cache.row_bytes * c,
                    cache.row_bytes);
        std::memcpy(other.v.data() + cache.row_bytes * c, cache.v.data() + cache.row_bytes * c,
                    cache.row_bytes);
      }
      EXPECT_EQ(run(impl, s, q, other, cells), before) << impl.name;
      // The same contents at other indices.
      Cache moved = make_cache(t, 40, 2, 64, 98);
      std::vector<int32_t> moved_cells;
      for (size_t j = 0; j < cells.size(); ++j) {
        const int32_t to = 39 - static_cast<int32_t>(j);
        std::memcpy(moved.k.data() + cache.row_bytes * to,
                    cache.k.data() + cache.row_bytes * cells[j], cache.row_bytes);
        std::memcpy(moved.v.data() + cache.row_bytes * to,
                    cache.v.data() + cache.row_bytes * cells[j], cache.row_bytes);
        moved_cells.push_back(to);
      }
      EXPECT_EQ(run(impl, s, q, moved, moved_cells), before) << impl.name;
    }
  }
}

// The kernel reads the same Q8_0 / F16 layout the block-format code writes.
TEST(KernelsAttention, ReadsTheQuantizerLayout) {
  const int n_cells = 12, n_kv_head = 2, hd = 64, row = n_kv_head * hd;
  for (TensorType t : {TensorType::F16, TensorType::Q8_0}) {
    ASSERT_TRUE(can_quantize(t) && can_dequantize(t));
    Cache cache{t, n_cells, n_kv_head, hd, tensor_row_bytes(t, row), {}, {}, {}, {}};
    cache.k.resize(cache.row_bytes * n_cells);
    cache.v.resize(cache.row_bytes * n_cells);
    cache.k_val.resize(static_cast<size_t>(n_cells * row));
    cache.v_val.resize(static_cast<size_t>(n_cells * row));
    for (int c = 0; c < n_cells; ++c) {
      const std::vector<float> kx = random_q(row, 300 + c, 1.0f), vx = random_q(row, 400 + c, 1.0f);
      quantize_row(t, kx.data(), cache.k.data() + cache.row_bytes * c, row);
      quantize_row(t, vx.data(), cache.v.data() + cache.row_bytes * c, row);
      dequantize_row(t, cache.k.data() + cache.row_bytes * c, cache.k_val.data() + c * row, row);
      dequantize_row(t, cache.v.data() + cache.row_bytes * c, cache.v_val.data() + c * row, row);
    }
    const AttentionShape s = shape_of(cache, 4);
    const std::vector<float> q = random_q(4 * hd, 23, 2.0f);
    const std::vector<int32_t> cells = {0, 3, 4, 8, 11};
    const std::vector<double> expect = oracle(s, q, cache, cells);
    for (const Impl& impl : all_impls()) {
      const std::vector<float> out = run(impl, s, q, cache, cells);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], expect[i], 1e-5 * max_abs(expect)) << impl.name;
    }
  }
}

// Attention sinks (attention.h): one logit per head joins the softmax denominator and adds no
// value. Against the definition in double (out = out_without · L / (L + e^σ), all relative to
// the common maximum), and the same bits on every level and per head; σ = −inf is no sink, a
// huge σ takes (nearly) all the mass, no cells give zeros.
TEST(KernelsAttention, SinksJoinTheDenominatorOnEveryLevel) {
  const float kInf = std::numeric_limits<float>::infinity();
  uint64_t seed = 900;
  int n_cases = 0;
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    for (int n_cells : {0, 1, 17, 64, 65, 130}) {
      const int n_head = 4, n_kv_head = 2, hd = 64;
      const Cache cache = make_cache(t, n_cells + 3, n_kv_head, hd, ++seed);
      AttentionShape s = shape_of(cache, n_head);
      const std::vector<float> sinks = {0.5f, -kInf, 3.0f, -2.0f};
      s.sinks = sinks.data();
      const std::vector<float> q = random_q(n_head * hd, ++seed, 2.0f);
      std::vector<int32_t> cells;
      for (int j = 0; j < n_cells; ++j) cells.push_back((j * 5 + 2) % (n_cells + 3));
      AttentionShape plain = s;
      plain.sinks = nullptr;
      const std::vector<double> without = oracle(plain, q, cache, cells);
      const std::vector<float> r = run({"ref", &ref::attention}, s, q, cache, cells);
      const int group = n_head / n_kv_head, row = n_kv_head * hd;
      for (int h = 0; h < n_head; ++h) {
        double mx = sinks[static_cast<size_t>(h)];
        std::vector<double> z;
        for (int32_t c : cells) {
          double dot = 0;
          for (int d = 0; d < hd; ++d)
            dot += double(q[static_cast<size_t>(h * hd + d)]) * cache.k_val[static_cast<size_t>(c * row + (h / group) * hd + d)];
          z.push_back(dot * s.scale);
          mx = std::max(mx, z.back());
        }
        double l = 0;
        for (double v : z) l += std::exp(v - mx);
        const double sink = std::exp(double(sinks[static_cast<size_t>(h)]) - mx);
        const double f = n_cells == 0 ? 0.0 : l / (l + sink);
        for (int d = 0; d < hd; ++d) {
          const double want = without[static_cast<size_t>(h * hd + d)] * f;
          EXPECT_NEAR(r[static_cast<size_t>(h * hd + d)], want, 1e-5 * (1 + std::fabs(want)))
              << tensor_type_name(t) << " cells " << n_cells << " head " << h;
        }
      }
      for (const Impl& impl : all_impls()) {
        ASSERT_EQ(std::memcmp(run(impl, s, q, cache, cells).data(), r.data(), r.size() * 4), 0)
            << impl.name << " " << tensor_type_name(t) << " cells " << n_cells;
        for (int h = 0; h < n_head; ++h) {
          const std::vector<float> part = run(impl, s, q, cache, cells, h, h + 1);
          ASSERT_EQ(std::memcmp(part.data() + h * hd, r.data() + h * hd, sizeof(float) * hd), 0)
              << impl.name << " per head " << h;
        }
      }
      // The −inf head is the plain attention, bit for bit.
      const std::vector<float> p = run({"ref", &ref::attention}, plain, q, cache, cells);
      EXPECT_EQ(std::memcmp(p.data() + hd, r.data() + hd, sizeof(float) * hd), 0);
      ++n_cases;
    }
  }
  std::printf("%d sink cases\n", n_cases);
}

}  // namespace
}  // namespace ubatch::kernels
