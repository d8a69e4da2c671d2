// Tensor element types and their block layouts.
//
// Numeric ids are those of the GGUF format (ggml_type in the GGUF spec,
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), so a GGUF tensor's type field
// maps directly. Quantized types store values in blocks of block_size() elements taking
// type_size() bytes; a row of n elements (n a multiple of block_size) takes
// n / block_size * type_size bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ubatch {

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,  // OCP Microscaling FP4: 32 E2M1 values sharing one E8M0 scale (kernels/quant.h)
};

struct TensorTypeTraits {
  std::string_view name;  // "Q4_K", as the GGUF spec spells it
  int64_t block_size;     // elements per block (1 for plain types)
  int64_t type_size;      // bytes per block
};

// Traits of a type id, or nullptr when the id is not one this build knows (unknown or
// unsupported types such as the IQ* family). Safe to call with any 32-bit value.
const TensorTypeTraits* tensor_type_traits(uint32_t type_id);

inline std::string_view tensor_type_name(TensorType t) {
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(t));
  return tr ? tr->name : std::string_view("?");
}

// Bytes of one row of n elements; n must be a multiple of the block size (checked).
size_t tensor_row_bytes(TensorType t, int64_t n);

}  // namespace ubatch
