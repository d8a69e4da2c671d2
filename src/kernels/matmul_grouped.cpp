// matmul_grouped (matmul.h): many independent packed products in two pool jobs.
//
// Each item is what matmul_multi would run (its own SIMD level from its token count, its
// activations quantized once per distinct weight type), so each output row gets the bits it
// gets alone. What changes is the hand-off: the activations of every item are quantized in one
// job (the items' token rows laid end to end and split over the threads), and the panel pairs
// of every weight of every item are laid end to end and split in one more, so a layer of
// 20-30 small expert products costs two synchronisations instead of forty to sixty.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/gemm_internal.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/packed_weight.h"

namespace ubatch::kernels {

namespace {

// One distinct activation layout of one item: where its quantized rows live in the buffer.
struct ActsOf {
  int64_t item = 0;
  int owner = 0;  // index in the item's ws of a weight of this type
  detail::ActLayout layout;
  size_t offset = 0;  // bytes into the shared buffer
};

// One weight of one item, with its panel-pair range in the job's list.
struct Product {
  int64_t item = 0;
  int w = 0;          // index in the item's ws
  size_t acts = 0;    // index in the ActsOf list
  int64_t pairs_end = 0;
};

thread_local std::vector<uint8_t> t_grouped_acts;  // caller: every item's packed activations

}  // namespace

void matmul_grouped(const MatmulGroupItem* items, int64_t n_items, ThreadPool& pool) {
  UBATCH_CHECK(n_items >= 0);
  bool all_packed = true;
  for (int64_t g = 0; g < n_items && all_packed; ++g) {
    const MatmulGroupItem& it = items[g];
    UBATCH_CHECK(it.n >= 0 && it.n <= detail::kMaxMulti && it.n_tokens >= 0);
    if (it.n_tokens == 0) continue;  // skipped: its weights are not read
    for (int i = 0; i < it.n && all_packed; ++i)
      all_packed = it.ws[i]->packed != nullptr && it.ws[i]->n_out > 0 && it.ws[i]->n_in == it.ws[0]->n_in;
  }
  if (!all_packed) {
    for (int64_t g = 0; g < n_items; ++g)
      if (items[g].n > 0 && items[g].n_tokens > 0)
        matmul_multi(items[g].ws, items[g].ys, items[g].n, items[g].x, items[g].n_tokens, pool);
    return;
  }

  // The plan: per item, one activation layout per distinct weight type; per weight, its pairs.
  std::vector<ActsOf> acts;
  std::vector<Product> products;
  std::vector<detail::LevelKernels> kernels_of(static_cast<size_t>(n_items));
  size_t bytes = 0, scratch_bytes = 0;
  int64_t pairs = 0;
  for (int64_t g = 0; g < n_items; ++g) {
    const MatmulGroupItem& it = items[g];
    if (it.n == 0 || it.n_tokens == 0) continue;
    kernels_of[static_cast<size_t>(g)] = detail::level_kernels(detail::matmul_level(it.n_tokens));
    const size_t first = acts.size();
    for (int i = 0; i < it.n; ++i) {
      const PackedWeight& w = *it.ws[i]->packed;
      size_t k = first;
      while (k < acts.size() && items[g].ws[acts[k].owner]->packed->fmt.type != w.fmt.type) ++k;
      if (k == acts.size()) {
        ActsOf a;
        a.item = g;
        a.owner = i;
        a.layout = detail::act_layout(w.fmt, w.n_in);
        a.offset = bytes;
        bytes += (static_cast<size_t>(it.n_tokens * a.layout.stride) + 63) / 64 * 64;
        acts.push_back(a);
      }
      pairs += (w.n_panels + 1) / 2;
      products.push_back({g, i, k, pairs});
      scratch_bytes = std::max(scratch_bytes, static_cast<size_t>(detail::gemm_scratch_bytes(w)));
    }
  }
  if (products.empty()) return;
  if (t_grouped_acts.size() < bytes + 64) t_grouped_acts.resize(bytes + 64);
  uint8_t* base = t_grouped_acts.data();
  base += (64 - (reinterpret_cast<uintptr_t>(base) & 63)) & 63;

  // Job 1: every item's activations, the token rows of all layouts laid end to end.
  std::vector<int64_t> rows_end(acts.size());
  int64_t rows = 0, values = 0;
  for (size_t k = 0; k < acts.size(); ++k) {
    rows += items[acts[k].item].n_tokens;
    values += items[acts[k].item].n_tokens * acts[k].layout.n_in;
    rows_end[k] = rows;
  }
  auto pack_range = [&](int64_t b, int64_t e) {
    for (size_t k = 0; k < acts.size() && b < e; ++k) {
      const int64_t first = k ? rows_end[k - 1] : 0;
      if (b >= rows_end[k]) continue;
      const MatmulGroupItem& it = items[acts[k].item];
      const int64_t t0 = b - first, t1 = std::min(e, rows_end[k]) - first;
      kernels_of[static_cast<size_t>(acts[k].item)].pack(it.ws[acts[k].owner]->packed->fmt, acts[k].layout, it.x, t0,
                                                          t1, base + acts[k].offset);
      b = rows_end[k];
    }
  };
  if (values < (1 << 16) || pool.n_threads() == 1) {
    pack_range(0, rows);
  } else {
    pool.run([&](int ith, int nth) {
      int64_t b, e;
      ThreadPool::split(rows, ith, nth, b, e);
      if (b < e) pack_range(b, e);
    });
  }

  // Job 2: every weight's panel pairs laid end to end; threads take contiguous runs of about
  // equal cost, a pair costing kPairCost + its item's token count (streaming its weights, then
  // the work per token), so an expert with many tokens does not leave one thread behind.
  constexpr int64_t kPairCost = 8;
  std::vector<int64_t> cost_end(products.size());
  int64_t cost = 0;
  for (size_t p = 0; p < products.size(); ++p) {
    const int64_t n_pairs = products[p].pairs_end - (p ? products[p - 1].pairs_end : 0);
    cost += n_pairs * (kPairCost + items[products[p].item].n_tokens);
    cost_end[p] = cost;
  }
  // The first pair whose cost starts at or after c (pairs for c >= cost).
  auto pair_at = [&](int64_t c) {
    size_t p = 0;
    while (p < products.size() && cost_end[p] <= c) ++p;
    if (p == products.size()) return pairs;
    const int64_t first = p ? products[p - 1].pairs_end : 0, c0 = p ? cost_end[p - 1] : 0;
    const int64_t per = kPairCost + items[products[p].item].n_tokens;
    return std::min(first + (c - c0 + per - 1) / per, products[p].pairs_end);
  };
  pool.run([&](int ith, int nth) {
    int64_t b = pair_at(cost * ith / nth);
    const int64_t e = pair_at(cost * (ith + 1) / nth);
    uint8_t* scratch = b < e ? detail::thread_gemm_scratch(scratch_bytes) : nullptr;
    for (size_t p = 0; p < products.size() && b < e; ++p) {
      const int64_t first = p ? products[p - 1].pairs_end : 0;
      if (b >= products[p].pairs_end) continue;
      const int64_t q0 = b - first, q1 = std::min(e, products[p].pairs_end) - first;
      const MatmulGroupItem& it = items[products[p].item];
      const PackedWeight& w = *it.ws[products[p].w]->packed;
      const ActsOf& a = acts[products[p].acts];
      kernels_of[static_cast<size_t>(products[p].item)].gemm(w, a.layout, base + a.offset, it.n_tokens,
                                                             it.ys[products[p].w], w.n_out, 2 * q0,
                                                             std::min(2 * q1, w.n_panels), scratch);
      b = products[p].pairs_end;
    }
  });
}

}  // namespace ubatch::kernels
