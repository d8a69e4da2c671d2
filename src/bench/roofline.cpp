#include "bench/roofline.h"

#include "kernels/packed_weight.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <random>
#include <string_view>

#include "context/context.h"
#include "kernels/matmul.h"

namespace ubatch::bench {

namespace {

bool is_layer_matrix(const gguf::TensorInfo& t) {
  return t.n_dims == 2 && std::string_view(t.name).substr(0, 4) == "blk.";
}

}  // namespace

ModelCost model_cost(const Model& model) {
  const HParams& hp = model.hparams();
  const gguf::File& f = model.file();
  ModelCost c;
  c.weight_bytes = model.weight_bytes();
  c.streamed_bytes = model.streamed_bytes();
  c.n_layer = hp.n_layer;
  c.n_head = hp.n_head;
  c.head_dim_k = hp.head_dim_k;
  c.head_dim_v = hp.head_dim_v;
  c.sliding_window = hp.sliding_window;
  c.layer_is_swa = hp.layer_is_swa;
  c.layer_is_swa.resize(static_cast<size_t>(hp.n_layer), false);
  c.layer_is_recurrent.assign(static_cast<size_t>(hp.n_layer), false);
  for (size_t il = 0; il < hp.kv_layer.size() && il < c.layer_is_recurrent.size(); ++il)
    c.layer_is_recurrent[il] = hp.kv_layer[il] < 0;
  c.output_params = static_cast<uint64_t>(hp.n_vocab) * static_cast<uint64_t>(hp.n_embd);
  std::map<TensorType, size_t> bytes_by_type;
  c.n_expert = hp.n_expert;
  c.n_expert_used = hp.n_expert_used;
  c.state_bytes = state_bytes_per_sequence(hp);
  for (const gguf::TensorInfo& t : f.tensors()) {
    c.n_params += static_cast<uint64_t>(t.n_elements());
    if (t.n_dims == 3 && std::string_view(t.name).find("_exps.weight") != std::string_view::npos) {
      // MXFP4 experts are read packed (packed_weight.h: 288 bytes per 16 × 32 values).
      c.expert_params += static_cast<uint64_t>(t.n_elements());
      c.expert_bytes += t.type == TensorType::MXFP4
                            ? kernels::packed_weight_bytes(t.type, t.ne[0], t.ne[1]) * static_cast<size_t>(t.ne[2])
                            : t.n_bytes;
    }
    if (is_layer_matrix(t)) {
      c.layer_params += static_cast<uint64_t>(t.n_elements());
      bytes_by_type[t.type] += t.n_bytes;
    }
  }
  size_t best = 0;
  for (const auto& [type, bytes] : bytes_by_type)
    if (bytes > best) best = bytes, c.main_type = type;
  return c;
}

double step_bytes(const ModelCost& c, int64_t n_seq) {
  const double B = static_cast<double>(std::max<int64_t>(n_seq, 1));
  double bytes = static_cast<double>(c.streamed_bytes);
  if (c.n_expert > 0 && c.expert_bytes > 0 && c.expert_bytes <= c.streamed_bytes) {
    const double X = c.n_expert, k = c.n_expert_used;
    const double touched = B <= 1.0 ? k : X * (1.0 - std::pow(1.0 - k / X, B));
    bytes -= static_cast<double>(c.expert_bytes) * (1.0 - touched / X);
  }
  return bytes + 2.0 * B * static_cast<double>(c.state_bytes);
}

double prompt_macs(const ModelCost& c, int64_t n_prompt, int64_t n_seq) {
  if (n_prompt <= 0 || n_seq <= 0) return 0.0;
  const double np = static_cast<double>(n_prompt);
  const double per_key = static_cast<double>(c.n_head) * (c.head_dim_k + c.head_dim_v);
  double keys = 0.0;  // Σ_layer Σ_p keys(p) for one sequence
  const double full = np * (np + 1.0) / 2.0;
  for (int32_t il = 0; il < c.n_layer; ++il) {
    if (il < static_cast<int32_t>(c.layer_is_recurrent.size()) && c.layer_is_recurrent[il]) continue;
    const bool swa = il < static_cast<int32_t>(c.layer_is_swa.size()) && c.layer_is_swa[il] && c.sliding_window > 0;
    if (!swa || n_prompt <= c.sliding_window) {
      keys += full;
    } else {
      const double w = c.sliding_window;
      keys += w * (w + 1.0) / 2.0 + (np - w) * w;  // p < w: p + 1 keys; afterwards w
    }
  }
  const double ns = static_cast<double>(n_seq);
  const double experts = c.n_expert > 0 ? static_cast<double>(c.expert_params) * c.n_expert_used / c.n_expert : 0.0;
  return ns * np * (static_cast<double>(c.layer_params) + experts) + ns * keys * per_key +
         ns * static_cast<double>(c.output_params);
}

Result<ComputePeak> measure_matmul_peak(const Model& model, kernels::ThreadPool& pool, int n_runs) {
  if (n_runs < 1) return Status::error("compute probe: need at least one run");
  const ModelCost cost = model_cost(model);
  const gguf::TensorInfo* src = nullptr;
  for (const gguf::TensorInfo& t : model.file().tensors())
    if (is_layer_matrix(t) && t.type == cost.main_type &&
        (!src || t.n_elements() > src->n_elements() || (t.n_elements() == src->n_elements() && t.ne[0] > src->ne[0])))
      src = &t;  // the largest matrix of the type (the widest among equals)
  if (!src) return Status::error("compute probe: the model has no per-layer weight matrix");
  if (!kernels::can_matmul(src->type))
    return Status::error(fmt::format("compute probe: no matmul for type {}", tensor_type_name(src->type)));

  ComputePeak r;
  r.type = src->type;
  r.n_in = src->ne[0];
  r.n_threads = pool.n_threads();
  r.n_tokens = 256;
  const size_t row_bytes = tensor_row_bytes(src->type, src->ne[0]);
  const int64_t cache_rows = static_cast<int64_t>((size_t{1} << 20) / std::max<size_t>(row_bytes, 1));
  r.n_rows = std::clamp<int64_t>(cache_rows, 16 * int64_t{r.n_threads}, 4096);
  r.n_rows = std::min(r.n_rows, src->ne[1]);

  kernels::WeightView w;
  w.type = src->type;
  w.data = src->data;
  w.n_in = r.n_in;
  w.n_out = r.n_rows;
  w.row_bytes = row_bytes;
  // Packed as the model packs its matrices (kernels/packed_weight.h), so the probe times the
  // kernel the forward pass runs.
  std::unique_ptr<kernels::PackedWeight> packed;
  kernels::PackedFormat fmt;
  if (kernels::packed_format(w.type, fmt) && w.n_in % fmt.block_elems == 0) {
    Result<std::unique_ptr<kernels::PackedWeight>> pw = kernels::pack_weight(w.type, w.data, w.n_in, w.n_out);
    if (!pw) return pw.status();
    packed = std::move(pw.value());
    w.packed = packed.get();
  }
  std::vector<float> x(static_cast<size_t>(r.n_tokens * r.n_in));  // [n_tokens, n_in]
  std::vector<float> y(static_cast<size_t>(r.n_tokens * r.n_rows)); // [n_tokens, n_rows]
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(rng);

  const double macs = static_cast<double>(r.n_tokens) * static_cast<double>(r.n_rows) * static_cast<double>(r.n_in);
  kernels::matmul(w, x.data(), r.n_tokens, y.data(), pool);  // warm-up: weights into cache
  // Each run repeats the product until it has lasted ≥ 50 ms, so timer resolution and pool
  // wake-up do not dominate.
  for (int run = 0; run < n_runs; ++run) {
    int64_t reps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double s = 0.0;
    do {
      kernels::matmul(w, x.data(), r.n_tokens, y.data(), pool);
      ++reps;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (s < 0.05);
    r.gflops = std::max(r.gflops, 2.0 * macs * static_cast<double>(reps) / s / 1e9);
  }
  return r;
}

}  // namespace ubatch::bench
