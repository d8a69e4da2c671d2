#include "kv/kv_cache.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <fmt/format.h>
#include <new>
#include <unordered_set>
#include <xxhash.h>

#include "kernels/quant.h"

namespace ubatch {

Result<std::unique_ptr<KvCache>> KvCache::create(const KvCacheConfig& config) {
  if (config.n_layer <= 0 || config.n_embd_k <= 0 || config.n_embd_v <= 0)
    return Status::error("kv: n_layer and row sizes must be > 0");
  if (config.block_size <= 0 || config.block_size > 4096)
    return Status::error(fmt::format("kv: bad block size {}", config.block_size));
  if (config.n_cells <= 0) return Status::error(fmt::format("kv: bad capacity {} cells", config.n_cells));
  if (!kernels::can_quantize(config.type) || !kernels::can_dequantize(config.type))
    return Status::error(fmt::format("kv: unsupported cache type {}", tensor_type_name(config.type)));
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(config.type));
  if (config.n_embd_k % tr->block_size != 0 || config.n_embd_v % tr->block_size != 0)
    return Status::error(fmt::format("kv: row sizes {}/{} are not multiples of {}'s block of {}",
                                     config.n_embd_k, config.n_embd_v, tr->name, tr->block_size));
  if (static_cast<int32_t>(config.rope_base.size()) != config.n_layer && !config.rope_base.empty())
    return Status::error("kv: rope_base must have one entry per layer");
  std::unique_ptr<KvCache> kv(new KvCache(config));
  for (int il = 0; il < config.n_layer; ++il)
    if (!kv->k_[il].data() || !kv->v_[il].data())
      return Status::error(fmt::format("kv: cannot allocate {:.2f} GiB for {} cells",
                                       double(config.n_cells) * config.n_layer * (kv->k_row_bytes_ + kv->v_row_bytes_) / 1073741824.0,
                                       config.n_cells));
  return kv;
}

KvCache::KvCache(const KvCacheConfig& config) : cfg_(config) {
  n_blocks_ = (cfg_.n_cells + cfg_.block_size - 1) / cfg_.block_size;
  k_row_bytes_ = tensor_row_bytes(cfg_.type, cfg_.n_embd_k);
  v_row_bytes_ = tensor_row_bytes(cfg_.type, cfg_.n_embd_v);
  const size_t cells = static_cast<size_t>(n_cells());
  k_.resize(cfg_.n_layer);
  v_.resize(cfg_.n_layer);
  for (int il = 0; il < cfg_.n_layer; ++il) {
    k_[il].bytes.reset(static_cast<uint8_t*>(std::calloc(cells, k_row_bytes_)));
    v_[il].bytes.reset(static_cast<uint8_t*>(std::calloc(cells, v_row_bytes_)));
  }
  cell_pos_.assign(cells, -1);
  cell_token_.assign(cells, -1);
  ref_.assign(n_blocks_, 0);
  key_.assign(n_blocks_, 0);
  has_key_.assign(n_blocks_, 0);
  lru_pos_.resize(n_blocks_);
  in_lru_.assign(n_blocks_, 0);
  for (int32_t b = n_blocks_ - 1; b >= 0; --b) free_.push_back(b);
  state_offset_.assign(cfg_.state_layer_floats.size(), 0);
  for (size_t il = 0; il < cfg_.state_layer_floats.size(); ++il) {
    state_offset_[il] = state_floats_;
    state_floats_ += cfg_.state_layer_floats[il];
  }
}

// ---- recurrent state ----

KvCache::StateBuf KvCache::new_state(bool zero) {
  // On a 64-byte boundary, so that the kernels' rows of state (whole cache lines: the layers'
  // parts and the heads' matrices are multiples of 16 words for the models we load) never split
  // a vector load across two lines: the F32 decode step of the delta rule measured 6-7% faster so
  // (bench/bench_delta_rule.cpp, OFFSET 0 against 16).
  constexpr std::align_val_t kAlign{64};
  float* p = static_cast<float*>(::operator new[](state_floats_ * sizeof(float), kAlign));
  if (zero) std::fill(p, p + state_floats_, 0.0f);
  return StateBuf(p, [](float* q) { ::operator delete[](q, std::align_val_t{64}); });
}

