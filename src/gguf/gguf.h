// Reading GGUF files (versions 2 and 3), memory-mapped.
//
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md — little-endian header
// {magic "GGUF", u32 version, u64 n_tensors, u64 n_kv}, then n_kv metadata pairs
// {string key, u32 value_type, value}, then n_tensors tensor infos {string name, u32 n_dims,
// u64 ne[n_dims], u32 type, u64 offset}, then padding to `general.alignment` (default 32)
// and the tensor data section; each tensor's offset is relative to that section.
//
// open() validates everything before returning (bad magic, unsupported version, truncation,
// string/array lengths past the end, unknown value or tensor types, dimension overflow,
// tensor data outside the file or misaligned, duplicate keys or tensor names) and reports the
// first problem as an error naming the file, the item and the offset. It never reads out of
// bounds, whatever the bytes. After a successful open, every accessor is safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/tensor_type.h"

namespace ubatch::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars are widened (integers to int64/uint64, floats to double);
// strings and arrays of strings are views into the mapped file; numeric arrays keep a pointer
// to their little-endian elements in the file.
struct Value {
  ValueType type = ValueType::UINT8;
  ValueType array_type = ValueType::UINT8;  // element type when type == ARRAY
  uint64_t array_size = 0;                  // elements when type == ARRAY
  // Arrays of arrays (array_type == ARRAY) are validated to any depth up to 16, but only
  // summarised here: array_size is the outer count and array_data points at the first inner
  // array's encoding (u32 type, u64 count, elements); `strings` stays empty.
  int64_t i = 0;                            // any integer type (UINT64 above INT64_MAX wraps; see u)
  uint64_t u = 0;                           // any unsigned integer type
  double f = 0;                             // FLOAT32 / FLOAT64
  bool b = false;                           // BOOL
  std::string_view str;                     // STRING
  std::vector<std::string_view> strings;    // ARRAY of STRING
  const uint8_t* array_data = nullptr;      // ARRAY of numbers/bools: raw elements

  // Numeric array element k as double / int64 (k < array_size, numeric array_type).
  double array_f64(uint64_t k) const;
  int64_t array_i64(uint64_t k) const;
};

struct MetadataEntry {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::F32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;           // from the start of the data section
  const void* data = nullptr;    // into the mapping
  size_t n_bytes = 0;
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class File {
 public:
  // Maps and validates `path`. Errors name the file and what was wrong.
  static Result<std::unique_ptr<File>> open(const std::string& path);
  // Validates an in-memory image (copied); used by tests and fuzzing.
  static Result<std::unique_ptr<File>> from_bytes(const uint8_t* data, size_t size,
                                                  std::string name = "<memory>");
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  // Start of the tensor data section (a multiple of alignment()). In a file without tensors
  // it may lie past file_size() (vocab-only files end right after the metadata).
  size_t data_offset() const { return data_offset_; }

  const std::vector<MetadataEntry>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;
  // Typed getters: nullopt when the key is absent or has another type (integers convert
  // between integer types, floats accept FLOAT32/FLOAT64).
  std::optional<std::string_view> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // Arrays: nullopt when absent or not an array of that kind.
  std::optional<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_f32_array(std::string_view key) const;   // any numeric
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;  // any integer

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

  // Tells the kernel that bytes [p, p + n) of a mapped file will not be needed soon: the
  // whole pages inside the range leave the process's resident memory (madvise
  // MADV_DONTNEED). The bytes stay readable — a later read brings them back from the file —
  // so this never changes what the accessors return. No-op for in-memory images.
  void release_pages(const void* p, size_t n) const;

 private:
  File() = default;
  Status parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;            // base_ is an mmap (else owned_ holds the bytes)
  std::vector<uint8_t> owned_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<MetadataEntry> metadata_;
  std::vector<TensorInfo> tensors_;
  // Name -> index; the views point into the mapping (stable for the File's lifetime).
  std::unordered_map<std::string_view, size_t> key_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// A one-line rendering of a value for `ubatch info`: scalars as-is, strings quoted,
// arrays longer than max_items summarised as "[a, b, c, ... (N items)]".
std::string format_value(const Value& v, size_t max_items = 8);

}  // namespace ubatch::gguf
