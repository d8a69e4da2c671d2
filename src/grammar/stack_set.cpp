#include "grammar/stack_set.h"

#include <algorithm>
#include <numeric>

namespace ubatch::grammar {

namespace {

uint64_t hash_frames(std::span<const uint32_t> f) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ f.size();
  for (uint32_t x : f) {
    h ^= x;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  return h;
}

}  // namespace

void StackSet::canonicalize() {
  const size_t n = size();
  if (n < 2) return;
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  auto less = [&](uint32_t a, uint32_t b) {
    const auto x = stack(a), y = stack(b);
    return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
  };
  std::sort(order.begin(), order.end(), less);
  StackSet out;
  out.end = end;
  for (size_t k = 0; k < n; ++k) {
    if (k > 0) {
      const auto x = stack(order[k - 1]), y = stack(order[k]);
      if (std::equal(x.begin(), x.end(), y.begin(), y.end())) continue;
    }
    out.push(stack(order[k]));
  }
  *this = std::move(out);
}

void StackSet::append_key(std::string& key) const {
  auto put = [&](uint32_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(end ? 1u : 0u);
  put(static_cast<uint32_t>(size()));
  for (size_t i = 0; i < size(); ++i) {
    const auto s = stack(i);
    put(static_cast<uint32_t>(s.size()));
    for (uint32_t f : s) put(f);
  }
}

Expander::Expander(const Automaton& a, size_t max_stacks) : a_(&a), max_stacks_(max_stacks) {
  plain_.resize(a.n_states());
  for (uint32_t s = 0; s < a.n_states(); ++s) plain_[s] = a.scans(s) && !a.is_final(s) && a.calls(s).empty();
}

bool Expander::close(const StackSet& in, StackSet& out) {
  out.clear();
  if (in.size() == 1 && plain(in.top(0))) {
    out.push(in.stack(0));
    return true;
  }
  work_frames_.clear();
  work_ends_.clear();
  auto push_work = [&](std::span<const uint32_t> f) {
    work_frames_.insert(work_frames_.end(), f.begin(), f.end());
    work_ends_.push_back(static_cast<uint32_t>(work_frames_.size()));
  };
  for (size_t i = in.size(); i-- > 0;) push_work(in.stack(i));
  seen_.clear();
  seen_index_.clear();
  while (!work_ends_.empty()) {
    // Pop the last stack into cur_.
    work_ends_.pop_back();
    const size_t begin = work_ends_.empty() ? 0 : work_ends_.back();
    cur_.assign(work_frames_.begin() + static_cast<std::ptrdiff_t>(begin), work_frames_.end());
    work_frames_.resize(begin);

    const uint64_t h = hash_frames(cur_);
    bool dup = false;
    for (auto [it, e] = seen_index_.equal_range(h); it != e; ++it) {
      const auto s = seen_.stack(it->second);
      if (std::equal(s.begin(), s.end(), cur_.begin(), cur_.end())) {
        dup = true;
        break;
      }
    }
    if (dup) continue;
    if (seen_.size() >= max_stacks_ * 4) return false;
    seen_index_.emplace(h, static_cast<uint32_t>(seen_.size()));
    seen_.push(cur_);
    const uint32_t top = cur_.back();
    if (a_->scans(top)) {
      if (out.size() >= max_stacks_) return false;
      out.push(cur_);
    }
    if (a_->is_final(top)) {
      if (cur_.size() == 1) out.end = true;
      else push_work(std::span<const uint32_t>(cur_.data(), cur_.size() - 1));
    }
    for (const Automaton::Call& c : a_->calls(top)) {
      push_work(std::span<const uint32_t>(cur_.data(), cur_.size() - 1));
      if (!c.tail) work_frames_.push_back(c.ret);
      work_frames_.push_back(c.start);
      work_ends_.back() = static_cast<uint32_t>(work_frames_.size());
    }
  }
  return true;
}

bool Expander::step(const StackSet& in, uint8_t b, StackSet& out) {
  advanced_.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t t = a_->step(in.top(i), b);
    if (t == Automaton::kNone) continue;
    const auto s = in.stack(i);
    cur_.assign(s.begin(), s.end());
    cur_.back() = t;
    advanced_.push(cur_);
  }
  return close(advanced_, out);
}

}  // namespace ubatch::grammar