const KvCache::StateBuf* KvCache::find_checkpoint(const Sequence& s, int32_t pos) const {
  for (const auto& [p, buf] : s.checkpoints)
    if (p == pos) return &buf;
  return nullptr;
}

bool KvCache::restore_before(Sequence& s, int32_t p0) {
  const StateBuf* cp = find_checkpoint(s, p0 - 1);
  if (!cp) return false;
  if (!s.state || s.state.use_count() > 1) s.state = new_state(false);
  std::copy(cp->get(), cp->get() + state_floats_, s.state.get());
  std::erase_if(s.checkpoints, [p0](const auto& c) { return c.first >= p0; });
  s.last_snapshot = std::min<int32_t>(s.last_snapshot, p0);
  s.chunkable_end = std::min<int32_t>(s.chunkable_end, p0);
  return true;
}

int32_t KvCache::chunked_below(int32_t boundary, int32_t n_chunkable) const {
  const int32_t c = cfg_.state_chunk;
  return c > 0 ? std::min(boundary, std::max(n_chunkable, 0)) / c * c : 0;
}

bool KvCache::trim_snapshots(uint64_t keep_free) {
  const uint64_t bytes = state_floats_ * sizeof(float);
  while (snapshots_.size() * bytes + keep_free > cfg_.snapshot_budget_bytes) {
    if (snapshot_lru_.empty()) return false;
    auto it = snapshots_.find(snapshot_lru_.front());
    if (it->second.placement == placements_) return false;  // this placement's own (most recent anyway)
    snapshots_.erase(it);
    snapshot_lru_.pop_front();
    ++snapshot_evictions_;
  }
  return true;
}

size_t KvCache::storage_bytes() const {
  return static_cast<size_t>(n_cells()) * (k_row_bytes_ + v_row_bytes_) * cfg_.n_layer;
}

int32_t KvCache::n_blocks_available() const {
  return static_cast<int32_t>(free_.size() + lru_.size());
}

bool KvCache::seq_exists(int32_t seq_id) const { return seqs_.count(seq_id) != 0; }

int32_t KvCache::seq_n_tokens(int32_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.cells.size());
}

int32_t KvCache::seq_pos_max(int32_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second.cells.empty()) return -1;
  return cell_pos_[it->second.cells.back()];
}

int32_t KvCache::seq_n_blocks(int32_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.blocks.size());
}

std::vector<int32_t> KvCache::seq_ids() const {
  std::vector<int32_t> ids;
  for (const auto& [id, s] : seqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// ---- block pool ----

int32_t KvCache::alloc_block() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    in_lru_[b] = 0;
    drop_key(b);
    ++evictions_;
  }
  UBATCH_CHECK_MSG(b >= 0, "kv: alloc_block without a free block (callers check first)");
  UBATCH_CHECK(ref_[b] == 0);
  ref_[b] = 1;
  return b;
}

void KvCache::retain_block(int32_t b) {
  if (ref_[b] == 0 && in_lru_[b]) {
    lru_.erase(lru_pos_[b]);
    in_lru_[b] = 0;
  }
  ++ref_[b];
}

void KvCache::release_block(int32_t b) {
  UBATCH_CHECK(ref_[b] > 0);
  if (--ref_[b] > 0) return;
  if (has_key_[b]) {
    lru_.push_back(b);
    lru_pos_[b] = std::prev(lru_.end());
    in_lru_[b] = 1;
  } else {
    const int32_t bs = cfg_.block_size;
    std::fill(cell_pos_.begin() + int64_t{b} * bs, cell_pos_.begin() + int64_t{b + 1} * bs, -1);
    free_.push_back(b);
  }
}

void KvCache::drop_key(int32_t b) {
  if (!has_key_[b]) return;
  auto it = by_key_.find(key_[b]);
  if (it != by_key_.end() && it->second == b) by_key_.erase(it);
  has_key_[b] = 0;
  if (ref_[b] == 0 && in_lru_[b]) {  // no longer worth keeping
    lru_.erase(lru_pos_[b]);
    in_lru_[b] = 0;
    free_.push_back(b);
  }
}

