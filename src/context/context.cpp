#include "context/context.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fstream>
#include <unordered_map>
#include <unordered_set>

namespace ubatch {

namespace {
// Largest logits buffer one decode may ask for (rows with logits × n_vocab floats).
constexpr uint64_t kMaxLogitsBytes = uint64_t{2} << 30;
}  // namespace

uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (in >> key >> value >> unit)
    if (key == "MemAvailable:") return value * 1024;
  return 0;
}

uint64_t kv_bytes_per_token(const HParams& hp, TensorType kv_type) {
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(kv_type));
  if (!tr) return 0;
  // Layers with a KV history (all of them when no layer plan was read, as for a bare HParams).
  const uint64_t n_kv_layer = hp.kv_layer.empty() ? static_cast<uint64_t>(hp.n_layer) : static_cast<uint64_t>(hp.n_kv_layer);
  return n_kv_layer * ((hp.n_embd_k_gqa() + hp.n_embd_v_gqa()) / tr->block_size) * tr->type_size;
}

uint64_t state_bytes_per_sequence(const HParams& hp, TensorType state_type) {
  uint64_t floats = 0;
  for (int il = 0; il < hp.n_layer && size_t(il) < hp.layer_mixer.size(); ++il) floats += hp.state_floats(il, state_type);
  return floats * sizeof(float);
}

int32_t auto_kv_cells(int64_t sequences, int32_t n_ctx_train, uint64_t bytes_per_token,
                      uint64_t available_bytes, double memory_share) {
  const int64_t per_seq = n_ctx_train > 0 ? std::min(4096, n_ctx_train) : 4096;
  int64_t cells = std::clamp<int64_t>(sequences, 1, 1 << 16) * per_seq;
  if (bytes_per_token > 0 && available_bytes > 0)
    cells = std::min<int64_t>(cells, static_cast<int64_t>(static_cast<double>(available_bytes) * memory_share /
                                                          static_cast<double>(bytes_per_token)));
  return static_cast<int32_t>(std::clamp<int64_t>(cells, 256, int64_t{1} << 24));
}

