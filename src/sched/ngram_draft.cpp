#include "sched/ngram_draft.h"

#include <algorithm>

#include "common/status.h"

namespace ubatch::sched {

namespace {
inline uint64_t mix(uint64_t h) {  // splitmix64 finalizer
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 31;
  return h;
}

uint64_t key(const int32_t* tokens, int32_t n) {
  uint64_t h = mix(static_cast<uint64_t>(n) + 0x9E3779B97F4A7C15ull);
  for (int32_t i = 0; i < n; ++i) h = mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h == 0 ? 1 : h;  // 0 marks an empty slot
}
}  // namespace

NgramDrafter::NgramDrafter(int32_t n_max) : n_max_(n_max) {
  UBATCH_CHECK_MSG(n_max >= 1, "ngram drafter: n_max must be >= 1");
}

void NgramDrafter::put(uint64_t k, int32_t end) {
  if (2 * (n_used_ + 1) > slots_.size()) {  // grow: keep the table at most half full
    std::vector<Slot> old(std::max<size_t>(64, slots_.size() * 2));
    old.swap(slots_);
    n_used_ = 0;
    for (const Slot& s : old)
      if (s.key != 0) put(s.key, s.end);
  }
  const size_t mask = slots_.size() - 1;
  for (size_t i = static_cast<size_t>(k) & mask;; i = (i + 1) & mask) {
    if (slots_[i].key == k) {
      slots_[i].end = end;
      return;
    }
    if (slots_[i].key == 0) {
      slots_[i] = {k, end};
      ++n_used_;
      return;
    }
  }
}

int32_t NgramDrafter::get(uint64_t k) const {
  if (slots_.empty()) return -1;
  const size_t mask = slots_.size() - 1;
  for (size_t i = static_cast<size_t>(k) & mask;; i = (i + 1) & mask) {
    if (slots_[i].key == k) return slots_[i].end;
    if (slots_[i].key == 0) return -1;
  }
}

void NgramDrafter::append(int32_t token) {
  tokens_.push_back(token);
  // The n-grams ending just before the new token now have a following token.
  const auto m = static_cast<int32_t>(tokens_.size()) - 1;
  const int32_t end = m - 1;
  for (int32_t n = 1; n <= n_max_ && end - n + 1 >= 0; ++n) put(key(&tokens_[end - n + 1], n), end);
}

void NgramDrafter::append(const std::vector<int32_t>& tokens) {
  for (int32_t t : tokens) append(t);
}

void NgramDrafter::draft(int32_t k, int32_t n_min, Draft& out) const {
  out.n_match = 0;
  out.tokens.clear();
  const auto size = static_cast<int32_t>(tokens_.size());
  if (k <= 0 || size < 2) return;
  const int32_t m = size - 1;  // the suffix ends here
  n_min = std::max(1, n_min);
  for (int32_t n = std::min(n_max_, m); n >= n_min; --n) {
    const int32_t* suffix = &tokens_[m - n + 1];
    const int32_t j = get(key(suffix, n));  // an earlier occurrence ends at j (j < m)
    if (j < 0) continue;
    if (!std::equal(suffix, suffix + n, &tokens_[j - n + 1])) continue;  // hash collision
    out.n_match = n;
    for (int32_t i = j + 1; i <= m && static_cast<int32_t>(out.tokens.size()) < k; ++i) out.tokens.push_back(tokens_[i]);
    return;
  }
}

NgramTable::NgramTable(size_t capacity, int32_t n, int32_t k_max) : n_(std::max(1, n)), k_max_(std::max(1, k_max)) {
  slots_.resize(capacity);
  tokens_.resize(capacity * static_cast<size_t>(k_max_));
}

size_t NgramTable::bytes() const { return slots_.size() * sizeof(Slot) + tokens_.size() * sizeof(int32_t); }

void NgramTable::add(const std::vector<int32_t>& tokens, size_t from) {
  if (slots_.empty()) return;
  const auto size = static_cast<int64_t>(tokens.size());
  // n-grams ending at e (inclusive) for e + 1 in [from, size): the first token after it is
  // one of tokens[from, size).
  for (int64_t e = std::max<int64_t>(n_ - 1, static_cast<int64_t>(from) - 1); e + 1 < size; ++e) {
    const uint64_t h = key(&tokens[static_cast<size_t>(e - n_ + 1)], n_);
    const size_t i = static_cast<size_t>(h % slots_.size());
    Slot& s = slots_[i];
    s.key = h;
    s.n_tokens = static_cast<int32_t>(std::min<int64_t>(k_max_, size - (e + 1)));
    std::copy_n(&tokens[static_cast<size_t>(e + 1)], s.n_tokens, &tokens_[i * static_cast<size_t>(k_max_)]);
  }
}

void NgramTable::lookup(const std::vector<int32_t>& tokens, int32_t k, Draft& out) const {
  out.n_match = 0;
  out.tokens.clear();
  if (slots_.empty() || k <= 0 || static_cast<int32_t>(tokens.size()) < n_) return;
  const uint64_t h = key(&tokens[tokens.size() - static_cast<size_t>(n_)], n_);
  const size_t i = static_cast<size_t>(h % slots_.size());
  const Slot& s = slots_[i];
  if (s.n_tokens == 0 || s.key != h) return;
  out.n_match = n_;
  const int32_t n = std::min(k, s.n_tokens);
  out.tokens.assign(&tokens_[i * static_cast<size_t>(k_max_)], &tokens_[i * static_cast<size_t>(k_max_)] + n);
}

}  // namespace ubatch::sched