void KvCache::copy_block_cells(int32_t from, int32_t to, int32_t n) {
  const size_t bs = static_cast<size_t>(cfg_.block_size);
  for (int il = 0; il < cfg_.n_layer; ++il) {
    std::memcpy(k_[il].data() + to * bs * k_row_bytes_, k_[il].data() + from * bs * k_row_bytes_, n * k_row_bytes_);
    std::memcpy(v_[il].data() + to * bs * v_row_bytes_, v_[il].data() + from * bs * v_row_bytes_, n * v_row_bytes_);
  }
  for (int32_t j = 0; j < n; ++j) {
    cell_pos_[to * bs + j] = cell_pos_[from * bs + j];
    cell_token_[to * bs + j] = cell_token_[from * bs + j];
  }
}

void KvCache::copy_cell(int32_t from, int32_t to) {
  for (int il = 0; il < cfg_.n_layer; ++il) {
    std::memcpy(k_[il].data() + size_t(to) * k_row_bytes_, k_[il].data() + size_t(from) * k_row_bytes_, k_row_bytes_);
    std::memcpy(v_[il].data() + size_t(to) * v_row_bytes_, v_[il].data() + size_t(from) * v_row_bytes_, v_row_bytes_);
  }
}

uint64_t KvCache::chain_hash(uint64_t prev, const int32_t* tokens, int32_t n) {
  return XXH64(tokens, sizeof(int32_t) * static_cast<size_t>(n), prev);
}

void KvCache::seal_full_block(Sequence& s, int32_t bi) {
  if (!s.hashable || static_cast<int32_t>(s.hashes.size()) != bi) {
    s.hashable = false;
    return;
  }
  const int32_t bs = cfg_.block_size;
  const int32_t b = s.blocks[bi];
  const uint64_t prev = bi > 0 ? s.hashes[bi - 1] : 0x9E3779B97F4A7C15ull;
  const uint64_t h = chain_hash(prev, &cell_token_[int64_t{b} * bs], bs);
  s.hashes.push_back(h);
  if (!has_key_[b] && by_key_.find(h) == by_key_.end()) {
    key_[b] = h;
    has_key_[b] = 1;
    by_key_[h] = b;
  }
}

// ---- sequences ----

void KvCache::remove_seq(int32_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  for (int32_t b : it->second.blocks) release_block(b);
  seqs_.erase(it);
}

bool KvCache::seq_rm(int32_t seq_id, int32_t p0, int32_t p1) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return true;
  Sequence& s = it->second;
  if (p1 < 0) p1 = INT32_MAX;
  if (p0 < 0) p0 = 0;
  if (p0 >= p1) return true;
  const int32_t n = static_cast<int32_t>(s.cells.size());
  int32_t i0 = 0;
  while (i0 < n && cell_pos_[s.cells[i0]] < p0) ++i0;
  int32_t i1 = i0;
  while (i1 < n && cell_pos_[s.cells[i1]] < p1) ++i1;
  if (i0 == i1) return true;
  if (i1 != n) return false;  // only suffixes can be removed from a block table
  if (i0 == 0) {
    remove_seq(seq_id);
    return true;
  }
  if (has_state() && !restore_before(s, cell_pos_[s.cells[i0]])) return false;
  const int32_t bs = cfg_.block_size;
  const int32_t keep_blocks = (i0 + bs - 1) / bs;
  for (size_t bi = keep_blocks; bi < s.blocks.size(); ++bi) release_block(s.blocks[bi]);
  s.blocks.resize(keep_blocks);
  s.cells.resize(i0);
  if (static_cast<int32_t>(s.hashes.size()) > i0 / bs) s.hashes.resize(i0 / bs);
  if (i0 % bs != 0) {
    const int32_t last = s.blocks.back();
    if (ref_[last] == 1) drop_key(last);  // its tail will be overwritten
  }
  return true;
}