Result<std::unique_ptr<Context>> Context::create(std::shared_ptr<Model> model, const ContextParams& params) {
  if (!model) return Status::error("context: no model");
  if (params.n_batch <= 0 || params.n_ubatch <= 0)
    return Status::error(fmt::format("context: n_batch ({}) and n_ubatch ({}) must be > 0", params.n_batch, params.n_ubatch));
  if (params.kv_cache_fraction < 0.0f || params.kv_cache_fraction > 1.0f)
    return Status::error("context: kv_cache_fraction must be in [0, 1]");
  std::unique_ptr<Context> ctx(new Context());
  ctx->model_ = std::move(model);
  ctx->params_ = params;
  ctx->params_.n_ubatch = std::min(params.n_ubatch, params.n_batch);
  const HParams& hp = ctx->model_->hparams();
  // Q8_0 cells hold whole 32-value blocks of each head (kernels/attention.h).
  if (params.kv_type == TensorType::Q8_0 && hp.n_kv_layer > 0 && hp.head_dim_k % 32 != 0)
    return Status::error(fmt::format("context: a Q8_0 KV cache needs a head size that is a multiple of 32; this "
                                     "model's is {} (use an F16 or F32 KV cache)", hp.head_dim_k));
  if (params.state_type != TensorType::F32 && params.state_type != TensorType::BF16)
    return Status::error(fmt::format("context: recurrent state type {} is not supported (F32 or BF16)",
                                     tensor_type_name(params.state_type)));

  KvCacheConfig kc;
  kc.n_layer = hp.n_kv_layer;
  kc.n_embd_k = hp.n_embd_k_gqa();
  kc.n_embd_v = hp.n_embd_v_gqa();
  kc.block_size = params.kv_block_size;
  kc.type = params.kv_type;
  kc.n_kv_head = hp.n_kv_head;
  kc.head_dim = hp.head_dim_k;
  kc.n_rot = hp.n_rot;
  kc.rope_style = hp.rope_style;
  kc.rope_freq_scale = hp.rope_freq_scale;
  for (int il = 0; il < hp.n_layer; ++il) {
    if (hp.kv_layer[il] < 0) continue;  // recurrent layers keep no K/V
    kc.rope_base.push_back(hp.layer_is_swa[il] ? hp.rope_base_swa : hp.rope_base);
    kc.rope_freq_scale_layer.push_back(hp.layer_is_swa[il] ? hp.rope_freq_scale_swa : hp.rope_freq_scale);
    kc.rope_layer.push_back(hp.layer_use_rope[il] ? 1 : 0);
  }
  if (hp.has_recurrent()) {
    for (int il = 0; il < hp.n_layer; ++il) kc.state_layer_floats.push_back(hp.state_floats(il, params.state_type));
    kc.state_type = params.state_type;
    kc.snapshot_budget_bytes = params.state_snapshot_bytes;
    // Chunk-wise rows only where every chunk can stay whole: a batch and a ubatch hold one, and
    // the prefix snapshots at block boundaries fall on chunk ends. Otherwise every row runs
    // step by step (the results then differ, to float rounding, from a context that chunks).
    const int32_t c = ctx->model_->state_chunk();
    if (c > 0 && ctx->params_.n_ubatch >= c && params.kv_block_size % c == 0) kc.state_chunk = c;
  }
  kc.n_cells = params.n_ctx;
  if (!hp.kv_layer.empty() && hp.n_kv_layer == 0)
    return Status::error("context: the model has no attention layer (every layer is recurrent); ubatch needs at "
                         "least one to keep positions");
  const uint64_t per_token = kv_bytes_per_token(hp, kc.type);
  if (per_token == 0) return Status::error("context: unknown KV type");
  if (params.kv_cache_fraction > 0.0f) {
    const uint64_t avail = available_memory_bytes();
    if (avail == 0) return Status::error("context: cannot read available memory for --kv-cache-fraction");
    const uint64_t cells = static_cast<uint64_t>(avail * static_cast<double>(params.kv_cache_fraction)) / per_token;
    kc.n_cells = static_cast<int32_t>(std::min<uint64_t>(cells, 1u << 24));
  }
  {
    const uint64_t bytes = static_cast<uint64_t>(kc.n_cells) * per_token;
    const uint64_t avail = available_memory_bytes();
    if (avail > 0 && bytes > avail)
      return Status::error(fmt::format("context: a KV cache of {} tokens needs {:.1f} GiB but only {:.1f} GiB of memory is available",
                                       kc.n_cells, bytes / 1073741824.0, avail / 1073741824.0));
  }
  if (kc.n_cells < kc.block_size)
    return Status::error(fmt::format("context: KV capacity {} tokens is below one block ({})", kc.n_cells, kc.block_size));
  Result<std::unique_ptr<KvCache>> kv = KvCache::create(kc);
  if (!kv) return kv.status();
  ctx->kv_ = std::move(kv.value());
  ctx->params_.n_ctx = static_cast<int32_t>(ctx->kv_->n_cells());
  // The frequency factors the forward pass uses at this context size (fixed per context).
  if (const float* f = ctx->model_->rope_factors(ctx->n_ctx_seq()))
    ctx->kv_->set_rope_freq_factors(std::vector<float>(f, f + hp.n_rot / 2));
  ctx->pool_ = std::make_unique<kernels::ThreadPool>(params.n_threads, params.cpus);
  return ctx;
}

