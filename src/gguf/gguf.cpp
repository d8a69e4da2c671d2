// GGUF reader: mapping, parsing and validation (see gguf.h for the format and the contract).
//
// Every read goes through Parser, which checks the remaining byte count before touching the
// bytes, and every count read from the file is checked against the bytes that remain (count ×
// smallest possible element size) before anything is allocated from it. Errors name the file,
// the item being read and the byte offset where it starts.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace ubatch::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr size_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;
// Arrays of arrays may nest; deeper nesting than this is rejected (it only serves to exhaust
// the stack of a recursive reader).
constexpr int kMaxArrayDepth = 16;

bool is_known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

// Bytes of one element of a fixed-size value type; 0 for STRING and ARRAY.
size_t fixed_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return 0;
  }
  return 0;
}

// Smallest encoding of one element: strings need their u64 length, arrays their u32 type and
// u64 count.
size_t min_encoded_size(ValueType t) {
  if (t == ValueType::STRING) return 8;
  if (t == ValueType::ARRAY) return 12;
  return fixed_size(t);
}

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default: return false;
  }
}
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }
bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Fills the scalar fields of `v` from the little-endian element at p (a fixed-size type).
void decode_scalar(ValueType t, const uint8_t* p, Value& v) {
  switch (t) {
    case ValueType::UINT8: v.u = load<uint8_t>(p); v.i = static_cast<int64_t>(v.u); break;
    case ValueType::UINT16: v.u = load<uint16_t>(p); v.i = static_cast<int64_t>(v.u); break;
    case ValueType::UINT32: v.u = load<uint32_t>(p); v.i = static_cast<int64_t>(v.u); break;
    case ValueType::UINT64: v.u = load<uint64_t>(p); v.i = static_cast<int64_t>(v.u); break;
    case ValueType::INT8: v.i = load<int8_t>(p); v.u = static_cast<uint64_t>(v.i); break;
    case ValueType::INT16: v.i = load<int16_t>(p); v.u = static_cast<uint64_t>(v.i); break;
    case ValueType::INT32: v.i = load<int32_t>(p); v.u = static_cast<uint64_t>(v.i); break;
    case ValueType::INT64: v.i = load<int64_t>(p); v.u = static_cast<uint64_t>(v.i); break;
    case ValueType::FLOAT32: v.f = load<float>(p); break;
    case ValueType::FLOAT64: v.f = load<double>(p); break;
    case ValueType::BOOL: v.b = load<uint8_t>(p) != 0; v.i = v.b; v.u = v.b; break;
    case ValueType::STRING: case ValueType::ARRAY: break;
  }
}

// A bounds-checked little-endian reader over [base, base + size). Every read checks the
// remaining bytes first; a failed read leaves an error naming the item and offset.
class Parser {
 public:
  Parser(const std::string& path, const uint8_t* base, size_t size)
      : path_(path), base_(base), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* at(size_t off) const { return base_ + off; }

  Status error(size_t offset, std::string_view item, std::string_view what) const {
    return Status::error(fmt::format("gguf: {}: {} at offset {}: {}", path_, item, offset, what));
  }
  Status truncated(size_t offset, std::string_view item, uint64_t need) const {
    return error(offset, item,
                 fmt::format("truncated: needs {} bytes, only {} remain (file is {} bytes)", need,
                             size_ - offset, size_));
  }

