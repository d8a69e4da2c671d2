// What a forward pass costs (bytes streamed, multiply-adds) and the measured compute ceiling,
// so benchmark results can be reported as a share of the machine's roofline.
//
// Generation (one token per sequence per step) is memory-bound: every step streams the
// weights once, so
//     GB/s = step_bytes(n_seq) × steps/s / 10^9,   share = GB/s / measured read GB/s
// with step_bytes(B) = dense bytes + expert bytes × touched(B) / n_expert + 2 × B × state bytes:
// - dense bytes: Model::streamed_bytes() (the matrices as the kernels read them — their packed
//   copies — plus the norms, without the token-embedding table when the output matrix is
//   separate, as the embedding is only gathered, a few rows per step) less the experts;
// - experts (mixtures of experts): only those the step touches; one sequence touches
//   n_expert_used per layer, B sequences X·(1 − (1 − k/X)^B) in expectation (X experts, k per
//   token, routing taken as uniform — an estimate for B > 1);
// - state (recurrent layers): every sequence's state is read and written once per step;
// KV-cache reads are not counted, so the share is a lower bound.
//
// Prompt processing is compute-bound; its multiply-adds (MACs) are counted as
//     MACs = T × (P_layer + P_experts × k / X)
//            + Σ_seq Σ_{attention layers} Σ_{p < n_prompt} n_head × (head_dim_k + head_dim_v) × keys(p)
//            + n_seq × P_out
// with T = n_seq × n_prompt tokens, P_layer = elements of the per-layer weight matrices
// (attn_q/k/v/output, ffn_gate/up/down, the recurrent layers' projections: 2-D tensors under
// blk.*), P_experts = elements of the 3-D expert tensors (*_exps) of which each token runs k of
// X, keys(p) = p + 1 (or min(p + 1, sliding_window) on sliding-window layers) on the layers with
// attention (recurrent layers have none), and P_out = n_vocab × n_embd for the one logits row
// per sequence. FLOP/s = 2 × MACs / seconds (the "2 × params × tokens/s" rule plus attention).
// Norms, RoPE, softmax, activations, convolutions and the recurrent state updates are not
// counted.
//
// The compute ceiling is measured, not taken from a data sheet: the engine's own matmul
// (kernels::matmul, on the weight packed as the model packs it) multiplies n_tokens = 256 activation rows by a cache-resident slice
// (≤ 1 MiB, whole rows) of the largest per-layer weight matrix of the model's dominant type
// (the type holding most per-layer weight bytes), on the pool's threads; each run repeats
// the product for ≥ 50 ms; best of n_runs, FLOP/s = 2 × MACs / s. It is
// the rate the forward pass would reach if it did nothing but matmuls on data in cache —
// activation quantization included, as in the forward pass.
//
// A second, instruction-level ceiling comes from bench/int8_peak.h: the int8 multiply-
// accumulate peak of each ISA (AVX-512 VNNI, AVX2, AMX) measured with register-only loops;
// the prompt rate is also reported as a share of those (apply_int8_roofline in llm_bench.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "common/tensor_type.h"
#include "kernels/thread_pool.h"
#include "model/model.h"

namespace ubatch::bench {

struct ModelCost {
  size_t weight_bytes = 0;    // Model::weight_bytes()
  size_t streamed_bytes = 0;  // Model::streamed_bytes(): every packed weight (see above)
  size_t expert_bytes = 0;    // of which expert tensors (*_exps), as the kernels read them
  int32_t n_expert = 0, n_expert_used = 0;
  uint64_t state_bytes = 0;   // one sequence's recurrent state (0 without recurrent layers)
  uint64_t n_params = 0;      // elements of all weight tensors
  uint64_t layer_params = 0;  // P_layer
  uint64_t expert_params = 0; // P_experts: elements of the *_exps tensors (all experts)
  uint64_t output_params = 0; // P_out = n_vocab × n_embd
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t head_dim_k = 0;
  int32_t head_dim_v = 0;
  int32_t sliding_window = 0;
  std::vector<bool> layer_is_swa;     // [n_layer]
  std::vector<bool> layer_is_recurrent;  // [n_layer]: no attention (no keys counted)
  TensorType main_type = TensorType::F32;  // dominant per-layer weight type
};

ModelCost model_cost(const Model& model);

// Bytes one decode step of n_seq sequences streams (formula above).
double step_bytes(const ModelCost& cost, int64_t n_seq);

// MACs of prefilling n_seq sequences of n_prompt tokens each from position 0, logits for the
// last token of each (formula above).
double prompt_macs(const ModelCost& cost, int64_t n_prompt, int64_t n_seq);

struct ComputePeak {
  double gflops = 0.0;  // best run, 10^9 FLOP/s (2 per MAC)
  TensorType type = TensorType::F32;
  int64_t n_in = 0, n_rows = 0, n_tokens = 0;
  int n_threads = 0;
};

// Errors: the model has no 2-D per-layer weight of its dominant type (cannot happen for a
// loaded model), n_runs < 1.
Result<ComputePeak> measure_matmul_peak(const Model& model, kernels::ThreadPool& pool, int n_runs);

}  // namespace ubatch::bench