int32_t KvCache::seq_rollback(int32_t seq_id, int32_t p0) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return 0;
  Sequence& s = it->second;
  const int32_t n = static_cast<int32_t>(s.cells.size());
  int32_t i0 = n;  // first cell to remove (positions increase along the table)
  while (i0 > 0 && cell_pos_[s.cells[i0 - 1]] >= p0) --i0;
  if (i0 == n) return 0;
  if (has_state() && i0 > 0 && !find_checkpoint(s, cell_pos_[s.cells[i0 - 1]])) return -1;
  const int32_t bs = cfg_.block_size;
  const int32_t keep_blocks = (i0 + bs - 1) / bs;
  int32_t freed = 0;
  for (size_t bi = keep_blocks; bi < s.blocks.size(); ++bi) {
    const int32_t b = s.blocks[bi];
    if (ref_[b] == 1) {
      drop_key(b);
      ++freed;
    }
  }
  const bool ok = seq_rm(seq_id, p0, -1);
  UBATCH_CHECK(ok);  // a suffix by construction
  return freed;
}

void KvCache::seq_cp(int32_t src, int32_t dst) {
  if (src == dst) return;
  remove_seq(dst);
  auto it = seqs_.find(src);
  if (it == seqs_.end()) return;
  Sequence copy = it->second;
  for (int32_t b : copy.blocks) retain_block(b);
  if (copy.state) {  // the live state is the sequence's own; checkpoints stay shared (read-only)
    StateBuf own = new_state(false);
    std::copy(copy.state.get(), copy.state.get() + state_floats_, own.get());
    copy.state = std::move(own);
  }
  seqs_.emplace(dst, std::move(copy));
}

void KvCache::seq_keep(int32_t seq_id) {
  for (int32_t id : seq_ids())
    if (id != seq_id) remove_seq(id);
}

void KvCache::clear() {
  for (int32_t id : seq_ids()) remove_seq(id);
}

bool KvCache::seq_shift(int32_t seq_id, int32_t p0, int32_t p1, int32_t delta) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || delta == 0) return true;
  if (has_state()) return false;  // a recurrent state has no positions to shift
  Sequence& s = it->second;
  if (p1 < 0) p1 = INT32_MAX;
  const int32_t n = static_cast<int32_t>(s.cells.size());
  int32_t i0 = 0;
  while (i0 < n && cell_pos_[s.cells[i0]] < p0) ++i0;
  int32_t i1 = i0;
  while (i1 < n && cell_pos_[s.cells[i1]] < p1) ++i1;
  if (i0 == i1) return true;
  const int64_t new_first = int64_t{cell_pos_[s.cells[i0]]} + delta;
  const int64_t new_last = int64_t{cell_pos_[s.cells[i1 - 1]]} + delta;
  if (new_first < 0 || new_last > INT32_MAX / 2) return false;
  if (i0 > 0 && cell_pos_[s.cells[i0 - 1]] >= new_first) return false;
  if (i1 < n && cell_pos_[s.cells[i1]] <= new_last) return false;
  const int32_t bs = cfg_.block_size;
  // Blocks we are about to modify must be private to this sequence.
  const int32_t b_first = i0 / bs, b_last = (i1 - 1) / bs;
  int32_t need = 0;
  for (int32_t bi = b_first; bi <= b_last; ++bi) need += ref_[s.blocks[bi]] > 1 ? 1 : 0;
  if (need > n_blocks_available()) return false;
  for (int32_t bi = b_first; bi <= b_last; ++bi) {
    int32_t b = s.blocks[bi];
    if (ref_[b] > 1) {
      const int32_t filled = std::min(bs, n - bi * bs);
      const int32_t nb = alloc_block();
      copy_block_cells(b, nb, filled);
      release_block(b);
      s.blocks[bi] = nb;
      for (int32_t j = 0; j < filled; ++j) s.cells[bi * bs + j] = nb * bs + j;
      b = nb;
    }
    drop_key(b);
  }
  s.hashable = false;
  s.hashes.clear();
  // Re-rotate keys: RoPE rotations compose, R(p + delta) = R(delta) R(p). A key already carries
  // any attention factor on cos and sin (LongRoPE), so the delta rotation is a pure rotation.
  std::vector<float> row(cfg_.n_embd_k);
  const int half = cfg_.n_rot / 2;
  std::vector<float> cos(half), sin(half);
  const float* factors = cfg_.rope_freq_factors.empty() ? nullptr : cfg_.rope_freq_factors.data();
  const bool rotate = cfg_.n_rot > 0 && cfg_.head_dim > 0 && cfg_.n_kv_head > 0;
  for (int32_t i = i0; i < i1; ++i) {
    const int32_t c = s.cells[i];
    cell_pos_[c] += delta;
    if (!rotate) continue;
    for (int il = 0; il < cfg_.n_layer; ++il) {
      if (!cfg_.rope_layer.empty() && !cfg_.rope_layer[il]) continue;  // NoPE: keys carry no position
      uint8_t* k = k_[il].data() + size_t(c) * k_row_bytes_;
      kernels::dequantize_row(cfg_.type, k, row.data(), cfg_.n_embd_k);
      const float base = cfg_.rope_base.empty() ? 10000.0f : cfg_.rope_base[il];
      const float scale = cfg_.rope_freq_scale_layer.empty() ? cfg_.rope_freq_scale : cfg_.rope_freq_scale_layer[il];
      kernels::rope_angles(delta, cfg_.n_rot, base, scale, cos.data(), sin.data(), factors);
      kernels::rope_apply(row.data(), cfg_.n_kv_head, cfg_.head_dim, cfg_.n_rot, cos.data(), sin.data(),
                          cfg_.rope_style);
      kernels::quantize_row(cfg_.type, row.data(), k, cfg_.n_embd_k);
    }
  }
  return true;
}