  Status u32(uint32_t& out, std::string_view item) {
    if (remaining() < 4) return truncated(pos_, item, 4);
    out = load<uint32_t>(base_ + pos_);
    pos_ += 4;
    return Status::ok();
  }
  Status u64(uint64_t& out, std::string_view item) {
    if (remaining() < 8) return truncated(pos_, item, 8);
    out = load<uint64_t>(base_ + pos_);
    pos_ += 8;
    return Status::ok();
  }
  // A GGUF string: u64 length, then that many bytes (not NUL-terminated).
  Status string(std::string_view& out, std::string_view item) {
    const size_t start = pos_;
    uint64_t n = 0;
    if (Status s = u64(n, item); !s) return s;
    if (n > remaining()) {
      pos_ = start;
      return error(start, item,
                   fmt::format("truncated: string length {} runs past end of file ({} bytes "
                               "remain)", n, remaining()));
    }
    out = std::string_view(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return Status::ok();
  }
  // Skips n bytes known to be in range.
  void skip(size_t n) { pos_ += n; }

  // Reads a value of type t into *out (nullptr: validate and skip). `depth` counts enclosing
  // arrays.
  Status value(ValueType t, Value* out, std::string_view item, int depth) {
    const size_t start = pos_;
    if (t == ValueType::STRING) {
      std::string_view s;
      if (Status st = string(s, item); !st) return st;
      if (out) out->str = s;
      return Status::ok();
    }
    if (t != ValueType::ARRAY) {
      const size_t n = fixed_size(t);
      if (remaining() < n) return truncated(start, item, n);
      if (t == ValueType::BOOL && base_[pos_] > 1)
        return error(start, item, fmt::format("invalid bool byte {} (must be 0 or 1)", base_[pos_]));
      if (out) decode_scalar(t, base_ + pos_, *out);
      pos_ += n;
      return Status::ok();
    }
    // Array: u32 element type, u64 count, elements.
    if (depth >= kMaxArrayDepth)
      return error(start, item, fmt::format("arrays nested deeper than {}", kMaxArrayDepth));
    uint32_t elem_id = 0;
    uint64_t count = 0;
    if (Status s = u32(elem_id, item); !s) return s;
    if (!is_known_value_type(elem_id)) {
      pos_ = start;
      return error(start, item, fmt::format("unknown array element type {}", elem_id));
    }
    const auto elem = static_cast<ValueType>(elem_id);
    if (Status s = u64(count, item); !s) return s;
    const size_t min_size = min_encoded_size(elem);
    if (count > remaining() / min_size) {
      const size_t at = pos_;
      pos_ = start;
      return error(at, item,
                   fmt::format("truncated: array of {} {} needs at least {} bytes per element, "
                               "only {} bytes remain", count, value_type_name(elem), min_size,
                               remaining() - (at - start)));
    }
    const size_t data_start = pos_;
    if (out) {
      out->array_type = elem;
      out->array_size = count;
      out->array_data = base_ + data_start;
    }
    if (elem == ValueType::STRING) {
      if (out) out->strings.reserve(static_cast<size_t>(count));
      for (uint64_t k = 0; k < count; ++k) {
        const size_t elem_start = pos_;
        if (remaining() < 8)
          return error(elem_start, item,
                       fmt::format("truncated: element {} of {}: needs 8 bytes for the string "
                                   "length, only {} remain", k, count, remaining()));
        const uint64_t n = load<uint64_t>(base_ + pos_);
        if (n > remaining() - 8)
          return error(elem_start, item,
                       fmt::format("truncated: element {} of {}: string length {} runs past end "
                                   "of file ({} bytes remain)", k, count, n, remaining() - 8));
        if (out)
          out->strings.emplace_back(reinterpret_cast<const char*>(base_ + pos_ + 8),
                                    static_cast<size_t>(n));
        pos_ += 8 + static_cast<size_t>(n);
      }
      return Status::ok();
    }
    if (elem == ValueType::ARRAY) {
      // Arrays of arrays: validated element by element; the Value keeps only the outer count
      // and a pointer to the first inner array's encoding.
      for (uint64_t k = 0; k < count; ++k)
        if (Status s = value(ValueType::ARRAY, nullptr, item, depth + 1); !s) return s;
      return Status::ok();
    }
    const size_t bytes = static_cast<size_t>(count) * min_size;  // checked above
    if (elem == ValueType::BOOL) {
      for (size_t k = 0; k < bytes; ++k)
        if (base_[pos_ + k] > 1)
          return error(pos_ + k, item,
                       fmt::format("element {}: invalid bool byte {} (must be 0 or 1)", k,
                                   base_[pos_ + k]));
    }
    pos_ += bytes;
    return Status::ok();
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

// Overflow-checked a * b for non-negative int64.
bool mul_overflows(int64_t a, int64_t b, int64_t& out) { return __builtin_mul_overflow(a, b, &out); }

std::string quoted(std::string_view s) {
  // Short names (keys, tensor names) in error messages: printable ASCII as-is, the rest escaped,
  // at most 80 bytes.
  std::string out = "'";
  const size_t n = std::min<size_t>(s.size(), 80);
  for (size_t k = 0; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') out += static_cast<char>(c);
    else out += fmt::format("\\x{:02x}", c);
  }
  if (s.size() > n) out += fmt::format("...({} bytes)", s.size());
  return out + "'";
}

}  // namespace

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "u8";
    case ValueType::INT8: return "i8";
    case ValueType::UINT16: return "u16";
    case ValueType::INT16: return "i16";
    case ValueType::UINT32: return "u32";
    case ValueType::INT32: return "i32";
    case ValueType::FLOAT32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "u64";
    case ValueType::INT64: return "i64";
    case ValueType::FLOAT64: return "f64";
  }
  return "?";
}

