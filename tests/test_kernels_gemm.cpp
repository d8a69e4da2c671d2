// Packed weights and the packed GEMM: the layout against the GGUF blocks, and every SIMD
// level bit for bit against matmul_reference (which reads the GGUF blocks, not the packed
// copy) over row tails, token counts {1..12, 16, 17, 23, 24, 31, 32, 33, 37, 63, 64, 65} and
// thread counts {1, 2, 3} — which
// pins the packed layout, cross-level bit identity and batch invariance at once.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/amx.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm_internal.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/packed_weight.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "kernel_test_data.h"

namespace ubatch::kernels {
namespace {

const TensorType kQuantTypes[] = {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                  TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K,
                                  TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                                  TensorType::Q6_K, TensorType::MXFP4};

std::vector<int64_t> gemm_widths(TensorType t) {
  PackedFormat f;
  packed_format(t, f);
  if (f.k_quant) return {256, 512, 1280};
  return {32, 96, 640, 2048};
}

// Why `level` cannot run in this build on this CPU ("" when it can).
std::string missing(SimdLevel level) {
  if (level == SimdLevel::Scalar) return "";
#if defined(UBATCH_X86_KERNELS)
  std::string why;
  switch (level) {
    case SimdLevel::Avx2: return cpu_features().avx2 ? "" : "this CPU has no AVX2";
    case SimdLevel::Avx512:
      return cpu_features().avx512 && cpu_features().avx512_vnni ? "" : "this CPU has no AVX-512 VNNI";
    case SimdLevel::Amx: return detail::amx_gemm_self_check(&why) ? "" : why;
    default: break;
  }
#elif defined(UBATCH_ARM_KERNELS)
  switch (level) {
    case SimdLevel::Neon: return cpu_features().neon ? "" : "this CPU has no NEON (HWCAP_ASIMD)";
    case SimdLevel::Dotprod: return cpu_features().dotprod ? "" : "this CPU has no dot product (HWCAP_ASIMDDP)";
    default: break;
  }
#endif
  return std::string("this build (") + simd_level_names() + ") has no " + simd_level_name(level) + " kernels";
}

std::string name(TensorType t, int64_t n_in, int64_t n_out) {
  return std::string(tensor_type_name(t)) + " n_in=" + std::to_string(n_in) +
         " n_out=" + std::to_string(n_out);
}

TEST(PackedWeight, FormatsAreConsistent) {
  for (TensorType t : kQuantTypes) {
    PackedFormat f;
    ASSERT_TRUE(packed_format(t, f)) << tensor_type_name(t);
    EXPECT_EQ(f.steps * 4, f.seg);
    EXPECT_EQ(f.block_elems % f.seg, 0);
    // Within a few percent of the GGUF size, except Q2_K/Q3_K (documented in packed_weight.h).
    const double gguf = double(tensor_row_bytes(t, f.block_elems)) * kPanelRows;
    const double ratio = f.block_bytes / gguf;
    EXPECT_GE(ratio, 1.0) << tensor_type_name(t);
    if (t == TensorType::MXFP4) {
      EXPECT_NEAR(ratio, 288.0 / 272.0, 1e-9);  // f16 scales for the E8M0 bytes
    } else if (t != TensorType::Q2_K && t != TensorType::Q3_K) {
      EXPECT_LE(ratio, 1.03) << tensor_type_name(t);
    }
  }
  PackedFormat f;
  EXPECT_FALSE(packed_format(TensorType::F16, f));
}

TEST(PackedWeight, RejectsBadShapes) {
  std::vector<uint8_t> bytes(4096);
  EXPECT_FALSE(pack_weight(TensorType::F32, bytes.data(), 32, 1).is_ok());
  EXPECT_FALSE(pack_weight(TensorType::Q4_K, bytes.data(), 32, 1).is_ok());
  EXPECT_FALSE(pack_weight(TensorType::Q8_0, bytes.data(), 32, 0).is_ok());
}

TEST(PackedWeight, DequantizesLikeTheGgufBlocks) {
  for (TensorType t : kQuantTypes)
    for (int64_t n_in : gemm_widths(t))
      for (int64_t n_out : {1, 16, 37}) {
        const Weights w = random_weights(t, n_in, n_out, 7u + static_cast<uint32_t>(n_in + n_out));
        auto pw = pack_weight(t, w.data.data(), n_in, n_out);
        ASSERT_TRUE(pw.is_ok()) << pw.message();
        EXPECT_EQ((*pw)->n_panels, (n_out + 15) / 16);
        std::vector<float> a(n_in), b(n_in);
        for (int64_t r = 0; r < n_out; ++r) {
          dequantize_row(t, w.data.data() + r * w.view.row_bytes, a.data(), n_in);
          packed_dequantize_row(**pw, r, b.data());
          for (int64_t i = 0; i < n_in; ++i)
            ASSERT_NEAR(a[i], b[i], 1e-6f * (1.0f + std::fabs(a[i])))
                << name(t, n_in, n_out) << " row " << r << " i " << i;
        }
      }
}

// The SIMD unpacker of this build and CPU (AVX-512 or NEON); nullptr with why when none.
using UnpackFn = void (*)(const PackedWeight&, int64_t, uint8_t*);
UnpackFn simd_unpacker(std::string* why) {
#if defined(UBATCH_X86_KERNELS)
  if (cpu_features().avx512 && cpu_features().avx512_vnni) return &detail::unpack_panel_avx512;
  *why = "this CPU has no AVX-512 VNNI";
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon) return &detail::unpack_panel_neon;
  *why = "this CPU has no NEON";
#else
  *why = "this build has no SIMD unpacker";
#endif
  return nullptr;
}

TEST(PackedWeight, SimdUnpackerMatchesScalar) {
  std::string why;
  const UnpackFn unpack = simd_unpacker(&why);
  if (!unpack) GTEST_SKIP() << "SKIPPED: " << why;
  for (TensorType t : kQuantTypes) {
    const int64_t n_in = gemm_widths(t).back();
    const Weights w = random_weights(t, n_in, 20, 3);
    auto pw = pack_weight(t, w.data.data(), n_in, 20);
    ASSERT_TRUE(pw.is_ok());
    const size_t n = static_cast<size_t>(detail::unpacked_panel_bytes((*pw)->fmt, n_in));
    for (int64_t p = 0; p < (*pw)->n_panels; ++p) {
      std::vector<uint8_t> a(n), b(n);
      detail::unpack_panel_scalar(**pw, p, a.data());
      unpack(**pw, p, b.data());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n)) << tensor_type_name(t) << " panel " << p;
    }
  }
}