// ---- prefix cache ----

int32_t KvCache::seq_reuse_prefix(int32_t seq_id, const int32_t* tokens, int32_t n_tokens,
                                  int32_t max_tokens, int32_t n_chunkable) {
  prefix_queries_ += static_cast<uint64_t>(std::max(n_tokens, 0));
  if (seq_n_tokens(seq_id) != 0 || n_tokens <= 0) return 0;
  const int32_t bs = cfg_.block_size;
  const int32_t limit = std::min(n_tokens, max_tokens);
  Sequence s;
  uint64_t prev = 0x9E3779B97F4A7C15ull;
  int32_t n_with_state = 0;  // blocks up to the last one with a snapshot (recurrent state)
  const Snapshot* snap = nullptr;
  for (int32_t bi = 0; (bi + 1) * bs <= limit; ++bi) {
    const uint64_t h = chain_hash(prev, tokens + int64_t{bi} * bs, bs);
    auto it = by_key_.find(h);
    if (it == by_key_.end()) break;
    const int32_t b = it->second;
    bool same = true;  // guard against hash collisions: compare ids and positions
    for (int32_t j = 0; j < bs && same; ++j)
      same = cell_token_[int64_t{b} * bs + j] == tokens[int64_t{bi} * bs + j] &&
             cell_pos_[int64_t{b} * bs + j] == bi * bs + j;
    if (!same) break;
    retain_block(b);
    s.blocks.push_back(b);
    for (int32_t j = 0; j < bs; ++j) s.cells.push_back(b * bs + j);
    s.hashes.push_back(h);
    prev = h;
    if (has_state())
      if (auto sn = snapshots_.find(h);
          sn != snapshots_.end() && sn->second.chunked == chunked_below((bi + 1) * bs, n_chunkable)) {
        n_with_state = bi + 1;
        snap = &sn->second;
      }
  }
  if (has_state()) {  // only a prefix whose state is known can be resumed
    for (size_t bi = static_cast<size_t>(n_with_state); bi < s.blocks.size(); ++bi) release_block(s.blocks[bi]);
    s.blocks.resize(static_cast<size_t>(n_with_state));
    s.cells.resize(static_cast<size_t>(n_with_state) * bs);
    s.hashes.resize(static_cast<size_t>(n_with_state));
    if (snap) {
      s.state = new_state(false);
      std::copy(snap->state.get(), snap->state.get() + state_floats_, s.state.get());
      snapshot_lru_.splice(snapshot_lru_.end(), snapshot_lru_, snap->lru);
      s.last_snapshot = n_with_state * bs;
      s.chunkable_end = std::min(n_with_state * bs, std::max(n_chunkable, 0));
    }
  }
  const int32_t reused = static_cast<int32_t>(s.cells.size());
  if (reused > 0) {
    remove_seq(seq_id);
    seqs_.emplace(seq_id, std::move(s));
  }
  prefix_hits_ += static_cast<uint64_t>(reused);
  return reused;
}

