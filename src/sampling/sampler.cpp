// Token sampling (contract in sampler.h).
//
// sample() in steps:
//   1. Logit bias and the penalties change few logits: those ids' adjusted logits are
//      computed into a small list sorted by id (repetition penalty once per distinct token of
//      the window); the vocabulary is then read as the raw logits with that list overlaid.
//      NaN logits count as -inf, so every ordering below is a strict total order:
//      higher logit first, then lower id.
//   2. temperature <= 0: argmax, ties to the lowest id.
//   3. top-k: heap selection into candidates_ (blocks of 32 logits whose maximum does not beat
//      the current k-th best are skipped after one vectorizable pass), then sorted; without
//      top-k every id becomes a candidate, in id order.
//   4. weights w = exp((l − l_max) / T) (so w_max = 1) and their sum Z over the candidates.
//   5. top-p keeps the shortest prefix, in descending order, with Σw >= top_p·Z; min-p keeps
//      w >= min_p (= min_p·p_max, as p_max ∝ w_max = 1). Both keep a prefix of the sorted
//      list, so top-p then min-p keeps their intersection; min-p is applied first (it needs
//      no order) and top-p then runs over the survivors — a linear scan when they are sorted,
//      else a weighted quickselect (expected O(n), no full sort of the vocabulary).
//   6. draw: u = (53 bits of one mt19937_64 output) / 2^53 in [0, 1); the first candidate,
//      in list order, whose running Σw exceeds u·Σw. One draw per non-greedy call.
// The exponential is computed here (exp_det) with plain float operations, so the same seed and
// logits give the same tokens on every machine, whatever its libm.
#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "common/status.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ubatch {