TEST(PackedGemm, SimdActivationPackingMatchesScalar) {
  using PackFn = void (*)(const PackedFormat&, const detail::ActLayout&, const float*, int64_t, int64_t, uint8_t*);
  std::vector<std::pair<const char*, PackFn>> simd;
#if defined(UBATCH_X86_KERNELS)
  if (cpu_features().avx2) simd.emplace_back("avx2", &detail::pack_acts_avx2);
  if (cpu_features().avx512 && cpu_features().avx512_vnni) simd.emplace_back("avx512", &detail::pack_acts_avx512);
  if (simd.empty()) GTEST_SKIP() << "SKIPPED: this CPU has neither AVX2 nor AVX-512 VNNI";
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon) simd.emplace_back("neon", &detail::pack_acts_neon);
  if (simd.empty()) GTEST_SKIP() << "SKIPPED: this CPU has no NEON";
#else
  GTEST_SKIP() << "SKIPPED: this build has no SIMD activation packing";
#endif
  for (const auto& [level, fn] : simd) {
    for (TensorType t : kQuantTypes) {
      for (int64_t n_in : gemm_widths(t)) {
        PackedFormat f;
        packed_format(t, f);
        const detail::ActLayout a = detail::act_layout(f, n_in);
        std::vector<float> x = random_x(9, n_in, 21);
        x[3] = 1e30f;  // a huge value and exact ties (x.5 after scaling) in some blocks
        for (int64_t i = 0; i < n_in; ++i) x[5 * n_in + i] = 0.5f * static_cast<float>(i % 7);
        std::vector<uint8_t> p1(9 * a.stride, 0xAB), p2(9 * a.stride, 0xCD);
        detail::pack_acts(f, a, x.data(), 0, 9, p1.data());
        fn(f, a, x.data(), 0, 9, p2.data());
        // Compare the defined bytes: xq (with its zero padding), init, dx and (with a min) xs
        // (f32 per segment; int16 bsum per segment for the K-quants).
        const size_t n_seg4 = static_cast<size_t>(4 * a.n_seg);
        const size_t xs_bytes = static_cast<size_t>((f.k_quant ? 2 : 4) * a.n_seg);
        for (int64_t r = 0; r < 9; ++r) {
          const uint8_t* r1 = p1.data() + r * a.stride;
          const uint8_t* r2 = p2.data() + r * a.stride;
          const std::string where = std::string(level) + " " + std::string(tensor_type_name(t)) + " n_in " + std::to_string(n_in) + " row " + std::to_string(r);
          ASSERT_EQ(0, std::memcmp(r1, r2, static_cast<size_t>(a.init_off))) << where << " xq";
          ASSERT_EQ(0, std::memcmp(r1 + a.init_off, r2 + a.init_off, n_seg4)) << where << " init";
          ASSERT_EQ(0, std::memcmp(r1 + a.dx_off, r2 + a.dx_off, n_seg4)) << where << " dx";
          if (f.has_min) {
            ASSERT_EQ(0, std::memcmp(r1 + a.xs_off, r2 + a.xs_off, xs_bytes)) << where << " xs";
          }
        }
      }
    }
  }
}

