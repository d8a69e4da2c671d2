// Binds a GGUF file's tensors to a model's weights by name, checking each tensor's shape and
// type, and remembers which tensors were used so that loading can refuse a file with tensors
// nothing reads (tensor names and shapes: the GGUF spec,
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md, and each block's header).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"

namespace ubatch {

class Binder {
 public:
  explicit Binder(const gguf::File& f) : f_(f) {}

  // An F32 vector of n elements. Errors: missing (named), other shape or type, misaligned data.
  Status vector(const std::string& name, int64_t n, const float*& out);
  // An optional vector: absent leaves out null.
  Status optional_vector(const std::string& name, int64_t n, const float*& out);
  // An F32 matrix [n_rows, n_cols] (ne = {n_cols, n_rows}) read in place, e.g. convolution taps.
  Status f32_matrix(const std::string& name, int64_t n_cols, int64_t n_rows, const float*& out);
  // Causal-convolution taps stored [channels, taps] (ne = {taps, channels}), copied tap-major
  // into out ([taps][channels], the layout of kernels::conv1d_step).
  Status conv_taps(const std::string& name, int taps, int64_t channels, std::vector<float>& out);
  // A weight matrix y = W·x with x of n_in and y of n_out elements (ne = {n_in, n_out}), of any
  // type the matmul kernels take.
  Status matrix(const std::string& name, int64_t n_in, int64_t n_out, kernels::WeightView& out);

  // The experts of a mixture-of-experts layer: a 3-D tensor ne = {n_in, n_out, n_expert},
  // expert e the e-th contiguous [n_out, n_in] matrix, bound as n_expert weight views (out[e])
  // so that each is packed and multiplied on its own. Types: those of matrix() (MXFP4
  // among them). Errors name the tensor; a third
  // dimension other than n_expert says that it disagrees with `<arch>.expert_count`.
  Status experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert,
                 std::vector<kernels::WeightView>& out);

  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  const gguf::File& file() const { return f_; }
  // Bytes of every tensor bound so far.
  size_t bytes() const { return bytes_; }
  // Every tensor of the file that no binding used.
  std::vector<std::string> unused() const;

 private:
  Status f32(const std::string& name, int64_t ne0, int64_t ne1, const float*& out);
  void use(const gguf::TensorInfo& t);
  const gguf::File& f_;
  std::unordered_set<std::string> used_;
  size_t bytes_ = 0;
};

// Rows [row0, row0 + n_rows) of a matrix as a matrix of their own (a fused tensor's parts).
kernels::WeightView row_slice(const kernels::WeightView& w, int64_t row0, int64_t n_rows);

}  // namespace ubatch