// ---- placement ----

int32_t KvCache::blocks_needed(int32_t seq_id, int32_t n) const {
  if (n <= 0) return 0;
  const int32_t bs = cfg_.block_size;
  const int32_t cur = seq_n_tokens(seq_id);
  int32_t need = (cur + n + bs - 1) / bs - (cur + bs - 1) / bs;
  if (cur % bs != 0) {
    auto it = seqs_.find(seq_id);
    if (ref_[it->second.blocks.back()] > 1) ++need;  // copy-on-write of the shared tail
  }
  return need;
}

Status KvCache::place(const int32_t* token, const int32_t* pos, const int32_t* seq_id,
                      int32_t n_tokens, KvView& view, StateView* state, const uint8_t* checkpoint,
                      const uint8_t* chunkable) {
  if (n_tokens <= 0) return Status::error("kv: empty ubatch");
  // Validate positions and count blocks before touching anything.
  std::unordered_map<int32_t, std::pair<int32_t, int32_t>> next;  // seq -> (next pos, count)
  for (int32_t t = 0; t < n_tokens; ++t) {
    const int32_t id = seq_id[t];
    if (id < 0) return Status::error(fmt::format("kv: token {} has negative seq_id {}", t, id));
    auto it = next.find(id);
    if (it == next.end()) {
      const int32_t pmax = seq_pos_max(id);
      const int32_t expect = pmax < 0 ? pos[t] : pmax + 1;  // an empty sequence may start anywhere >= 0
      if (has_state() && pmax < 0 && pos[t] != 0)
        return Status::error(fmt::format("kv: token {} starts seq {} at pos {}: a sequence with recurrent state starts at 0",
                                         t, id, pos[t]));
      it = next.emplace(id, std::make_pair(expect, 0)).first;
    }
    if (pos[t] < 0 || pos[t] != it->second.first)
      return Status::error(fmt::format("kv: token {} of seq {} has pos {}, expected {}", t, id, pos[t],
                                       it->second.first));
    it->second.first++;
    it->second.second++;
  }
  int64_t need = 0;
  for (const auto& [id, pc] : next) need += blocks_needed(id, pc.second);
  if (need > n_blocks_available())
    return Status::error(fmt::format("kv: out of blocks: ubatch needs {} new blocks, {} available of {}",
                                     need, n_blocks_available(), n_blocks_));

  const int32_t bs = cfg_.block_size;
  write_cell_.resize(n_tokens);
  n_visible_.resize(n_tokens);
  cells_ptr_.resize(n_tokens);
  for (int32_t t = 0; t < n_tokens; ++t) {
    auto [it, inserted] = seqs_.try_emplace(seq_id[t]);
    Sequence& s = it->second;
    if (inserted) s.hashable = pos[t] == 0;
    const int32_t i = static_cast<int32_t>(s.cells.size());
    if (i % bs == 0) {
      s.blocks.push_back(alloc_block());
    } else if (ref_[s.blocks.back()] > 1) {  // copy-on-write of a shared, partly filled block
      const int32_t old = s.blocks.back();
      const int32_t nb = alloc_block();
      copy_block_cells(old, nb, i % bs);
      release_block(old);
      s.blocks.back() = nb;
      for (int32_t j = 0; j < i % bs; ++j) s.cells[i - i % bs + j] = nb * bs + j;
    }
    const int32_t cell = s.blocks.back() * bs + i % bs;
    cell_pos_[cell] = pos[t];
    cell_token_[cell] = token[t];
    s.cells.push_back(cell);
    write_cell_[t] = cell;
    n_visible_[t] = i + 1;
    if ((i + 1) % bs == 0) seal_full_block(s, i / bs);
  }
  for (int32_t t = 0; t < n_tokens; ++t) cells_ptr_[t] = seqs_.at(seq_id[t]).cells.data();
  if (has_state()) {
    UBATCH_CHECK_MSG(state != nullptr, "kv: a model with recurrent layers places without a StateView");
    place_state(pos, seq_id, n_tokens, *state, checkpoint, chunkable);
  }

  view.type = cfg_.type;
  view.layers.resize(cfg_.n_layer);
  for (int il = 0; il < cfg_.n_layer; ++il) {
    view.layers[il].k = k_[il].data();
    view.layers[il].v = v_[il].data();
    view.layers[il].k_row_bytes = k_row_bytes_;
    view.layers[il].v_row_bytes = v_row_bytes_;
  }
  view.write_cell = write_cell_.data();
  view.cells = cells_ptr_.data();
  view.n_cells = n_visible_.data();
  view.cell_pos = cell_pos_.data();
  return Status::ok();
}