// One level, every token count and thread count, gives matmul_reference's bits (and so the
// same bits as every other level).
void check_level(SimdLevel level) {
  // Decode (1-2), the small-batch class (3-64: every tile remainder of the levels' token
  // tiles, odd counts, 16-32 sequences of batched decode, its 64 limit) and prefill (65+).
  const std::vector<int64_t> kTokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 17, 23, 24, 31, 32, 33, 37, 63, 64, 65};
  // The scalar level has no token tiles: gemm_panels_scalar runs one token at a time whatever
  // the count, and around it matmul_packed_multi looks at the count only to split the activation
  // packing over the threads. So it runs a few counts from each part of the list (one, two, small
  // batches with odd ones among them, 64, 65); the rest cost the sanitized and emulated CI stages
  // most of this test's time (40 s under ASan, 31 s under qemu-aarch64) and test nothing the
  // others do not.
  const std::vector<int64_t> kScalarTokens = {1, 2, 3, 9, 17, 33, 37, 64, 65};
  const std::vector<int64_t>& tokens = level == SimdLevel::Scalar ? kScalarTokens : kTokens;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int n : {1, 2, 3}) pools.push_back(std::make_unique<ThreadPool>(n));
  for (TensorType t : kQuantTypes)
    for (int64_t n_in : gemm_widths(t))
      // 1, 3 and 4 panels: one panel alone, two panels and an odd partial one, and two pairs
      // whose last panel is partial (five rows).
      for (int64_t n_out : {16, 37, 53}) {
        const Weights w = random_weights(t, n_in, n_out, 11u + static_cast<uint32_t>(n_in * 3 + n_out));
        auto pw = pack_weight(t, w.data.data(), n_in, n_out);
        ASSERT_TRUE(pw.is_ok()) << pw.message();
        const int64_t T = 65;
        const std::vector<float> x = random_x(T, n_in, 5u + static_cast<uint32_t>(n_in));
        std::vector<float> ref(T * n_out);
        matmul_reference(w.view, x.data(), T, ref.data());
        WeightView pv = w.view;
        pv.packed = pw->get();
        for (auto& pool : pools)
          for (int64_t nt : tokens) {
            if (pool->n_threads() > 1 && nt != 1 && nt != 17 && nt != 33 && nt != 65) continue;
            std::vector<float> y(nt * n_out, -7.0f);
            detail::matmul_at_level(level, pv, x.data(), nt, y.data(), *pool);
            ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)))
                << name(t, n_in, n_out) << " level " << simd_level_name(level) << " n_tokens " << nt
                << " threads " << pool->n_threads();
          }
      }
}

TEST(PackedGemm, ScalarBitIdenticalToReference) { check_level(SimdLevel::Scalar); }