namespace {

using Candidate = std::pair<float, int32_t>;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float sanitize(float l) { return l == l ? l : kNegInf; }

inline bool better(const Candidate& a, const Candidate& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// e^x to ~2 ulp from IEEE float operations only (bit-reproducible; the build disables FP
// contraction): x = n·ln2 + r, |r| <= ln2/2 (Cody–Waite), e^r by its degree-7 Taylor
// polynomial, 2^n applied as two exact power-of-two factors (covers n = 128 and subnormals).
// Underflows to 0, overflows to +inf; NaN gives 0 (a NaN weight is no weight).
inline float exp_det(float x) {
  x = x > -104.0f ? x : -104.0f;  // NaN → -104 → 0
  x = x < 89.0f ? x : 89.0f;
  const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float f1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float f2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  return (p * f1) * f2;
}

// Largest of l[0, n), NaN ignored (-inf when none). SSE2 (always there on x86-64) does 16
// lanes at a time; maxps(a, b) is exactly `a > b ? a : b`, so the fallback gives the same
// result. (The compiler will not vectorize the plain form: float compares may trap.)
inline float range_max(const float* l, size_t n) {
  size_t i = 0;
  float r = kNegInf;
#if defined(__SSE2__)
  if (n >= 16) {
    __m128 m0 = _mm_set1_ps(kNegInf), m1 = m0, m2 = m0, m3 = m0;
    for (; i + 16 <= n; i += 16) {
      m0 = _mm_max_ps(_mm_loadu_ps(l + i), m0);
      m1 = _mm_max_ps(_mm_loadu_ps(l + i + 4), m1);
      m2 = _mm_max_ps(_mm_loadu_ps(l + i + 8), m2);
      m3 = _mm_max_ps(_mm_loadu_ps(l + i + 12), m3);
    }
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
    for (float v : lanes) r = v > r ? v : r;
  }
#endif
  for (; i < n; ++i) r = l[i] > r ? l[i] : r;
  return r;
}

// The vocabulary's logits after bias and penalties: raw logits, overlaid by `touched`
// (adjusted logits of a few ids, sorted by id).
struct LogitView {
  const float* logits;
  size_t n;
  std::vector<Candidate> touched;

  // range(begin, end) for each run of untouched ids, single(l, id) for each touched id, in
  // id order.
  template <typename Range, typename Single>
  void visit(Range&& range, Single&& single) const {
    size_t i = 0;
    for (const Candidate& t : touched) {
      const auto id = static_cast<size_t>(t.second);
      if (i < id) range(i, id);
      single(t.first, t.second);
      i = id + 1;
    }
    if (i < n) range(i, n);
  }
};

LogitView adjusted_view(const SamplingParams& params, int32_t n_vocab,
                        const std::deque<int32_t>& recent, const std::vector<int32_t>& counts,
                        const float* logits) {
  LogitView view{logits, static_cast<size_t>(n_vocab), {}};
  std::vector<Candidate>& touched = view.touched;
  const std::vector<std::pair<int32_t, float>>& bias_list = params.logit_bias;
  // A bias list sorted by id with each id once (the server's) is merged in one pass; any other
  // is sorted with the rest.
  bool sorted_bias = true;
  for (size_t i = 1; i < bias_list.size() && sorted_bias; ++i)
    sorted_bias = bias_list[i - 1].first < bias_list[i].first;
  std::vector<Candidate> others;  // the penalised ids (few)
  std::vector<Candidate>& rest = sorted_bias ? others : touched;
  if (!sorted_bias)
    for (const auto& [id, bias] : bias_list)
      if (id >= 0 && id < n_vocab) touched.push_back({0.0f, id});
  for (int32_t id : recent) rest.push_back({0.0f, id});
  constexpr size_t kBlock = 64;
  for (size_t b = 0; b < counts.size(); b += kBlock) {  // counts is mostly zeros
    const size_t e = std::min(counts.size(), b + kBlock);
    int32_t any = 0;
    for (size_t i = b; i < e; ++i) any |= counts[i];
    if (any == 0) continue;
    for (size_t i = b; i < e; ++i)
      if (counts[i] != 0) rest.push_back({0.0f, static_cast<int32_t>(i)});
  }

  auto by_id = [](const Candidate& a, const Candidate& b) { return a.second < b.second; };
  auto same_id = [](const Candidate& a, const Candidate& b) { return a.second == b.second; };
  std::sort(rest.begin(), rest.end(), by_id);
  rest.erase(std::unique(rest.begin(), rest.end(), same_id), rest.end());
  if (sorted_bias && !bias_list.empty()) {
    // Merge the sorted bias ids with the sorted penalised ids.
    touched.reserve(bias_list.size() + others.size());
    size_t k = 0;
    for (const auto& [id, bias] : bias_list) {
      if (id < 0 || id >= n_vocab) continue;
      for (; k < others.size() && others[k].second < id; ++k) touched.push_back(others[k]);
      if (k < others.size() && others[k].second == id) ++k;
      touched.push_back({0.0f, id});
    }
    touched.insert(touched.end(), others.begin() + static_cast<std::ptrdiff_t>(k), others.end());
  } else if (sorted_bias) {
    touched = std::move(others);
  }
  if (touched.empty()) return view;
  for (Candidate& c : touched) c.first = sanitize(logits[c.second]);

  if (sorted_bias) {
    size_t k = 0;  // every bias id in range is in `touched`, in the same order
    for (const auto& [id, bias] : bias_list) {
      if (id < 0 || id >= n_vocab) continue;
      while (touched[k].second != id) ++k;
      touched[k].first = sanitize(touched[k].first + bias);
    }
  } else {
    for (const auto& [id, bias] : bias_list) {
      if (id < 0 || id >= n_vocab) continue;
      float& l = std::lower_bound(touched.begin(), touched.end(), Candidate{0.0f, id}, by_id)->first;
      l = sanitize(l + bias);
    }
  }
  if (!recent.empty()) {
    std::vector<int32_t> in_window(recent.begin(), recent.end());
    std::sort(in_window.begin(), in_window.end());
    const float rp = params.repeat_penalty;
    for (Candidate& c : touched) {  // each id once
      if (!std::binary_search(in_window.begin(), in_window.end(), c.second)) continue;
      c.first = sanitize(c.first > 0.0f ? c.first / rp : c.first * rp);
    }
  }
  if (!counts.empty()) {
    const float pres = params.presence_penalty;
    const float freq = params.frequency_penalty;
    for (Candidate& c : touched) {
      const int32_t cnt = counts[static_cast<size_t>(c.second)];
      if (cnt == 0) continue;
      c.first = sanitize(c.first - (pres + freq * static_cast<float>(cnt)));
    }
  }
  return view;
}

// (max logit, argmax) of the view, ties to the lowest id; (-inf, 0) when every logit is -inf
// or NaN. Blocks are reduced with the vectorizable range_max; only the first block holding
// the maximum is searched for its position.
Candidate argmax(const LogitView& v) {
  constexpr size_t kBlock = 256;
  float mx = kNegInf;
  int32_t best = 0;  // a touched id, or the start of the block holding mx
  bool best_is_block = false;
  v.visit(
      [&](size_t b, size_t e) {
        for (size_t i = b; i < e; i += kBlock) {
          const size_t len = std::min(kBlock, e - i);
          const float m = range_max(v.logits + i, len);
          if (m > mx) {
            mx = m;
            best = static_cast<int32_t>(i);
            best_is_block = true;
          }
        }
      },
      [&](float l, int32_t id) {
        if (l > mx) {
          mx = l;
          best = id;
          best_is_block = false;
        }
      });
  if (best_is_block) {
    while (v.logits[best] != mx) ++best;
  }
  return {mx, best};
}

// Weights are computed in blocks of kExpBlock: buf[j] = exp_det((buf[j] − shift) / t). The
// SSE2 path does exactly these operations on 4 lanes (maxps/minps select as exp_det's
// comparisons do), so it gives the same bits as the scalar fallback.
constexpr size_t kExpBlock = 64;
inline void exp_block(float* buf, float shift, float t) {
#if defined(__SSE2__)
  const __m128 vshift = _mm_set1_ps(shift);
  const __m128 vt = _mm_set1_ps(t);
  for (size_t j = 0; j < kExpBlock; j += 4) {
    __m128 x = _mm_div_ps(_mm_sub_ps(_mm_loadu_ps(buf + j), vshift), vt);
    x = _mm_max_ps(x, _mm_set1_ps(-104.0f));  // NaN → -104, as in exp_det
    x = _mm_min_ps(x, _mm_set1_ps(89.0f));
    const __m128 magic = _mm_set1_ps(12582912.0f);
    const __m128 n =
        _mm_sub_ps(_mm_add_ps(_mm_mul_ps(x, _mm_set1_ps(1.44269504f)), magic), magic);
    __m128 r = _mm_sub_ps(x, _mm_mul_ps(n, _mm_set1_ps(0.693359375f)));
    r = _mm_sub_ps(r, _mm_mul_ps(n, _mm_set1_ps(-2.12194440e-4f)));
    __m128 p = _mm_set1_ps(1.0f / 5040.0f);
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.0f / 720.0f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.0f / 120.0f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.0f / 24.0f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.0f / 6.0f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(0.5f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.0f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.0f));
    const __m128i ni = _mm_cvttps_epi32(n);  // n is integral
    const __m128i n1 = _mm_srai_epi32(ni, 1);
    const __m128i n2 = _mm_sub_epi32(ni, n1);
    const __m128i bias = _mm_set1_epi32(127);
    const __m128 f1 = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(n1, bias), 23));
    const __m128 f2 = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(n2, bias), 23));
    _mm_storeu_ps(buf + j, _mm_mul_ps(_mm_mul_ps(p, f1), f2));
  }