void KvCache::place_state(const int32_t* pos, const int32_t* seq_id, int32_t n_tokens, StateView& view,
                          const uint8_t* checkpoint, const uint8_t* chunkable) {
  const int32_t bs = cfg_.block_size;
  ++placements_;
  view.state_floats = state_floats_;
  view.type = cfg_.state_type;
  view.layer_offset = state_offset_;
  view.chunk = cfg_.state_chunk;
  if (chunkable && cfg_.state_chunk > 0) view.chunkable.assign(chunkable, chunkable + n_tokens);
  else view.chunkable.clear();
  view.seq_state.clear();
  view.seq_rows.clear();
  view.checkpoint.assign(static_cast<size_t>(n_tokens), nullptr);
  std::unordered_map<int32_t, int32_t> index;  // seq_id -> its index in the view
  for (int32_t t = 0; t < n_tokens; ++t) {
    auto [it, inserted] = index.try_emplace(seq_id[t], static_cast<int32_t>(view.seq_rows.size()));
    if (inserted) view.seq_rows.emplace_back();
    view.seq_rows[static_cast<size_t>(it->second)].push_back(t);
  }
  view.seq_state.resize(view.seq_rows.size());
  for (const auto& [id, k] : index) {
    Sequence& s = seqs_.at(id);
    const std::vector<int32_t>& rows = view.seq_rows[static_cast<size_t>(k)];
    const int32_t first_pos = pos[rows.front()];
    if (!s.state) s.state = new_state(true);  // a new sequence (starts at pos 0, checked)
    if (s.state.use_count() > 1) {            // shared with a checkpoint: write a copy
      StateBuf own = new_state(false);
      std::copy(s.state.get(), s.state.get() + state_floats_, own.get());
      s.state = std::move(own);
    }
    view.seq_state[static_cast<size_t>(k)] = s.state.get();
    std::erase_if(s.checkpoints, [first_pos](const auto& c) { return c.first < first_pos - 1; });
    if (!view.chunkable.empty())
      for (int32_t t : rows)
        if (view.chunkable[static_cast<size_t>(t)] && pos[t] == s.chunkable_end) s.chunkable_end = pos[t] + 1;
    // Checkpoints asked for.
    if (checkpoint)
      for (int32_t t : rows)
        if (checkpoint[t]) {
          StateBuf buf = new_state(false);
          view.checkpoint[static_cast<size_t>(t)] = buf.get();
          s.checkpoints.emplace_back(pos[t], std::move(buf));
        }
    // A prefix snapshot at the last block boundary these rows reach, when the sequence's
    // blocks are keyed: a prefill chunk always, decode steps every snapshot_interval tokens.
    const int32_t n_after = static_cast<int32_t>(s.cells.size());
    const int32_t boundary = n_after / bs * bs;
    const int32_t n_before = n_after - static_cast<int32_t>(rows.size());
    if (boundary <= n_before || boundary == 0 || static_cast<int32_t>(s.hashes.size()) < boundary / bs) continue;
    if (rows.size() < 2 && boundary - s.last_snapshot < cfg_.snapshot_interval) continue;
    const uint64_t key = s.hashes[static_cast<size_t>(boundary / bs - 1)];
    s.last_snapshot = boundary;
    if (auto sn = snapshots_.find(key); sn != snapshots_.end()) {
      snapshot_lru_.splice(snapshot_lru_.end(), snapshot_lru_, sn->second.lru);
      continue;
    }
    const uint64_t bytes = state_floats_ * sizeof(float);
    if (bytes > cfg_.snapshot_budget_bytes || !trim_snapshots(bytes)) continue;
    const int32_t t = rows[static_cast<size_t>(boundary - 1 - n_before)];
    StateBuf buf;
    for (auto& [p, cp] : s.checkpoints)
      if (p == pos[t]) buf = cp;  // the same token is also a checkpoint: one copy serves both
    if (!buf) buf = new_state(false);
    view.checkpoint[static_cast<size_t>(t)] = buf.get();
    snapshot_lru_.push_back(key);
    snapshots_.emplace(key, Snapshot{std::move(buf), std::prev(snapshot_lru_.end()), placements_,
                                     chunked_below(boundary, s.chunkable_end)});
  }
}