DecodeResult Context::validate(const Batch& b) const {
  auto invalid = [](std::string m) { return DecodeResult{DecodeStatus::InvalidBatch, std::move(m)}; };
  const int32_t n = b.n_tokens();
  if (n <= 0) return invalid("decode: empty batch");
  if (n > params_.n_batch) return invalid(fmt::format("decode: batch of {} tokens exceeds n_batch {}", n, params_.n_batch));
  if (b.pos.size() != size_t(n) || b.seq_ids.size() != size_t(n) || b.logits.size() != size_t(n) ||
      (!b.embd.empty() && b.embd.size() != size_t(n)) || (!b.checkpoint.empty() && b.checkpoint.size() != size_t(n)) ||
      (!b.chunkable.empty() && b.chunkable.size() != size_t(n)))
    return invalid("decode: batch arrays differ in length");
  const bool recurrent = kv_->has_state();
  const int32_t n_vocab = model_->hparams().n_vocab;
  std::unordered_map<int32_t, std::pair<int32_t, int32_t>> next;  // seq -> (next pos, tokens)
  std::unordered_set<int32_t> copy_targets;                       // seqs filled by copies
  for (int32_t t = 0; t < n; ++t) {
    if (b.token[t] < 0 || b.token[t] >= n_vocab)
      return invalid(fmt::format("decode: token id {} at row {} outside the vocabulary [0, {})", b.token[t], t, n_vocab));
    if (b.seq_ids[t].empty()) return invalid(fmt::format("decode: row {} has no seq_id", t));
    if (recurrent && b.seq_ids[t].size() > 1)
      return invalid(fmt::format("decode: row {} is shared into {} sequences; a model with recurrent layers computes "
                                 "each sequence's state itself (use seq_cp after the shared prefix)", t, b.seq_ids[t].size()));
    for (size_t k = 1; k < b.seq_ids[t].size(); ++k)
      for (size_t j = 0; j < k; ++j)
        if (b.seq_ids[t][j] == b.seq_ids[t][k]) return invalid(fmt::format("decode: row {} lists seq {} twice", t, b.seq_ids[t][k]));
    for (size_t k = 0; k < b.seq_ids[t].size(); ++k) {
      const int32_t s = b.seq_ids[t][k];
      if (s < 0) return invalid(fmt::format("decode: row {} has negative seq_id {}", t, s));
      if (k == 0 && copy_targets.count(s))
        return invalid(fmt::format("decode: row {} computes seq {} after an earlier row shared a token into it; "
                                   "put shared rows in their own batch", t, s));
      if (k > 0) copy_targets.insert(s);
      auto it = next.find(s);
      if (it == next.end()) {
        const int32_t pmax = kv_->seq_pos_max(s);
        if (recurrent && pmax < 0 && b.pos[t] != 0)
          return invalid(fmt::format("decode: row {} starts seq {} at pos {}; with recurrent layers a sequence starts at 0",
                                     t, s, b.pos[t]));
        it = next.emplace(s, std::make_pair(pmax < 0 ? b.pos[t] : pmax + 1, 0)).first;
      }
      if (b.pos[t] < 0 || b.pos[t] != it->second.first)
        return invalid(fmt::format("decode: row {} has pos {} for seq {}, expected {}", t, b.pos[t], s, it->second.first));
      ++it->second.first;
      ++it->second.second;
    }
  }
  int64_t n_out = 0;
  for (int32_t t = 0; t < n; ++t) n_out += b.logits[t] ? 1 : 0;
  const uint64_t logits_bytes = static_cast<uint64_t>(n_out) * n_vocab * sizeof(float);
  if (logits_bytes > kMaxLogitsBytes)
    return invalid(fmt::format("decode: {} rows want logits: {:.1f} GiB of logits ({} x {} floats) exceeds the {} GiB limit",
                               n_out, logits_bytes / 1073741824.0, n_out, n_vocab, kMaxLogitsBytes >> 30));
  int64_t need = 0;
  for (const auto& [s, pc] : next) need += kv_->blocks_needed(s, pc.second);
  if (need > kv_->n_blocks_available())
    return DecodeResult{DecodeStatus::NoKvSpace,
                        fmt::format("decode: KV cache full: batch needs {} blocks, {} available of {}", need,
                                    kv_->n_blocks_available(), kv_->n_blocks())};
  return {};
}

