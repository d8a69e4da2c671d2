#include "gguf/gguf_writer.h"

#include <cstring>

#include "common/status.h"

namespace ubatch::gguf {

std::vector<uint8_t> Writer::encode_string(std::string_view s) {
  std::vector<uint8_t> out;
  put<uint64_t>(out, s.size());
  append(out, s.data(), s.size());
  return out;
}

std::vector<uint8_t> Writer::encode_array(ValueType elem_type, uint64_t count,
                                          const std::vector<uint8_t>& elems) {
  std::vector<uint8_t> out;
  put<uint32_t>(out, static_cast<uint32_t>(elem_type));
  put<uint64_t>(out, count);
  append(out, elems);
  return out;
}

void Writer::add_uint(std::string_view key, ValueType type, uint64_t v) {
  std::vector<uint8_t> e;
  switch (type) {
    case ValueType::UINT8: put<uint8_t>(e, static_cast<uint8_t>(v)); break;
    case ValueType::UINT16: put<uint16_t>(e, static_cast<uint16_t>(v)); break;
    case ValueType::UINT32: put<uint32_t>(e, static_cast<uint32_t>(v)); break;
    case ValueType::UINT64: put<uint64_t>(e, v); break;
    default: UBATCH_CHECK_MSG(false, "add_uint: not an unsigned integer type");
  }
  add_raw(key, static_cast<uint32_t>(type), e);
}

void Writer::add_int(std::string_view key, ValueType type, int64_t v) {
  std::vector<uint8_t> e;
  switch (type) {
    case ValueType::INT8: put<int8_t>(e, static_cast<int8_t>(v)); break;
    case ValueType::INT16: put<int16_t>(e, static_cast<int16_t>(v)); break;
    case ValueType::INT32: put<int32_t>(e, static_cast<int32_t>(v)); break;
    case ValueType::INT64: put<int64_t>(e, v); break;
    default: UBATCH_CHECK_MSG(false, "add_int: not a signed integer type");
  }
  add_raw(key, static_cast<uint32_t>(type), e);
}

void Writer::add_f32(std::string_view key, float v) {
  std::vector<uint8_t> e;
  put<float>(e, v);
  add_raw(key, static_cast<uint32_t>(ValueType::FLOAT32), e);
}

void Writer::add_f64(std::string_view key, double v) {
  std::vector<uint8_t> e;
  put<double>(e, v);
  add_raw(key, static_cast<uint32_t>(ValueType::FLOAT64), e);
}

void Writer::add_bool(std::string_view key, bool v) {
  add_raw(key, static_cast<uint32_t>(ValueType::BOOL), {static_cast<uint8_t>(v ? 1 : 0)});
}

void Writer::add_string(std::string_view key, std::string_view v) {
  add_raw(key, static_cast<uint32_t>(ValueType::STRING), encode_string(v));
}

void Writer::add_array(std::string_view key, ValueType elem_type, uint64_t count,
                       const std::vector<uint8_t>& elem_bytes) {
  add_raw(key, static_cast<uint32_t>(ValueType::ARRAY), encode_array(elem_type, count, elem_bytes));
}

void Writer::add_string_array(std::string_view key, const std::vector<std::string>& v) {
  std::vector<uint8_t> elems;
  for (const std::string& s : v) {
    std::vector<uint8_t> e = encode_string(s);
    append(elems, e);
  }
  add_array(key, ValueType::STRING, v.size(), elems);
}

void Writer::add_raw(std::string_view key, uint32_t type_id, const std::vector<uint8_t>& encoded) {
  kvs_.push_back({std::string(key), type_id, encoded});
}

namespace {

size_t fixed_elem_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;
  }
}

// Bytes of the array encoding at p (u32 type, u64 count, elements); p comes from a File, so
// the encoding was validated when it was opened.
size_t array_encoding_size(const uint8_t* p) {
  uint32_t type = 0;
  uint64_t count = 0;
  std::memcpy(&type, p, 4);
  std::memcpy(&count, p + 4, 8);
  size_t n = 12;
  const auto t = static_cast<ValueType>(type);
  if (t == ValueType::STRING) {
    for (uint64_t k = 0; k < count; ++k) {
      uint64_t len = 0;
      std::memcpy(&len, p + n, 8);
      n += 8 + static_cast<size_t>(len);
    }
  } else if (t == ValueType::ARRAY) {
    for (uint64_t k = 0; k < count; ++k) n += array_encoding_size(p + n);
  } else {
    n += static_cast<size_t>(count) * fixed_elem_size(t);
  }
  return n;
}

}  // namespace