#else
  for (size_t j = 0; j < kExpBlock; ++j) buf[j] = exp_det((buf[j] - shift) / t);
#endif
}

// The k (< n) best (logit, id) of the view into out, best first.
void select_top_k(const LogitView& v, size_t k, std::vector<Candidate>& out) {
  out.clear();
  // Heap with the worst kept candidate at the front. Ids arrive in increasing order, so a
  // later id beats the front only with a strictly greater logit (NaN never does).
  auto consider = [&](float l, int32_t id) {
    if (out.size() < k) {
      out.push_back({sanitize(l), id});
      std::push_heap(out.begin(), out.end(), better);
    } else if (l > out.front().first) {
      std::pop_heap(out.begin(), out.end(), better);
      out.back() = {l, id};
      std::push_heap(out.begin(), out.end(), better);
    }
  };
  constexpr size_t kBlock = 32;
  v.visit(
      [&](size_t b, size_t e) {
        size_t i = b;
        for (; i < e && out.size() < k; ++i) consider(v.logits[i], static_cast<int32_t>(i));
        for (; i + kBlock <= e; i += kBlock) {
          if (!(range_max(v.logits + i, kBlock) > out.front().first)) continue;
          for (size_t j = i; j < i + kBlock; ++j) consider(v.logits[j], static_cast<int32_t>(j));
        }
        for (; i < e; ++i) consider(v.logits[i], static_cast<int32_t>(i));
      },
      consider);
  std::sort_heap(out.begin(), out.end(), better);
}

