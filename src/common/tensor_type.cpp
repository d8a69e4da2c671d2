#include "common/tensor_type.h"

#include "common/status.h"

namespace ubatch {

namespace {
// Block sizes and byte sizes from the GGUF/ggml block definitions:
// Q4_0 {f16 d; u8 qs[16]}, Q4_1 {f16 d, m; u8 qs[16]}, Q5_0 {f16 d; u8 qh[4]; u8 qs[16]},
// Q5_1 {f16 d, m; u8 qh[4]; u8 qs[16]}, Q8_0 {f16 d; i8 qs[32]}, Q8_1 {f16 d, s; i8 qs[32]},
// Q2_K {u8 scales[16]; u8 qs[64]; f16 d, dmin}, Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d},
// Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}, Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]},
// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}, Q8_K {f32 d; i8 qs[256]; i16 bsums[16]},
// MXFP4 {u8 e (E8M0); u8 qs[16] (E2M1 nibbles)} (OCP Microscaling Formats v1.0).
struct Entry {
  uint32_t id;
  TensorTypeTraits traits;
};
constexpr Entry kTypes[] = {
    {0, {"F32", 1, 4}},       {1, {"F16", 1, 2}},       {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},    {6, {"Q5_0", 32, 22}},    {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},    {9, {"Q8_1", 32, 36}},    {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}}, {12, {"Q4_K", 256, 144}}, {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}}, {15, {"Q8_K", 256, 292}}, {24, {"I8", 1, 1}},
    {25, {"I16", 1, 2}},      {26, {"I32", 1, 4}},      {27, {"I64", 1, 8}},
    {28, {"F64", 1, 8}},      {30, {"BF16", 1, 2}},     {39, {"MXFP4", 32, 17}},
};
}  // namespace

const TensorTypeTraits* tensor_type_traits(uint32_t type_id) {
  for (const Entry& e : kTypes)
    if (e.id == type_id) return &e.traits;
  return nullptr;
}

size_t tensor_row_bytes(TensorType t, int64_t n) {
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(t));
  UBATCH_CHECK(tr != nullptr);
  UBATCH_CHECK(n % tr->block_size == 0);
  return static_cast<size_t>(n / tr->block_size * tr->type_size);
}

}  // namespace ubatch