void Writer::add_value(std::string_view key, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64:
      add_uint(key, v.type, v.u);
      return;
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      add_int(key, v.type, v.i);
      return;
    case ValueType::FLOAT32: add_f32(key, static_cast<float>(v.f)); return;
    case ValueType::FLOAT64: add_f64(key, v.f); return;
    case ValueType::BOOL: add_bool(key, v.b); return;
    case ValueType::STRING: add_string(key, v.str); return;
    case ValueType::ARRAY: break;
  }
  std::vector<uint8_t> elems;
  if (v.array_type == ValueType::STRING) {
    for (std::string_view s : v.strings) append(elems, encode_string(s));
  } else if (v.array_type == ValueType::ARRAY) {
    size_t n = 0;
    for (uint64_t k = 0; k < v.array_size; ++k) n += array_encoding_size(v.array_data + n);
    append(elems, v.array_data, n);
  } else {
    append(elems, v.array_data, static_cast<size_t>(v.array_size) * fixed_elem_size(v.array_type));
  }
  add_array(key, v.array_type, v.array_size, elems);
}

Writer Writer::from_file(const File& f) {
  Writer w(f.version());
  w.alignment_ = f.alignment();
  for (const MetadataEntry& e : f.metadata()) w.add_value(e.key, e.value);
  for (const TensorInfo& t : f.tensors()) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                 std::vector<uint8_t>(p, p + t.n_bytes));
  }
  return w;
}

void Writer::set_alignment(uint32_t alignment) {
  alignment_ = alignment;
  add_uint("general.alignment", ValueType::UINT32, alignment);
}

void Writer::add_tensor(std::string_view name, TensorType type, const std::vector<int64_t>& ne,
                        const std::vector<uint8_t>& data) {
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(type));
  UBATCH_CHECK(tr != nullptr && !ne.empty());
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  UBATCH_CHECK(n % tr->block_size == 0);
  const size_t n_bytes = static_cast<size_t>(n / tr->block_size * tr->type_size);
  UBATCH_CHECK(data.empty() || data.size() == n_bytes);
  tensors_.push_back({std::string(name), static_cast<uint32_t>(type), ne, data, n_bytes});
}

std::vector<uint8_t> Writer::bytes(Layout* layout) const {
  const size_t al = alignment_ == 0 ? 1 : alignment_;
  auto pad_to = [al](std::vector<uint8_t>& out) {
    while (out.size() % al != 0) out.push_back(0);
  };
  std::vector<uint8_t> out;
  Layout lay;
  append(out, "GGUF", 4);
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kvs_.size());
  for (const Kv& kv : kvs_) {
    KvLayout k;
    k.key_len = out.size();
    std::vector<uint8_t> key = encode_string(kv.key);
    append(out, key);
    k.type = out.size();
    put<uint32_t>(out, kv.type);
    k.value = out.size();
    append(out, kv.encoded);
    lay.kv.push_back(k);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const Tensor& t : tensors_) {
    TensorLayout tl;
    tl.name_len = out.size();
    std::vector<uint8_t> name = encode_string(t.name);
    append(out, name);
    tl.n_dims = out.size();
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    tl.ne = out.size();
    for (int64_t d : t.ne) put<uint64_t>(out, static_cast<uint64_t>(d));
    tl.type = out.size();
    put<uint32_t>(out, t.type);
    tl.offset = out.size();
    put<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset += (t.n_bytes + al - 1) / al * al;
    lay.tensors.push_back(tl);
  }
  lay.infos_end = out.size();
  if (!tensors_.empty()) pad_to(out);
  lay.data_offset = (out.size() + al - 1) / al * al;
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    if (t.data.empty()) out.resize(out.size() + t.n_bytes, 0);
    else append(out, t.data);
    if (k + 1 < tensors_.size()) pad_to(out);
  }
  if (layout) *layout = std::move(lay);
  return out;
}

}  // namespace ubatch::gguf