// candidates [0, n) hold weights. Reorders them so that the shortest prefix, in `better`
// order, whose weight sum reaches target comes first (in no particular order) and returns
// its length; n when the sum never reaches target. Weighted quickselect: expected O(n).
size_t nucleus_select(Candidate* c, size_t n, double target) {
  size_t lo = 0;
  size_t hi = n;     // [0, lo) is kept, [hi, n) is not; the cut lies in [lo, hi]
  double acc = 0.0;  // weight of [0, lo), < target
  while (hi - lo > 32) {
    const Candidate& a = c[lo];
    const Candidate& b = c[lo + (hi - lo) / 2];
    const Candidate& d = c[hi - 1];
    const Candidate pivot = better(a, b) ? (better(b, d) ? b : (better(a, d) ? d : a))
                                         : (better(a, d) ? a : (better(b, d) ? d : b));
    Candidate* mid =
        std::partition(c + lo, c + hi, [&](const Candidate& x) { return better(x, pivot); });
    const auto m = static_cast<size_t>(mid - c);
    double s = 0.0;
    for (size_t i = lo; i < m; ++i) s += c[i].first;
    if (acc + s >= target) {
      hi = m;  // the cut is among the candidates better than the pivot
      continue;
    }
    // The pivot is the best of [m, hi): move it to m.
    Candidate* pv =
        std::find_if(mid, c + hi, [&](const Candidate& x) { return x.second == pivot.second; });
    std::swap(*pv, *mid);
    acc += s + pivot.first;
    if (acc >= target) return m + 1;
    lo = m + 1;
  }
  std::sort(c + lo, c + hi, better);
  for (size_t i = lo; i < hi; ++i) {
    acc += c[i].first;
    if (acc >= target) return i + 1;
  }
  return hi;
}

// nucleus_select, narrowed first by a histogram of the weights: the key of a weight w >= 0
// is its float bits >> 19 (exponent and 4 mantissa bits), monotone in w. One pass sums the
// weights per key; walking keys from the top finds the key where the running sum reaches
// target; everything above it is kept, and only that key's candidates need selecting.
size_t nucleus(Candidate* c, size_t n, double target) {
  constexpr int kShift = 19;
  constexpr size_t kKeys = size_t{1} << (31 - kShift);
  auto key = [](const Candidate& x) { return std::bit_cast<uint32_t>(x.first) >> kShift; };
  std::vector<double> sum(kKeys, 0.0);
  for (size_t i = 0; i < n; ++i) sum[key(c[i])] += c[i].first;
  double acc = 0.0;
  size_t k = kKeys;
  for (size_t b = kKeys; b-- > 0;) {
    if (acc + sum[b] >= target) {
      k = b;
      break;
    }
    acc += sum[b];
  }
  if (k == kKeys) return n;
  Candidate* above = std::partition(c, c + n, [&](const Candidate& x) { return key(x) > k; });
  Candidate* at = std::partition(above, c + n, [&](const Candidate& x) { return key(x) == k; });
  const auto n_above = static_cast<size_t>(above - c);
  return n_above + nucleus_select(above, static_cast<size_t>(at - above), target - acc);
}

