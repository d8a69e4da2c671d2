// Rewriting a GGUF file key by key and tensor by tensor: the tool of the mutation and
// malformed-file tests (test_context_archs.cpp, test_context_hybrid.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

namespace ubatch::test {

struct Rewrite {
  // Returns true when it wrote (or dropped) the key itself.
  std::function<bool(const gguf::MetadataEntry&, gguf::Writer&)> key;
  // Returns true when it wrote (or dropped) the tensor itself.
  std::function<bool(const gguf::TensorInfo&, gguf::Writer&)> tensor;
  std::function<void(gguf::Writer&)> extra = nullptr;  // keys and tensors added at the end (may be left out)
};

inline std::vector<uint8_t> tensor_bytes(const gguf::TensorInfo& t) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  return std::vector<uint8_t>(p, p + t.n_bytes);
}

inline std::vector<int64_t> tensor_shape(const gguf::TensorInfo& t) { return std::vector<int64_t>(t.ne, t.ne + t.n_dims); }

// The file's bytes with the rewrite applied; everything it does not handle is copied.
inline std::vector<uint8_t> rewrite(const gguf::File& f, const Rewrite& r) {
  gguf::Writer w(f.version());
  for (const gguf::MetadataEntry& e : f.metadata()) {
    if (e.key == "general.alignment") {
      w.set_alignment(static_cast<uint32_t>(e.value.u));
      continue;
    }
    if (r.key && r.key(e, w)) continue;
    w.add_value(e.key, e.value);
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (r.tensor && r.tensor(t, w)) continue;
    w.add_tensor(t.name, t.type, tensor_shape(t), tensor_bytes(t));
  }
  if (r.extra) r.extra(w);
  return w.bytes();
}

// True when `name` ends with `suffix`.
inline bool name_ends_with(const std::string& name, const std::string& suffix) {
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Metadata key `key` rewritten as a UINT32 holding `value`.
inline Rewrite set_u32(const std::string& key, uint32_t value) {
  return {[key, value](const gguf::MetadataEntry& e, gguf::Writer& w) {
            if (e.key != key) return false;
            w.add_uint(key, gguf::ValueType::UINT32, value);
            return true;
          },
          nullptr};
}

// F32 tensors whose names end in one of `suffixes`, edited by fn(values, shape) and written back.
inline Rewrite edit_f32(std::vector<std::string> suffixes,
                        std::function<void(std::vector<float>&, const std::vector<int64_t>&)> fn) {
  return {nullptr, [suffixes, fn](const gguf::TensorInfo& t, gguf::Writer& w) {
            bool hit = false;
            for (const std::string& s : suffixes) hit = hit || name_ends_with(t.name, s);
            if (!hit || t.type != TensorType::F32) return false;
            std::vector<float> v(static_cast<size_t>(t.n_bytes / 4));
            std::memcpy(v.data(), t.data, v.size() * 4);
            fn(v, tensor_shape(t));
            std::vector<uint8_t> bytes(v.size() * 4);
            std::memcpy(bytes.data(), v.data(), bytes.size());
            w.add_tensor(t.name, t.type, tensor_shape(t), bytes);
            return true;
          }};
}

// Reverses the order of the outermost dimension's slices (the experts of a 3-D tensor, the
// expert rows of a 2-D bias or router).
inline void reverse_outer(std::vector<float>& v, const std::vector<int64_t>& ne) {
  const int64_t n_outer = ne.back();
  const size_t slice = v.size() / static_cast<size_t>(n_outer);
  std::vector<float> out(v.size());
  for (int64_t e = 0; e < n_outer; ++e)
    std::copy(v.begin() + static_cast<ptrdiff_t>(e * slice), v.begin() + static_cast<ptrdiff_t>((e + 1) * slice),
              out.begin() + static_cast<ptrdiff_t>((n_outer - 1 - e) * slice));
  v = std::move(out);
}

}  // namespace ubatch::test
