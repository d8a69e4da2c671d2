// libFuzzer entry for the GGUF reader (built with -DUBATCH_FUZZ=ON; docs/FUZZING.md).
//
// Each input is parsed as a GGUF image; an accepted image has every accessor exercised (typed
// getters, array elements, formatting, tensor data read byte by byte), so ASan/UBSan see any
// out-of-bounds read or undefined arithmetic the validation let through.
//
// Build and run (from the repository root): scripts/fuzz.sh --seconds 300 gguf_fuzz, or by hand
//   CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DUBATCH_FUZZ=ON -DUBATCH_BUILD_TESTS=OFF
//   cmake --build build-fuzz --target gguf_fuzz
//   build-fuzz/fuzz/gguf_fuzz -max_len=65536 -max_total_time=300 build-fuzz/corpus/gguf_fuzz fuzz/corpus/gguf_fuzz
// The seed corpus (fuzz/corpus/gguf_fuzz/small.gguf) uses every value type; an empty input is
// also replaced by a synthetic seed of the same kind (see seed() below).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

using namespace ubatch;
using namespace ubatch::gguf;

namespace {

// A small valid image covering every value type, nested arrays and a few tensors.
std::vector<uint8_t> seed() {
  Writer w(3);
  w.add_string("general.architecture", "fuzz");
  w.add_uint("a.u8", ValueType::UINT8, 1);
  w.add_int("a.i16", ValueType::INT16, -2);
  w.add_uint("a.u32", ValueType::UINT32, 3);
  w.add_int("a.i64", ValueType::INT64, -4);
  w.add_f32("a.f32", 0.5f);
  w.add_f64("a.f64", 0.25);
  w.add_bool("a.b", true);
  w.add_string_array("a.s", {"x", "yy"});
  std::vector<uint8_t> inner = Writer::encode_array(ValueType::INT32, 1, {1, 0, 0, 0});
  w.add_array("a.n", ValueType::ARRAY, 1, inner);
  w.add_array("a.f", ValueType::FLOAT32, 1, {0, 0, 128, 63});
  w.set_alignment(16);
  w.add_tensor("t.f32", TensorType::F32, {4, 2});
  w.add_tensor("t.q8", TensorType::Q8_0, {32});
  return w.bytes();
}

volatile uint8_t g_sink;

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed_value);
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// An empty input is replaced by the synthetic seed, so mutation starts from a valid file.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int /*seed_value*/) {
  if (size == 0) {
    const std::vector<uint8_t> s = seed();
    if (s.size() <= max_size) {
      std::memcpy(data, s.data(), s.size());
      return s.size();
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = File::from_bytes(data, size, "fuzz");
  if (!f.is_ok()) {
    if (f.message().empty()) __builtin_trap();
    return 0;
  }
  const File& g = **f;
  uint8_t acc = 0;
  for (const MetadataEntry& e : g.metadata()) {
    const Value& v = e.value;
    (void)format_value(v, 4);
    (void)g.get_int(e.key);
    (void)g.get_float(e.key);
    (void)g.get_string(e.key);
    (void)g.get_bool(e.key);
    (void)g.get_int_array(e.key);
    (void)g.get_f32_array(e.key);
    if (v.type == ValueType::STRING)
      for (char c : v.str) acc ^= static_cast<uint8_t>(c);
    if (v.type == ValueType::ARRAY && v.array_type == ValueType::STRING)
      for (std::string_view s : v.strings)
        for (char c : s) acc ^= static_cast<uint8_t>(c);
  }
  for (const TensorInfo& t : g.tensors()) {
    if (g.find_tensor(t.name) != &t) __builtin_trap();
    const auto* p = static_cast<const uint8_t*>(t.data);
    for (size_t k = 0; k < t.n_bytes; ++k) acc ^= p[k];
  }
  // Round trip: what was accepted re-encodes to an image that parses the same way.
  const std::vector<uint8_t> again = Writer::from_file(g).bytes();
  auto h = File::from_bytes(again.data(), again.size(), "fuzz-again");
  if (!h.is_ok() || h.value()->metadata().size() != g.metadata().size() ||
      h.value()->tensors().size() != g.tensors().size())
    __builtin_trap();
  g_sink = acc;
  return 0;
}