// max and log Σ exp((l − max) / t) over raw logits [n] (NaN as -inf). False when every
// logit is -inf or NaN.
bool log_normalizer(const float* logits, size_t n, float t, float* max_out, double* log_sum) {
  const float mx = range_max(logits, n);
  if (mx == kNegInf) return false;
  double sum = 0.0;
  if (std::isinf(mx)) {  // +inf logits share all the mass
    for (size_t i = 0; i < n; ++i) sum += logits[i] == mx ? 1.0 : 0.0;
  } else {
    double acc[4] = {};
    float buf[kExpBlock] = {};
    for (size_t b = 0; b < n; b += kExpBlock) {
      const size_t len = std::min(kExpBlock, n - b);
      for (size_t j = 0; j < len; ++j) buf[j] = sanitize(logits[b + j]);
      exp_block(buf, mx, t);
      for (size_t j = 0; j < len; ++j) acc[j % 4] += static_cast<double>(buf[j]);
    }
    sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
  *max_out = mx;
  *log_sum = std::log(sum);
  return true;
}

float logprob_value(float l, float mx, double log_sum, float t) {
  l = sanitize(l);
  if (std::isinf(mx)) return l == mx ? static_cast<float>(-log_sum) : kNegInf;
  return static_cast<float>(static_cast<double>((l - mx) / t) - log_sum);
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : params_(params), n_vocab_(n_vocab), rng_(params.seed) {
  UBATCH_CHECK_MSG(n_vocab > 0, "sampler: n_vocab must be positive");
  // Per-token counts are only needed for presence/frequency penalties (1 MiB for a 262k vocab).
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    counts_.assign(static_cast<size_t>(n_vocab), 0);
}

void Sampler::accept(int32_t token) {
  UBATCH_CHECK_MSG(token >= 0 && token < n_vocab_, "sampler: accepted token id out of range");
  if (!counts_.empty()) ++counts_[static_cast<size_t>(token)];
  const bool repeat_on = params_.repeat_penalty != 1.0f && params_.repeat_penalty > 0.0f;
  if (!repeat_on || params_.repeat_last_n == 0) return;
  recent_.push_back(token);
  if (params_.repeat_last_n > 0) {
    while (recent_.size() > static_cast<size_t>(params_.repeat_last_n)) recent_.pop_front();
  }
}

const float* Sampler::mask_logits(const float* logits, const uint64_t* allowed) {
  const auto n = static_cast<size_t>(n_vocab_);
  masked_.resize(n);
  float* out = masked_.data();
  for (size_t w = 0; w * 64 < n; ++w) {  // 64 tokens per mask word
    const size_t b = w * 64, e = std::min(n, b + 64);
    const uint64_t bits = allowed[w];
    if (bits == ~uint64_t{0} && e - b == 64) {
      std::copy(logits + b, logits + e, out + b);
    } else if (bits == 0) {
      std::fill(out + b, out + e, kNegInf);
    } else {
      for (size_t i = b; i < e; ++i) out[i] = (bits >> (i - b)) & 1 ? logits[i] : kNegInf;
    }
  }
  return out;
}

int32_t Sampler::sample(const float* logits, const uint64_t* allowed) {
  if (!allowed) return sample_logits(logits);
  if (masked_.empty() || logits != masked_.data()) logits = mask_logits(logits, allowed);
  const int32_t id = sample_logits(logits);
  if ((allowed[static_cast<size_t>(id) / 64] >> (id % 64)) & 1) return id;
  // Every allowed logit is -inf or NaN: the lowest allowed id.
  const auto n = static_cast<size_t>(n_vocab_);
  for (size_t w = 0; w * 64 < n; ++w)
    if (allowed[w]) return static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(allowed[w])));
  UBATCH_CHECK_MSG(false, "sampler: the mask allows no token");
  return 0;
}

