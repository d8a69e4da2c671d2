// Scaled dot-product attention of one query token over cached keys and values
// (Vaswani et al. 2017), with grouped-query heads (Ainslie et al. 2023).
//
// The KV history of one layer is a table of cells: k_cache and v_cache hold
// [n_cells_total, n_kv_head * head_dim] elements of kv_type (F32, F16 or Q8_0), one row per
// cell, rows k_row_bytes / v_row_bytes apart. The caller lists the cells this query may see,
// in position order, already masked (causal and sliding-window masks are decided by the
// caller, which knows each cell's position); the kernel visits them in exactly that order,
// so the result does not depend on anything else in the batch.
//
//   for each head h (kv head g = h / (n_head / n_kv_head)):
//     s[j]   = scale · q[h] · K[cells[j], g]           (then softcap·tanh(s/softcap) if softcap>0)
//     p      = softmax(s)                                 (with a sink: see below)
//     out[h] = Σ_j p[j] · V[cells[j], g]
//
// Attention sinks (gpt-oss; Xiao et al. 2024, "Efficient Streaming Language Models with
// Attention Sinks", as a learned logit): with sinks[h] = σ the softmax denominator gains one
// term and no value: p[j] = e^(s[j] − m) / (Σ_i e^(s[i] − m) + e^(σ − m)), m = max(max_j s[j], σ).
// σ = −inf is no sink; σ is not scaled or soft-capped.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor_type.h"

namespace ubatch::kernels {

struct AttentionShape {
  int n_head = 0;           // query heads
  int n_kv_head = 0;        // key/value heads; n_head % n_kv_head == 0
  int head_dim = 0;         // per head, keys and values alike
  float scale = 1.0f;       // usually 1/sqrt(head_dim)
  float softcap = 0.0f;     // 0: none
  TensorType kv_type = TensorType::F16;
  size_t k_row_bytes = 0;   // bytes between consecutive cells in k_cache
  size_t v_row_bytes = 0;
  const float* sinks = nullptr;  // [n_head] sink logits, or null: none
};

// q: [n_head, head_dim] f32; cells: [n_cells] indices into the cache; out: [n_head, head_dim].
// scratch: unused (may be null; kept for callers). n_cells == 0 writes zeros.
// Heads in [head_begin, head_end) only (lets callers split heads over threads).
void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end);

// How many query heads one task of a step's attention should take (callers deal tasks of
// (token, heads_per_task consecutive heads of one KV head) to n_threads threads): the largest
// divisor of the group size n_head / n_kv_head that still leaves at least four tasks per thread
// for n_tokens tokens, and at least 1. The heads of a task read each K/V row once; the result of
// every head is the same whatever the grouping.
inline int attention_heads_per_task(int n_head, int n_kv_head, int64_t n_tokens, int n_threads) {
  const int group = n_kv_head > 0 ? n_head / n_kv_head : 1;
  for (int d = group; d > 1; --d)
    if (group % d == 0 && n_tokens * (n_head / d) >= int64_t{4} * n_threads) return d;
  return 1;
}

namespace ref {
void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end);
}  // namespace ref

}  // namespace ubatch::kernels
