// Rewriting a GGUF file key by key and tensor by tensor: the tool of the mutation and
// malformed-file tests (test_context_archs.cpp, test_context_hybrid.cpp).
#pragma once

#include <cstdint>
#include <functional>
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

}  // namespace ubatch::test
