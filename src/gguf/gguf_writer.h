// Building GGUF images in memory: for tests (synthetic models, hostile-input mutations) and
// small tools. Writes the layout described in gguf.h (spec:
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), little-endian, version 2 or 3.
//
// The writer does not validate: it writes what it is told (duplicate keys, any type ids), so
// tests can build broken files on purpose. bytes() also reports where each field landed
// (Layout) so a test can corrupt one field precisely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/tensor_type.h"
#include "gguf/gguf.h"

namespace ubatch::gguf {

class Writer {
 public:
  // Byte offsets (from the start of the image) of the fields bytes() wrote.
  struct KvLayout {
    size_t key_len = 0;  // u64 key length (key bytes follow)
    size_t type = 0;     // u32 value type
    size_t value = 0;    // value encoding (for arrays: u32 element type, u64 count, elements)
  };
  struct TensorLayout {
    size_t name_len = 0;  // u64 name length (name bytes follow)
    size_t n_dims = 0;    // u32
    size_t ne = 0;        // u64 ne[n_dims]
    size_t type = 0;      // u32
    size_t offset = 0;    // u64
  };
  struct Layout {
    size_t n_tensors = 8, n_kv = 16;  // u64 counts in the header
    std::vector<KvLayout> kv;
    std::vector<TensorLayout> tensors;
    size_t infos_end = 0;    // end of the tensor infos (before padding)
    size_t data_offset = 0;  // start of the data section
  };

  explicit Writer(uint32_t version = 3) : version_(version) {}

  // Scalars and strings. `type` says how the value is encoded; v is converted to it.
  void add_uint(std::string_view key, ValueType type, uint64_t v);
  void add_int(std::string_view key, ValueType type, int64_t v);
  void add_f32(std::string_view key, float v);
  void add_f64(std::string_view key, double v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  // Arrays of fixed-size elements, given as already-encoded little-endian bytes
  // (elem_bytes.size() must be count × element size), of strings, or any raw value encoding
  // (after the type id; e.g. an array of arrays built with encode_array()).
  void add_array(std::string_view key, ValueType elem_type, uint64_t count,
                 const std::vector<uint8_t>& elem_bytes);
  void add_string_array(std::string_view key, const std::vector<std::string>& v);
  void add_raw(std::string_view key, uint32_t type_id, const std::vector<uint8_t>& encoded);
  // A parsed value, re-encoded as it was in its file (arrays of arrays included).
  void add_value(std::string_view key, const Value& v);
  // general.alignment as u32 (also used to place tensor data).
  void set_alignment(uint32_t alignment);

  // A writer holding everything `f` holds: version, metadata in order, tensors in order with
  // their data. For a file written the usual way (each tensor's data padded to the alignment,
  // in table order) bytes() reproduces the file exactly — handy to make modified copies of a
  // model in tests.
  static Writer from_file(const File& f);

  // A tensor of the given shape (ne[0] innermost); `data` must hold its bytes (or be empty:
  // zeros are written). Data is placed at the next aligned offset in the data section.
  void add_tensor(std::string_view name, TensorType type, const std::vector<int64_t>& ne,
                  const std::vector<uint8_t>& data = {});

  std::vector<uint8_t> bytes(Layout* layout = nullptr) const;

  // Encoding helpers: one array value (u32 element type, u64 count, elements).
  static std::vector<uint8_t> encode_array(ValueType elem_type, uint64_t count,
                                           const std::vector<uint8_t>& elems);
  static std::vector<uint8_t> encode_string(std::string_view s);
  static void append(std::vector<uint8_t>& out, const void* p, size_t n) {
    const size_t old = out.size();
    out.resize(old + n);
    if (n != 0) std::memcpy(out.data() + old, p, n);
  }
  static void append(std::vector<uint8_t>& out, const std::vector<uint8_t>& v) {
    append(out, v.data(), v.size());
  }
  template <typename T>
  static void put(std::vector<uint8_t>& out, T v) {
    append(out, &v, sizeof(T));
  }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> encoded;
  };
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
    size_t n_bytes;
  };
  uint32_t version_;
  size_t alignment_ = 32;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace ubatch::gguf