double Value::array_f64(uint64_t k) const {
  UBATCH_CHECK(type == ValueType::ARRAY && k < array_size);
  const size_t n = fixed_size(array_type);
  UBATCH_CHECK(n != 0);
  Value v;
  decode_scalar(array_type, array_data + k * n, v);
  if (is_float(array_type)) return v.f;
  if (is_signed(array_type)) return static_cast<double>(v.i);
  return static_cast<double>(v.u);
}

int64_t Value::array_i64(uint64_t k) const {
  UBATCH_CHECK(type == ValueType::ARRAY && k < array_size);
  const size_t n = fixed_size(array_type);
  UBATCH_CHECK(n != 0);
  Value v;
  decode_scalar(array_type, array_data + k * n, v);
  if (is_float(array_type)) {
    // Saturating conversion: a cast of an out-of-range double is UB.
    if (!(v.f == v.f)) return 0;
    if (v.f >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
    if (v.f <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(v.f);
  }
  return v.i;
}

File::~File() {
  if (mapped_ && base_ != nullptr) munmap(const_cast<uint8_t*>(base_), size_);
}

void File::release_pages(const void* p, size_t n) const {
  if (!mapped_ || n == 0) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
  const auto base = reinterpret_cast<uintptr_t>(base_);
  if (begin < base || end > base + size_) return;
  const uintptr_t first = (begin + page - 1) & ~(page - 1), last = end & ~(page - 1);
  if (first < last) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

Result<std::unique_ptr<File>> File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("gguf: {}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::error(fmt::format("gguf: {}: cannot stat: {}", path, std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error(fmt::format("gguf: {}: not a regular file", path));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Status::error(fmt::format("gguf: {}: header at offset 0: truncated: file is empty", path));
  }
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    return Status::error(fmt::format("gguf: {}: mmap of {} bytes failed: {}", path, size, std::strerror(e)));
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  f->base_ = static_cast<const uint8_t*>(p);
  f->size_ = size;
  f->mapped_ = true;
  if (Status s = f->parse(); !s) return s;
  return f;
}

Result<std::unique_ptr<File>> File::from_bytes(const uint8_t* data, size_t size, std::string name) {
  std::unique_ptr<File> f(new File());
  f->path_ = std::move(name);
  f->owned_.assign(data, data + size);
  f->base_ = f->owned_.data();
  f->size_ = size;
  if (Status s = f->parse(); !s) return s;
  return f;
}

Status File::parse() {
  Parser r(path_, base_, size_);

  // Header: magic, version, counts.
  if (size_ < 4) return r.truncated(0, "header: magic", 4);
  uint32_t magic = 0;
  (void)r.u32(magic, "header: magic");
  if (magic != kMagic) {
    // The file's own bytes are never shown: the path may name any file (a link in
    // --models-dir), and its first bytes are none of the reader's business.
    return r.error(0, "header", "bad magic: not a GGUF file (it does not start with \"GGUF\")");
  }
  if (Status s = r.u32(version_, "header: version"); !s) return s;
  if (version_ != 2 && version_ != 3) {
    const bool swapped = version_ == 0x02000000u || version_ == 0x03000000u;
    return r.error(4, "header", fmt::format("unsupported version {}{} (only 2 and 3 are read)", version_,
                                            swapped ? ", a big-endian file" : ""));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  if (Status s = r.u64(n_tensors, "header: tensor count"); !s) return s;
  if (Status s = r.u64(n_kv, "header: metadata count"); !s) return s;
  // The smallest key/value pair takes 13 bytes (key length, type, one-byte value) and the
  // smallest tensor info 32 (name length, n_dims, one dimension, type, offset).
  if (n_kv > r.remaining() / 13)
    return r.error(16, "header", fmt::format("truncated or corrupt: metadata count {} cannot fit in the "
                                             "{} bytes that remain", n_kv, r.remaining()));
  if (n_tensors > r.remaining() / 32)
    return r.error(8, "header", fmt::format("truncated or corrupt: tensor count {} cannot fit in the "
                                            "{} bytes that remain", n_tensors, r.remaining()));

  // Metadata.
  // Reservations are capped: a hostile count may pass the bytes-remaining check yet still ask
  // for far more memory than the file holds; beyond the cap the vectors grow as entries parse.
  constexpr uint64_t kReserveCap = 1 << 16;
  metadata_.reserve(static_cast<size_t>(std::min(n_kv, kReserveCap)));
  key_index_.reserve(static_cast<size_t>(std::min(n_kv, kReserveCap)));
  size_t alignment_entry_offset = 0;
  alignment_ = kDefaultAlignment;
  for (uint64_t k = 0; k < n_kv; ++k) {
    const size_t entry_start = r.pos();
    std::string_view key;
    if (Status s = r.string(key, fmt::format("metadata entry #{}: key", k)); !s) return s;
    const std::string item = fmt::format("metadata {}", quoted(key));
    if (key.empty()) return r.error(entry_start, fmt::format("metadata entry #{}", k), "empty key");
    uint32_t type_id = 0;
    const size_t type_pos = r.pos();
    if (Status s = r.u32(type_id, item + ": value type"); !s) return s;
    if (!is_known_value_type(type_id))
      return r.error(type_pos, item, fmt::format("unknown value type {}", type_id));
    MetadataEntry e;
    e.key.assign(key);
    e.value.type = static_cast<ValueType>(type_id);
    if (Status s = r.value(e.value.type, &e.value, item, 0); !s) return s;
    if (!key_index_.emplace(key, metadata_.size()).second)
      return r.error(entry_start, item, "duplicate metadata key");
    if (key == "general.alignment") alignment_entry_offset = entry_start;
    metadata_.push_back(std::move(e));
  }

  if (const Value* a = find("general.alignment")) {
    if (!is_integer(a->type) || (is_signed(a->type) && a->i <= 0))
      return r.error(alignment_entry_offset, "metadata 'general.alignment'",
                     fmt::format("must be a positive integer, not {} {}", value_type_name(a->type),
                                 format_value(*a)));
    const uint64_t al = a->u;
    if (al == 0 || (al & (al - 1)) != 0 || al > (uint64_t{1} << 30))
      return r.error(alignment_entry_offset, "metadata 'general.alignment'",
                     fmt::format("{} is not a power of two in [1, 2^30]", al));
    alignment_ = static_cast<size_t>(al);
  }

  // Tensor infos.
  tensors_.reserve(static_cast<size_t>(std::min(n_tensors, kReserveCap)));
  tensor_index_.reserve(static_cast<size_t>(std::min(n_tensors, kReserveCap)));
  std::vector<size_t> offset_fields;  // where each tensor's offset lies in the file
  offset_fields.reserve(static_cast<size_t>(std::min(n_tensors, kReserveCap)));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const size_t info_start = r.pos();
    std::string_view name;
    if (Status s = r.string(name, fmt::format("tensor info #{}: name", k)); !s) return s;
    const std::string item = fmt::format("tensor #{} {}", k, quoted(name));
    if (name.empty()) return r.error(info_start, fmt::format("tensor #{}", k), "empty name");
    TensorInfo t;
    t.name.assign(name);
    uint32_t n_dims = 0;
    const size_t dims_pos = r.pos();
    if (Status s = r.u32(n_dims, item + ": n_dims"); !s) return s;
    if (n_dims == 0 || n_dims > kMaxDims)
      return r.error(dims_pos, item, fmt::format("n_dims {} outside [1, {}]", n_dims, kMaxDims));
    t.n_dims = static_cast<int>(n_dims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const size_t ne_pos = r.pos();
      uint64_t ne = 0;
      if (Status s = r.u64(ne, item + ": shape"); !s) return s;
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return r.error(ne_pos, item,
                       fmt::format("dimension {} is {} (must be in [1, 2^63))", d,
                                   static_cast<int64_t>(ne)));
      t.ne[d] = static_cast<int64_t>(ne);
      if (mul_overflows(n_elements, t.ne[d], n_elements))
        return r.error(ne_pos, item, "element count overflows int64 (dimension product too large)");
    }
    uint32_t type_id = 0;
    const size_t type_pos = r.pos();
    if (Status s = r.u32(type_id, item + ": type"); !s) return s;
    const TensorTypeTraits* tr = tensor_type_traits(type_id);
    if (tr == nullptr)
      return r.error(type_pos, item, fmt::format("unknown or unsupported tensor type {}", type_id));
    t.type = static_cast<TensorType>(type_id);
    if (t.ne[0] % tr->block_size != 0)
      return r.error(dims_pos, item,
                     fmt::format("ne[0] = {} is not a multiple of the {} block size {}", t.ne[0],
                                 tr->name, tr->block_size));
    int64_t n_bytes = 0;
    if (mul_overflows(n_elements / tr->block_size, tr->type_size, n_bytes))
      return r.error(dims_pos, item, "byte size overflows int64");
    t.n_bytes = static_cast<size_t>(n_bytes);
    const size_t off_pos = r.pos();
    if (Status s = r.u64(t.offset, item + ": offset"); !s) return s;
    if (t.offset % alignment_ != 0)
      return r.error(off_pos, item,
                     fmt::format("data offset {} is not a multiple of the alignment {}", t.offset,
                                 alignment_));
    offset_fields.push_back(off_pos);
    if (!tensor_index_.emplace(name, tensors_.size()).second)
      return r.error(info_start, item, "duplicate tensor name");
    tensors_.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment.
  const size_t infos_end = r.pos();
  const size_t pad = (alignment_ - infos_end % alignment_) % alignment_;
  data_offset_ = infos_end + pad;  // infos_end <= size_ and pad < 2^30: no overflow
  if (!tensors_.empty() && data_offset_ > size_)
    return r.error(infos_end, "data section",
                   fmt::format("truncated: data section would start at {}, past end of file ({} "
                               "bytes)", data_offset_, size_));
  const size_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (size_t k = 0; k < tensors_.size(); ++k) {
    TensorInfo& t = tensors_[k];
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      return r.error(offset_fields[k], fmt::format("tensor #{} {}", k, quoted(t.name)),
                     fmt::format("data at offset {} (+{} bytes) of the data section (which "
                                 "starts at {}) runs past end of file ({} bytes)",
                                 t.offset, t.n_bytes, data_offset_, size_));
    t.data = base_ + data_offset_ + t.offset;
  }
  return Status::ok();
}

const Value* File::find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string_view> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::STRING) return std::nullopt;
  return v->str;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v || !is_integer(v->type)) return std::nullopt;
  if (v->type == ValueType::UINT64 && v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return v->i;
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v || !is_float(v->type)) return std::nullopt;
  return v->f;
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::BOOL) return std::nullopt;
  return v->b;
}