TEST(PackedGemm, Avx2BitIdenticalToReference) {
  if (const std::string why = missing(SimdLevel::Avx2); !why.empty()) GTEST_SKIP() << "SKIPPED: " << why;
  check_level(SimdLevel::Avx2);
}

TEST(PackedGemm, Avx512BitIdenticalToReference) {
  if (const std::string why = missing(SimdLevel::Avx512); !why.empty()) GTEST_SKIP() << "SKIPPED: " << why;
  check_level(SimdLevel::Avx512);
}

TEST(PackedGemm, AmxBitIdenticalToReference) {
  if (const std::string why = missing(SimdLevel::Amx); !why.empty()) GTEST_SKIP() << "SKIPPED: " << why;
  check_level(SimdLevel::Amx);
}

TEST(PackedGemm, NeonBitIdenticalToReference) {
  if (const std::string why = missing(SimdLevel::Neon); !why.empty()) GTEST_SKIP() << "SKIPPED: " << why;
  check_level(SimdLevel::Neon);
}

TEST(PackedGemm, DotprodBitIdenticalToReference) {
  if (const std::string why = missing(SimdLevel::Dotprod); !why.empty()) GTEST_SKIP() << "SKIPPED: " << why;
  check_level(SimdLevel::Dotprod);
}

}  // namespace
}  // namespace ubatch::kernels

namespace ubatch::kernels {
namespace {

// matmul_multi: one pool job for several weights, each result the bits of its own matmul.
TEST(PackedGemm, MultiEqualsSeparateCalls) {
  const int64_t n_in = 512;
  const TensorType types[] = {TensorType::Q5_0, TensorType::Q4_K, TensorType::Q6_K, TensorType::Q5_0};
  const int64_t n_outs[] = {48, 16, 37, 80};
  std::vector<Weights> w;
  std::vector<std::unique_ptr<PackedWeight>> packed;
  std::vector<WeightView> views;
  for (int i = 0; i < 4; ++i) {
    w.push_back(random_weights(types[i], n_in, n_outs[i], 40u + static_cast<uint32_t>(i)));
    auto pw = pack_weight(types[i], w.back().data.data(), n_in, n_outs[i]);
    ASSERT_TRUE(pw.is_ok());
    packed.push_back(std::move(pw.value()));
  }
  for (int i = 0; i < 4; ++i) {
    views.push_back(w[i].view);
    views.back().packed = packed[i].get();
  }
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t nt : {1, 2, 5, 24, 33, 37}) {
      const std::vector<float> x = random_x(nt, n_in, 9);
      for (int n : {1, 2, 3, 4}) {
        std::vector<std::vector<float>> sep(n), multi(n);
        const WeightView* ws[4];
        float* ys[4];
        for (int i = 0; i < n; ++i) {
          sep[i].assign(nt * n_outs[i], 1.0f);
          multi[i].assign(nt * n_outs[i], 2.0f);
          matmul(views[i], x.data(), nt, sep[i].data(), pool);
          ws[i] = &views[i];
          ys[i] = multi[i].data();
        }
        matmul_multi(ws, ys, n, x.data(), nt, pool);
        for (int i = 0; i < n; ++i)
          ASSERT_EQ(0, std::memcmp(sep[i].data(), multi[i].data(), sep[i].size() * sizeof(float)))
              << "threads " << threads << " n_tokens " << nt << " n " << n << " weight " << i;
      }
    }
  }
  // A weight without a packed copy: multiplied on its own, same results as matmul.
  ThreadPool pool(2);
  const std::vector<float> x = random_x(3, n_in, 10);
  WeightView plain = w[0].view;
  std::vector<float> a(3 * n_outs[0]), b(3 * n_outs[1]), c(a.size());
  const WeightView* ws[2] = {&plain, &views[1]};
  float* ys[2] = {a.data(), b.data()};
  matmul_multi(ws, ys, 2, x.data(), 3, pool);
  matmul(plain, x.data(), 3, c.data(), pool);
  EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));
}

}  // namespace
}  // namespace ubatch::kernels