int32_t Sampler::sample_logits(const float* logits) {
  const auto n = static_cast<size_t>(n_vocab_);

  // 1. Bias and penalties.
  const LogitView view = adjusted_view(params_, n_vocab_, recent_, counts_, logits);

  // 2. Greedy.
  if (!(params_.temperature > 0.0f)) return argmax(view).second;

  // 3. Top-k, or every id in id order.
  size_t n_sorted = 0;  // candidates_[0, n_sorted) are the best, in `better` order
  const bool top_k_on = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n;
  const size_t k = top_k_on ? static_cast<size_t>(params_.top_k) : n;
  if (top_k_on && k <= n / 16) {
    select_top_k(view, k, candidates_);
    n_sorted = k;
  } else {
    candidates_.resize(n);
    view.visit(
        [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i)
            candidates_[i] = {sanitize(logits[i]), static_cast<int32_t>(i)};
        },
        [&](float l, int32_t id) { candidates_[static_cast<size_t>(id)] = {l, id}; });
    if (top_k_on) {  // a large k: select, then sort
      std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k),
                       candidates_.end(), better);
      candidates_.resize(k);
      std::sort(candidates_.begin(), candidates_.end(), better);
      n_sorted = k;
    }
  }
  size_t n_cand = candidates_.size();

  // 4. Weights at temperature T; w_max = 1.
  const Candidate best = n_sorted > 0 ? candidates_[0] : argmax(view);
  const float lmax = best.first;
  if (std::isinf(lmax)) {
    // Every token banned (-inf: the lowest id), or some forced by a +inf bias (the lowest
    // such id). Deterministic, and no RNG draw.
    return best.second;
  }
  const float t = params_.temperature;
  double z = 0.0;
  {
    double acc[4] = {};
    float buf[kExpBlock] = {};
    for (size_t b = 0; b < n_cand; b += kExpBlock) {
      const size_t len = std::min(kExpBlock, n_cand - b);
      for (size_t j = 0; j < len; ++j) buf[j] = candidates_[b + j].first;
      exp_block(buf, lmax, t);  // NaN (t = inf) → 0
      for (size_t j = 0; j < len; ++j) {
        candidates_[b + j].first = buf[j];  // from here on, .first holds the weight
        acc[j % 4] += static_cast<double>(buf[j]);
      }
    }
    z = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }

  // 5. Min-p (keeps list order), then top-p over the survivors.
  if (params_.min_p > 0.0f) {
    const float thr = std::min(params_.min_p, 1.0f);
    auto keep_end = std::remove_if(candidates_.begin(),
                                   candidates_.begin() + static_cast<std::ptrdiff_t>(n_cand),
                                   [thr](const Candidate& c) { return c.first < thr; });
    n_cand = static_cast<size_t>(keep_end - candidates_.begin());
    n_sorted = std::min(n_sorted, n_cand);  // remove_if keeps a sorted prefix sorted
  }
  if (params_.top_p < 1.0f) {
    const double target = static_cast<double>(params_.top_p) * z;
    if (n_sorted == n_cand) {
      double cum = 0.0;
      size_t i = 0;
      while (i < n_cand) {
        cum += candidates_[i++].first;
        if (cum >= target) break;
      }
      n_cand = i;
    } else {
      n_cand = nucleus(candidates_.data(), n_cand, target);
    }
  }

  // 6. Draw: block sums locate the block, then a running sum within it.
  constexpr size_t kDrawBlock = 64;
  const size_t n_blocks = (n_cand + kDrawBlock - 1) / kDrawBlock;
  std::vector<double> block_sum(n_blocks, 0.0);
  double total = 0.0;
  for (size_t b = 0; b < n_blocks; ++b) {
    const size_t e = std::min(n_cand, (b + 1) * kDrawBlock);
    double s[4] = {};
    for (size_t i = b * kDrawBlock; i < e; ++i) s[i % 4] += candidates_[i].first;
    block_sum[b] = (s[0] + s[1]) + (s[2] + s[3]);
    total += block_sum[b];
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  const double target = u * total;
  double cum = 0.0;
  size_t b = 0;
  while (b + 1 < n_blocks && cum + block_sum[b] <= target) cum += block_sum[b++];
  for (size_t i = b * kDrawBlock; i < n_cand; ++i) {
    const float w = candidates_[i].first;
    if (w <= 0.0f) continue;
    cum += w;
    if (cum > target) return candidates_[i].second;
  }
  // Rounding left the running sum short of the target: the last drawable candidate.
  size_t i = n_cand;
  while (i > 1 && !(candidates_[i - 1].first > 0.0f)) --i;
  return candidates_[i - 1].second;
}

TokenLogprob Sampler::logprob_of(const float* logits, int32_t chosen) const {
  UBATCH_CHECK_MSG(chosen >= 0 && chosen < n_vocab_, "sampler: token id out of range");
  const float t = params_.temperature > 0.0f ? params_.temperature : 1.0f;
  float mx = 0.0f;
  double log_sum = 0.0;
  if (!log_normalizer(logits, static_cast<size_t>(n_vocab_), t, &mx, &log_sum))
    return {chosen, kNegInf};
  return {chosen, logprob_value(logits[chosen], mx, log_sum, t)};
}

std::vector<TokenLogprob> Sampler::top_logprobs(const float* logits, int n_top) const {
  std::vector<TokenLogprob> result;
  if (n_top <= 0) return result;
  const auto n = static_cast<size_t>(n_vocab_);
  const auto k = static_cast<size_t>(std::min(n_top, n_vocab_));
  const float t = params_.temperature > 0.0f ? params_.temperature : 1.0f;
  float mx = 0.0f;
  double log_sum = 0.0;
  const bool finite = log_normalizer(logits, n, t, &mx, &log_sum);

  std::vector<Candidate> top;
  const LogitView raw{logits, n, {}};
  if (k < n) {
    select_top_k(raw, k, top);
  } else {
    for (size_t i = 0; i < n; ++i) top.push_back({sanitize(logits[i]), static_cast<int32_t>(i)});
    std::sort(top.begin(), top.end(), better);
  }
  result.reserve(k);
  for (const Candidate& c : top)
    result.push_back({c.second, finite ? logprob_value(c.first, mx, log_sum, t) : kNegInf});
  return result;
}

}  // namespace ubatch