std::optional<std::vector<std::string_view>> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::ARRAY || v->array_type != ValueType::STRING) return std::nullopt;
  return v->strings;
}

std::optional<std::vector<float>> File::get_f32_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::ARRAY || fixed_size(v->array_type) == 0 ||
      v->array_type == ValueType::BOOL)
    return std::nullopt;
  std::vector<float> out(static_cast<size_t>(v->array_size));
  if (v->array_type == ValueType::FLOAT32) {
    if (!out.empty()) std::memcpy(out.data(), v->array_data, out.size() * sizeof(float));
  } else {
    for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<float>(v->array_f64(k));
  }
  return out;
}

std::optional<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::ARRAY || !is_integer(v->array_type)) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(v->array_size));
  for (size_t k = 0; k < out.size(); ++k) out[k] = v->array_i64(k);
  return out;
}

namespace {

// Appends s quoted, with quotes, backslashes and control bytes escaped, cut after max_bytes
// (at a UTF-8 character boundary).
void append_quoted(std::string& out, std::string_view s, size_t max_bytes) {
  size_t n = s.size();
  bool cut = false;
  if (n > max_bytes) {
    n = max_bytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    cut = true;
  }
  out += '"';
  for (size_t k = 0; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
  if (cut) out += fmt::format("...({} bytes)", s.size());
}

void append_scalar(std::string& out, ValueType t, const Value& v) {
  if (t == ValueType::BOOL) out += v.b ? "true" : "false";
  else if (t == ValueType::FLOAT32) out += fmt::format("{}", static_cast<float>(v.f));  // 1e-06, not 9.99e-07
  else if (t == ValueType::FLOAT64) out += fmt::format("{}", v.f);
  else if (is_signed(t)) out += fmt::format("{}", v.i);
  else out += fmt::format("{}", v.u);
}

}  // namespace

std::string format_value(const Value& v, size_t max_items) {
  std::string out;
  if (v.type == ValueType::STRING) {
    append_quoted(out, v.str, 512);
    return out;
  }
  if (v.type != ValueType::ARRAY) {
    append_scalar(out, v.type, v);
    return out;
  }
  if (v.array_type == ValueType::ARRAY) return fmt::format("[... ({} arrays)]", v.array_size);
  const uint64_t shown = std::min<uint64_t>(v.array_size, max_items);
  out += '[';
  for (uint64_t k = 0; k < shown; ++k) {
    if (k) out += ", ";
    if (v.array_type == ValueType::STRING) {
      append_quoted(out, v.strings[static_cast<size_t>(k)], 64);
    } else {
      Value e;
      decode_scalar(v.array_type, v.array_data + k * fixed_size(v.array_type), e);
      append_scalar(out, v.array_type, e);
    }
  }
  if (shown < v.array_size) out += fmt::format(", ... ({} items)", v.array_size);
  out += ']';
  return out;
}

}  // namespace ubatch::gguf