DecodeResult Context::decode(const Batch& b) {
  if (DecodeResult r = validate(b); !r.ok()) return r;
  const int32_t n = b.n_tokens();
  const int32_t n_vocab = model_->hparams().n_vocab;
  output_row_.assign(n, -1);
  int32_t n_out = 0;
  for (int32_t t = 0; t < n; ++t)
    if (b.logits[t]) output_row_[t] = n_out++;
  logits_.resize(static_cast<size_t>(n_out) * n_vocab);
  const int32_t n_embd = model_->hparams().n_embd;
  embd_row_.assign(n, -1);
  int32_t n_embd_rows = 0;
  if (!b.embd.empty())
    for (int32_t t = 0; t < n; ++t)
      if (b.embd[t]) embd_row_[t] = n_embd_rows++;
  embd_.resize(static_cast<size_t>(n_embd_rows) * n_embd);

  std::vector<int32_t> primary(n);
  for (int32_t t = 0; t < n; ++t) primary[t] = b.seq_ids[t][0];
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t start = 0, len = 0; start < n; start += len) {
    len = ubatch_length(b, start);
    KvView view;
    Status s = kv_->place(&b.token[start], &b.pos[start], &primary[start], len, view, &state_view_,
                          b.checkpoint.empty() ? nullptr : &b.checkpoint[start],
                          b.chunkable.empty() ? nullptr : &b.chunkable[start]);
    UBATCH_CHECK_MSG(s.is_ok(), s.message().c_str());  // validated above: cannot fail
    std::vector<int32_t> src_cell(view.write_cell, view.write_cell + len);
    UBatch ub;
    ub.n_tokens = len;
    ub.token = &b.token[start];
    ub.pos = &b.pos[start];
    ub.output = &b.logits[start];
    ub.n_ctx_seq = n_ctx_seq();
    int32_t first_out = -1;
    for (int32_t t = start; t < start + len && first_out < 0; ++t) first_out = output_row_[t];
    float* out = first_out >= 0 ? logits_.data() + static_cast<size_t>(first_out) * n_vocab : nullptr;
    ub.embd = b.embd.empty() ? nullptr : &b.embd[start];
    int32_t first_embd = -1;
    for (int32_t t = start; t < start + len && first_embd < 0; ++t) first_embd = embd_row_[t];
    float* embd_out = first_embd >= 0 ? embd_.data() + static_cast<size_t>(first_embd) * n_embd : nullptr;
    s = model_->forward(ub, view, state_view_, out, *pool_, embd_out);
    UBATCH_CHECK_MSG(s.is_ok(), s.message().c_str());
    // Rows shared into further sequences: give each a cell holding a copy of the K/V.
    for (int32_t t = start; t < start + len; ++t) {
      for (size_t k = 1; k < b.seq_ids[t].size(); ++k) {
        const int32_t tok = b.token[t], p = b.pos[t], seq = b.seq_ids[t][k];
        KvView extra;
        s = kv_->place(&tok, &p, &seq, 1, extra);
        UBATCH_CHECK_MSG(s.is_ok(), s.message().c_str());
        kv_->copy_cell(src_cell[t - start], extra.write_cell[0]);
      }
    }
    ++perf_.n_ubatches;
  }
  perf_.t_forward_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  perf_.n_tokens += static_cast<uint64_t>(n);
  ++perf_.n_decode;
  return {};
}

int32_t Context::ubatch_length(const Batch& b, int32_t start) const {
  const int32_t n = b.n_tokens();
  const int32_t len = std::min(params_.n_ubatch, n - start);
  const int32_t c = kv_->state_chunk();
  const int32_t end = start + len;
  if (c <= 0 || b.chunkable.empty() || end >= n) return len;
  // A flagged chunk of some sequence with rows on both sides of the cut: cut before its first
  // row in this ubatch instead. A sequence's first row after the cut tells (rows of a sequence
  // are in position order).
  int32_t cut = end;
  std::unordered_set<int32_t> seen;
  for (int32_t t = end; t < n; ++t) {
    const int32_t seq = b.seq_ids[t][0];
    if (!seen.insert(seq).second || !b.chunkable[t] || b.pos[t] % c == 0) continue;
    const int32_t chunk_start = b.pos[t] / c * c;
    for (int32_t r = start; r < end; ++r)
      if (b.seq_ids[r][0] == seq && b.pos[r] >= chunk_start) {
        cut = std::min(cut, r);
        break;
      }
  }
  return cut > start ? cut - start : len;  // a chunk longer than the ubatch cannot stay whole
}

int32_t Context::n_ctx_seq() const {
  if (params_.n_ctx_seq > 0) return params_.n_ctx_seq;
  const int32_t cells = static_cast<int32_t>(kv_->n_cells());
  const int32_t trained = model_->hparams().n_ctx_train;
  return trained > 0 ? std::min(cells, trained) : cells;
}

const float* Context::logits(int32_t i) const {
  if (i < 0 || i >= static_cast<int32_t>(output_row_.size()) || output_row_[i] < 0) return nullptr;
  return logits_.data() + static_cast<size_t>(output_row_[i]) * model_->hparams().n_vocab;
}

const float* Context::embedding(int32_t i) const {
  if (i < 0 || i >= static_cast<int32_t>(embd_row_.size()) || embd_row_[i] < 0) return nullptr;
  return embd_.data() + static_cast<size_t>(embd_row_[i]) * model_->hparams().n_embd;
}

}  // namespace ubatch