KvStats KvCache::stats() const {
  KvStats st;
  st.n_blocks = n_blocks_;
  for (int32_t b = 0; b < n_blocks_; ++b) st.n_blocks_used += ref_[b] > 0 ? 1 : 0;
  st.n_blocks_cached = static_cast<int32_t>(lru_.size());
  st.n_blocks_free = static_cast<int32_t>(free_.size());
  st.n_sequences = static_cast<int32_t>(seqs_.size());
  st.prefix_queries = prefix_queries_;
  st.prefix_hits = prefix_hits_;
  st.evictions = evictions_;
  if (has_state()) {
    const uint64_t bytes = state_floats_ * sizeof(float);
    std::unordered_set<const float*> checkpoints;
    for (const auto& [id, q] : seqs_) {
      if (q.state) st.state_bytes += bytes;
      for (const auto& [p, buf] : q.checkpoints) checkpoints.insert(buf.get());
    }
    st.checkpoint_bytes = checkpoints.size() * bytes;
    st.n_snapshots = static_cast<int32_t>(snapshots_.size());
    st.snapshot_bytes = snapshots_.size() * bytes;
    st.snapshot_evictions = snapshot_evictions_;
  }
  return st;
}

void KvCache::check_invariants() const {
  const int32_t bs = cfg_.block_size;
  std::vector<int32_t> refs(n_blocks_, 0);
  for (const auto& [id, s] : seqs_) {
    UBATCH_CHECK(s.blocks.size() == (s.cells.size() + bs - 1) / bs);
    for (int32_t b : s.blocks) ++refs[b];
    for (size_t i = 0; i < s.cells.size(); ++i) {
      UBATCH_CHECK(s.cells[i] == s.blocks[i / bs] * bs + static_cast<int32_t>(i % bs));
      if (i > 0) UBATCH_CHECK(cell_pos_[s.cells[i]] > cell_pos_[s.cells[i - 1]]);
    }
  }
  std::vector<int32_t> where(n_blocks_, 0);  // 1 free, 2 cached
  for (int32_t b : free_) {
    UBATCH_CHECK(where[b] == 0);
    where[b] = 1;
  }
  for (int32_t b : lru_) {
    UBATCH_CHECK(where[b] == 0);
    where[b] = 2;
    UBATCH_CHECK(in_lru_[b] && has_key_[b]);
  }
  for (int32_t b = 0; b < n_blocks_; ++b) {
    UBATCH_CHECK_MSG(refs[b] == ref_[b], "kv: reference count does not match block tables");
    if (ref_[b] == 0) UBATCH_CHECK_MSG(where[b] != 0, "kv: leaked block (unreferenced, not free, not cached)");
    else UBATCH_CHECK(where[b] == 0);
  }
  for (const auto& [h, b] : by_key_) UBATCH_CHECK(has_key_[b] && key_[b] == h);
}

}  // namespace ubatch
