#include "model/binder.h"

#include <fmt/format.h>

namespace ubatch {

namespace {

// Finds a tensor and checks its shape [ne0, ne1] (ne1 = 1 for vectors).
Result<const gguf::TensorInfo*> binder_find(const gguf::File& f, const std::string& name, int64_t ne0, int64_t ne1) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return Status::error(fmt::format("model: missing tensor '{}'", name));
  const int64_t want_dims = ne1 == 1 ? 1 : 2;
  bool ok = t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1;
  if (!ok || t->n_dims > 2 || (want_dims == 2 && t->n_dims != 2))
    return Status::error(fmt::format("model: tensor '{}' has shape [{}, {}, {}, {}], expected [{}, {}]", name,
                                     t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0, ne1));
  return t;
}

}  // namespace

Status Binder::f32(const std::string& name, int64_t ne0, int64_t ne1, const float*& out) {
  Result<const gguf::TensorInfo*> t = binder_find(f_, name, ne0, ne1);
  if (!t) return t.status();
  if ((*t)->type != TensorType::F32)
    return Status::error(fmt::format("model: tensor '{}' has type {}, expected F32", name,
                                     tensor_type_name((*t)->type)));
  // Tensor data is aligned to general.alignment (>= 4 checked by the reader's alignment rules
  // for F32 data); floats are read in place from the mapping.
  if (reinterpret_cast<uintptr_t>((*t)->data) % alignof(float) != 0)
    return Status::error(fmt::format("model: tensor '{}' data is not 4-byte aligned", name));
  out = static_cast<const float*>((*t)->data);
  use(**t);
  return Status::ok();
}

Status Binder::vector(const std::string& name, int64_t n, const float*& out) { return f32(name, n, 1, out); }

Status Binder::optional_vector(const std::string& name, int64_t n, const float*& out) {
  if (!f_.find_tensor(name)) return Status::ok();
  return vector(name, n, out);
}

Status Binder::f32_matrix(const std::string& name, int64_t n_cols, int64_t n_rows, const float*& out) {
  return f32(name, n_cols, n_rows, out);
}

Status Binder::conv_taps(const std::string& name, int taps, int64_t channels, std::vector<float>& out) {
  const float* w = nullptr;
  if (Status s = f32(name, taps, channels, w); !s) return s;
  out.resize(static_cast<size_t>(channels) * static_cast<size_t>(taps));
  for (int64_t c = 0; c < channels; ++c)
    for (int j = 0; j < taps; ++j) out[static_cast<size_t>(j * channels + c)] = w[c * taps + j];
  return Status::ok();
}

Status Binder::matrix(const std::string& name, int64_t n_in, int64_t n_out, kernels::WeightView& out) {
  Result<const gguf::TensorInfo*> t = binder_find(f_, name, n_in, n_out);
  if (!t) return t.status();
  if (!kernels::can_matmul((*t)->type))
    return Status::error(fmt::format("model: tensor '{}' has unsupported type {}", name,
                                     tensor_type_name((*t)->type)));
  out.type = (*t)->type;
  out.data = (*t)->data;
  out.n_in = n_in;
  out.n_out = n_out;
  out.row_bytes = tensor_row_bytes(out.type, n_in);
  use(**t);
  return Status::ok();
}

Status Binder::experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert,
                       std::vector<kernels::WeightView>& out) {
  const gguf::TensorInfo* t = f_.find_tensor(name);
  if (!t) return Status::error(fmt::format("model: missing tensor '{}'", name));
  if (t->n_dims == 3 && t->ne[0] == n_in && t->ne[1] == n_out && t->ne[2] != n_expert)
    return Status::error(fmt::format("model: tensor '{}' holds {} experts but expert_count is {}", name, t->ne[2],
                                     n_expert));
  if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert || t->ne[3] != 1)
    return Status::error(fmt::format("model: tensor '{}' has shape [{}, {}, {}, {}], expected [{}, {}, {}]", name,
                                     t->ne[0], t->ne[1], t->ne[2], t->ne[3], n_in, n_out, n_expert));
  if (!kernels::can_matmul(t->type))
    return Status::error(fmt::format("model: tensor '{}' has unsupported type {}", name, tensor_type_name(t->type)));
  const size_t row_bytes = tensor_row_bytes(t->type, n_in);
  const size_t expert_bytes = row_bytes * static_cast<size_t>(n_out);
  UBATCH_CHECK(expert_bytes * static_cast<size_t>(n_expert) == t->n_bytes);
  out.assign(static_cast<size_t>(n_expert), kernels::WeightView{});
  for (int64_t e = 0; e < n_expert; ++e) {
    kernels::WeightView& v = out[static_cast<size_t>(e)];
    v.type = t->type;
    v.data = static_cast<const uint8_t*>(t->data) + expert_bytes * static_cast<size_t>(e);
    v.n_in = n_in;
    v.n_out = n_out;
    v.row_bytes = row_bytes;
  }
  use(*t);
  return Status::ok();
}

std::vector<std::string> Binder::unused() const {
  std::vector<std::string> out;
  for (const gguf::TensorInfo& t : f_.tensors())
    if (!used_.count(t.name)) out.push_back(t.name);
  return out;
}

void Binder::use(const gguf::TensorInfo& t) {
  if (used_.insert(t.name).second) bytes_ += t.n_bytes;
}

kernels::WeightView row_slice(const kernels::WeightView& w, int64_t row0, int64_t n_rows) {
  kernels::WeightView v = w;
  v.data = static_cast<const uint8_t*>(w.data) + w.row_bytes * static_cast<size_t>(row0);
  v.n_out = n_rows;
  return v;
}

}  // namespace ubatch