namespace ubatch::kernels {
namespace {

// matmul_grouped: many items (as a mixture-of-experts layer's experts) in two pool jobs, each
// result the bits of its item run alone with matmul_multi; items differ in type, n_in and
// token count, and an item without a packed weight sends the whole group down the fallback.
TEST(PackedGemm, GroupedEqualsSeparateCalls) {
  struct Spec {
    TensorType type;
    int64_t n_in, n_out, n_tokens;
    int n;  // weights of the item (the same type and n_in: gate/up)
  };
  const Spec specs[] = {{TensorType::MXFP4, 256, 48, 1, 2},  {TensorType::Q8_0, 256, 40, 3, 2},
                        {TensorType::Q4_K, 512, 16, 0, 1},   {TensorType::Q4_K, 512, 32, 6, 2},
                        {TensorType::Q6_K, 256, 37, 2, 1},   {TensorType::MXFP4, 256, 64, 11, 2},
                        {TensorType::Q8_0, 512, 17, 24, 1},  {TensorType::Q4_K, 1024, 32, 70, 2}};
  // (The last item alone has more than 2^16 activation values: the activations are then
  // quantized on the pool, split over the items' rows laid end to end.)
  const int64_t n_items = sizeof(specs) / sizeof(specs[0]);
  std::vector<Weights> w;
  std::vector<std::unique_ptr<PackedWeight>> packed;
  std::vector<WeightView> views;
  for (int64_t g = 0; g < n_items; ++g)
    for (int i = 0; i < specs[g].n; ++i) {
      const Spec& s = specs[g];
      w.push_back(random_weights(s.type, s.n_in, s.n_out, 70u + static_cast<uint32_t>(w.size())));
      auto pw = pack_weight(s.type, w.back().data.data(), s.n_in, s.n_out);
      ASSERT_TRUE(pw.is_ok());
      packed.push_back(std::move(pw.value()));
    }
  for (size_t k = 0; k < w.size(); ++k) {
    views.push_back(w[k].view);
    views.back().packed = packed[k].get();
  }
  for (bool with_plain : {false, true}) {
    WeightView plain = w[0].view;  // item 0's first weight without its packed copy
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      // New activations for each call, so that nothing a previous call left in a buffer can
      // stand in for what this one must compute.
      std::vector<std::vector<float>> xs;
      for (int64_t g = 0; g < n_items; ++g)
        xs.push_back(random_x(specs[g].n_tokens, specs[g].n_in, 80u + static_cast<uint32_t>(g + 16 * threads)));
      std::vector<MatmulGroupItem> items(static_cast<size_t>(n_items));
      std::vector<std::vector<float>> alone, grouped;
      size_t k = 0;
      for (int64_t g = 0; g < n_items; ++g) {
        MatmulGroupItem& it = items[static_cast<size_t>(g)];
        it.n = specs[g].n;
        it.x = xs[static_cast<size_t>(g)].data();
        it.n_tokens = specs[g].n_tokens;
        for (int i = 0; i < it.n; ++i, ++k) {
          it.ws[i] = with_plain && k == 0 ? &plain : &views[k];
          alone.emplace_back(static_cast<size_t>(specs[g].n_tokens * specs[g].n_out), 1.0f);
          grouped.emplace_back(alone.back().size(), 2.0f);
          it.ys[i] = grouped.back().data();
        }
      }
      k = 0;
      for (int64_t g = 0; g < n_items; ++g) {
        float* ys[4];
        for (int i = 0; i < items[static_cast<size_t>(g)].n; ++i) ys[i] = alone[k + static_cast<size_t>(i)].data();
        if (specs[g].n_tokens > 0)
          matmul_multi(items[static_cast<size_t>(g)].ws, ys, specs[g].n, xs[static_cast<size_t>(g)].data(),
                       specs[g].n_tokens, pool);
        k += static_cast<size_t>(specs[g].n);
      }
      matmul_grouped(items.data(), n_items, pool);
      for (size_t j = 0; j < alone.size(); ++j)
        if (!alone[j].empty()) {  // (an item of no tokens has empty outputs: memcmp wants real pointers)
          ASSERT_EQ(0, std::memcmp(alone[j].data(), grouped[j].data(), alone[j].size() * sizeof(float)))
              << "threads " << threads << " product " << j << (with_plain ? " (fallback)" : "");
        }
    }
  }
}

}  // namespace
}  // namespace ubatch::kernels
