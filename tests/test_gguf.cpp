// GGUF reader: the reference files load with the facts we know about them, the default model
// loads, and synthetic files (v2 and v3, every value type, nested arrays, custom alignment)
// round-trip through the writer and the reader.
#include <gtest/gtest.h>

#include <algorithm>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "support.h"

namespace ubatch::gguf {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> gguf_files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".gguf") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Checks that hold for every valid file: tensor data inside the file, aligned, sizes agree
// with the type's block layout, names indexed.
void expect_consistent(const File& f) {
  EXPECT_TRUE(f.version() == 2 || f.version() == 3);
  EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
  const auto* base = static_cast<const uint8_t*>(f.tensors().empty() ? nullptr : f.tensors()[0].data) -
                     (f.tensors().empty() ? 0 : f.data_offset() + f.tensors()[0].offset);
  for (const TensorInfo& t : f.tensors()) {
    const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(t.type));
    ASSERT_NE(tr, nullptr) << t.name;
    EXPECT_GE(t.n_dims, 1);
    EXPECT_LE(t.n_dims, 4);
    EXPECT_EQ(t.n_bytes, static_cast<size_t>(t.n_elements() / tr->block_size * tr->type_size));
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_LE(f.data_offset() + t.offset + t.n_bytes, f.file_size()) << t.name;
    EXPECT_EQ(static_cast<const uint8_t*>(t.data), base + f.data_offset() + t.offset) << t.name;
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
  for (const MetadataEntry& e : f.metadata()) EXPECT_EQ(f.find(e.key), &e.value) << e.key;
  EXPECT_EQ(f.find("no.such.key"), nullptr);
  EXPECT_EQ(f.find_tensor("no.such.tensor"), nullptr);
}

TEST(GgufReference, AllModelsLoad) {
  UBATCH_REQUIRE_REFERENCE();
  const std::vector<std::string> files = gguf_files_in(test::reference_path("models"));
  ASSERT_FALSE(files.empty());
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    auto f = File::open(path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    expect_consistent(**f);
    const std::string arch(f.value()->get_string("general.architecture").value_or(""));
    EXPECT_TRUE(arch == "llama" || arch == "gemma3" || arch == "qwen2" || arch == "qwen3" || arch == "phi3" ||
                arch == "gemma2" || arch == "smollm3")
        << arch;
    EXPECT_EQ(f.value()->get_int(arch + ".embedding_length"), 256);
    auto tokens = f.value()->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.has_value());
    EXPECT_EQ(tokens->size(), 512u);
    EXPECT_EQ((*tokens)[0], "<unk>");
    EXPECT_EQ((*tokens)[1], "<s>");
    EXPECT_EQ((*tokens)[3], "<0x00>");
    EXPECT_EQ((*tokens)[258], "<0xFF>");
    auto scores = f.value()->get_f32_array("tokenizer.ggml.scores");
    ASSERT_TRUE(scores.has_value());
    EXPECT_EQ(scores->size(), 512u);
    auto types = f.value()->get_int_array("tokenizer.ggml.token_type");
    ASSERT_TRUE(types.has_value());
    EXPECT_EQ(types->size(), 512u);
    const TensorInfo* embd = f.value()->find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->n_dims, 2);
    EXPECT_EQ(embd->ne[0], 256);
    EXPECT_EQ(embd->ne[1], 512);
  }
}

// Re-encoding every value and tensor reproduces the reference files byte for byte: the reader
// lost nothing and put every field where the file has it.
TEST(GgufReference, RewriteIsByteIdentical) {
  UBATCH_REQUIRE_REFERENCE();
  std::vector<std::string> files = gguf_files_in(test::reference_path("models"));
  for (const std::string& p : gguf_files_in(test::reference_path("tokenizer"))) files.push_back(p);
  ASSERT_FALSE(files.empty());
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    auto f = File::open(path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    const std::vector<uint8_t> original = test::read_file(path);
    std::vector<uint8_t> rewritten = Writer::from_file(**f).bytes();
    // A vocabulary-only file may or may not pad its end to the alignment (the data section it
    // would start); the writer does not. Anything else must match byte for byte.
    if (f.value()->tensors().empty() && original.size() > rewritten.size() &&
        original.size() - rewritten.size() < f.value()->alignment() &&
        std::all_of(original.begin() + rewritten.size(), original.end(), [](uint8_t b) { return b == 0; }))
      rewritten.resize(original.size(), 0);
    ASSERT_EQ(rewritten.size(), original.size());
    EXPECT_TRUE(rewritten == original);
  }
}

TEST(GgufReference, TinyLlamaFacts) {
  UBATCH_REQUIRE_REFERENCE();
  auto f = File::open(test::reference_path("models/tiny-llama-f32.gguf"));
  ASSERT_TRUE(f.is_ok()) << f.message();
  const File& g = **f;
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.embedding_length"), 256);
  EXPECT_EQ(g.get_int("llama.block_count"), 3);
  EXPECT_EQ(g.get_int("llama.attention.head_count"), 4);
  EXPECT_EQ(g.get_int("llama.attention.head_count_kv"), 2);
  EXPECT_EQ(g.get_int("llama.feed_forward_length"), 512);
  auto eps = g.get_float("llama.attention.layer_norm_rms_epsilon");
  ASSERT_TRUE(eps.has_value());
  EXPECT_NEAR(*eps, 1e-5, 1e-9);
  // Wrong-type lookups give nullopt, not a conversion.
  EXPECT_FALSE(g.get_int("general.architecture").has_value());
  EXPECT_FALSE(g.get_string("llama.block_count").has_value());
  EXPECT_FALSE(g.get_float("llama.block_count").has_value());
  EXPECT_FALSE(g.get_string_array("tokenizer.ggml.scores").has_value());
  EXPECT_FALSE(g.get_int_array("tokenizer.ggml.scores").has_value());

  const TensorInfo* q = g.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, TensorType::F32);
  EXPECT_EQ(q->n_dims, 2);
  EXPECT_EQ(q->ne[0], 256);
  EXPECT_EQ(q->ne[1], 256);
  EXPECT_EQ(q->n_bytes, 256u * 256u * 4u);
  const TensorInfo* k = g.find_tensor("blk.2.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->ne[0], 256);
  EXPECT_EQ(k->ne[1], 128);  // 2 KV heads of 64
  const TensorInfo* norm = g.find_tensor("blk.1.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->n_dims, 1);
  EXPECT_EQ(norm->ne[0], 256);
  // A norm weight of a freshly written model is a plain float vector with finite values.
  const auto* w = static_cast<const float*>(norm->data);
  for (int i = 0; i < 256; ++i) EXPECT_TRUE(std::isfinite(w[i]));
  EXPECT_NE(g.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(g.find_tensor("blk.3.attn_q.weight"), nullptr);
}

TEST(GgufReference, QuantizedTypes) {
  UBATCH_REQUIRE_REFERENCE();
  struct Case {
    const char* file;
    TensorType type;
  };
  const Case cases[] = {
      {"tiny-llama-q4_0.gguf", TensorType::Q4_0}, {"tiny-llama-q8_0.gguf", TensorType::Q8_0},
      {"tiny-llama-q6_k.gguf", TensorType::Q6_K}, {"tiny-llama-bf16.gguf", TensorType::BF16},
      {"tiny-llama-f16.gguf", TensorType::F16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    auto f = File::open(test::reference_path(std::string("models/") + c.file));
    ASSERT_TRUE(f.is_ok()) << f.message();
    const TensorInfo* q = f.value()->find_tensor("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, c.type);
    EXPECT_EQ(q->n_bytes, tensor_row_bytes(c.type, 256) * 256);
  }
}

TEST(GgufReference, TinyGemma3Facts) {
  UBATCH_REQUIRE_REFERENCE();
  auto f = File::open(test::reference_path("models/tiny-gemma3-f32.gguf"));
  ASSERT_TRUE(f.is_ok()) << f.message();
  const File& g = **f;
  EXPECT_EQ(g.get_string("general.architecture"), "gemma3");
  EXPECT_EQ(g.get_int("gemma3.block_count"), 6);
  EXPECT_EQ(g.get_int("gemma3.attention.head_count"), 2);
  EXPECT_EQ(g.get_int("gemma3.attention.head_count_kv"), 1);
  EXPECT_NE(g.find_tensor("blk.0.attn_q_norm.weight"), nullptr);
  EXPECT_EQ(g.find_tensor("output.weight"), nullptr);  // tied
}

TEST(GgufReference, VocabOnlyFilesLoad) {
  UBATCH_REQUIRE_REFERENCE();
  const std::vector<std::string> files = gguf_files_in(test::reference_path("tokenizer"));
  ASSERT_FALSE(files.empty());
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    auto f = File::open(path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    expect_consistent(**f);
    EXPECT_TRUE(f.value()->tensors().empty());
    auto model = f.value()->get_string("tokenizer.ggml.model");
    ASSERT_TRUE(model.has_value());
    const Value* tokens = f.value()->find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    ASSERT_EQ(tokens->type, ValueType::ARRAY);
    EXPECT_EQ(tokens->array_type, ValueType::STRING);
    EXPECT_EQ(tokens->strings.size(), tokens->array_size);
    EXPECT_GT(tokens->array_size, 1000u);
  }
  auto spm = File::open(test::reference_path("tokenizer/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(spm.is_ok()) << spm.message();
  EXPECT_EQ(spm.value()->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(spm.value()->find("tokenizer.ggml.tokens")->array_size, 32000u);
}

// The embedded default model (Gemma 3 270M Q4_K_M): facts from its model card.
TEST(GgufDefaultModel, Loads) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  const auto t0 = std::chrono::steady_clock::now();
  auto f = File::open(test::default_model());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(f.is_ok()) << f.message();
  const File& g = **f;
  std::printf("open + validate %s: %.1f ms (%zu tensors, %zu keys)\n", g.path().c_str(), ms,
              g.tensors().size(), g.metadata().size());
  expect_consistent(g);
  EXPECT_EQ(g.get_string("general.architecture"), "gemma3");
  EXPECT_EQ(g.get_int("gemma3.block_count"), 18);
  EXPECT_EQ(g.get_int("gemma3.embedding_length"), 640);
  const TensorInfo* embd = g.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->ne[0], 640);
  EXPECT_EQ(embd->ne[1], 262144);
  const Value* tokens = g.find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->array_size, 262144u);
  EXPECT_EQ(tokens->strings.size(), 262144u);
}

TEST(GgufFile, OpenErrors) {
  auto missing = File::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("/nonexistent/dir/model.gguf"), std::string::npos);
  EXPECT_NE(missing.message().find("cannot open"), std::string::npos);
  auto dir = File::open("/tmp");
  ASSERT_FALSE(dir.is_ok());
  EXPECT_NE(dir.message().find("not a regular file"), std::string::npos);
}

// ---- synthetic files ----

template <typename T>
std::vector<uint8_t> le_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Every value type, arrays of every element type, nested arrays and two tensors.
Writer full_writer(uint32_t version) {
  Writer w(version);
  w.add_string("general.architecture", "synthetic");
  w.add_uint("t.u8", ValueType::UINT8, 200);
  w.add_int("t.i8", ValueType::INT8, -100);
  w.add_uint("t.u16", ValueType::UINT16, 60000);
  w.add_int("t.i16", ValueType::INT16, -30000);
  w.add_uint("t.u32", ValueType::UINT32, 4000000000u);
  w.add_int("t.i32", ValueType::INT32, -2000000000);
  w.add_uint("t.u64", ValueType::UINT64, 1ull << 40);
  w.add_uint("t.u64max", ValueType::UINT64, ~0ull);
  w.add_int("t.i64", ValueType::INT64, -(1ll << 50));
  w.add_f32("t.f32", 1.5f);
  w.add_f64("t.f64", -2.25);
  w.add_bool("t.bool", true);
  w.add_bool("t.false", false);
  w.add_string("t.empty", "");
  w.add_string("t.utf8", "h\xc3\xa9llo \"q\"\n");
  w.add_array("t.a_u8", ValueType::UINT8, 3, {1, 2, 255});
  w.add_array("t.a_i8", ValueType::INT8, 2, le_bytes<int8_t>({-1, 7}));
  w.add_array("t.a_u16", ValueType::UINT16, 2, le_bytes<uint16_t>({1, 65535}));
  w.add_array("t.a_i16", ValueType::INT16, 2, le_bytes<int16_t>({-32768, 5}));
  w.add_array("t.a_u32", ValueType::UINT32, 2, le_bytes<uint32_t>({0, 4294967295u}));
  w.add_array("t.a_i32", ValueType::INT32, 3, le_bytes<int32_t>({-1, 0, 1}));
  w.add_array("t.a_u64", ValueType::UINT64, 1, le_bytes<uint64_t>({1ull << 62}));
  w.add_array("t.a_i64", ValueType::INT64, 2, le_bytes<int64_t>({-5, 5}));
  w.add_array("t.a_f32", ValueType::FLOAT32, 3, le_bytes<float>({0.5f, -1.0f, 3.25f}));
  w.add_array("t.a_f64", ValueType::FLOAT64, 2, le_bytes<double>({1e300, -0.125}));
  w.add_array("t.a_bool", ValueType::BOOL, 3, {1, 0, 1});
  w.add_array("t.a_empty", ValueType::INT32, 0, {});
  w.add_string_array("t.a_str", {"a", "", "ccc", "\xe2\x96\x81x"});
  w.add_string_array("t.a_str_empty", {});
  // [[1, 2], ["x"], [[true]]]: an array of arrays, one of them nested again.
  std::vector<uint8_t> inner;
  for (const auto& part :
       {Writer::encode_array(ValueType::INT32, 2, le_bytes<int32_t>({1, 2})),
        Writer::encode_array(ValueType::STRING, 1, Writer::encode_string("x")),
        Writer::encode_array(ValueType::ARRAY, 1, Writer::encode_array(ValueType::BOOL, 1, {1}))})
    inner.insert(inner.end(), part.begin(), part.end());
  w.add_array("t.a_nested", ValueType::ARRAY, 3, inner);
  std::vector<float> wdata(4 * 3);
  for (size_t i = 0; i < wdata.size(); ++i) wdata[i] = static_cast<float>(i) * 0.5f;
  w.add_tensor("w.f32", TensorType::F32, {4, 3}, le_bytes(wdata));
  w.add_tensor("w.q8", TensorType::Q8_0, {64, 2, 1, 1});
  w.add_tensor("w.i8", TensorType::I8, {5});  // odd size: the next tensor needs padding
  w.add_tensor("w.q4k", TensorType::Q4_K, {256, 3});
  return w;
}

void expect_full(const File& g) {
  EXPECT_EQ(g.get_string("general.architecture"), "synthetic");
  EXPECT_EQ(g.get_int("t.u8"), 200);
  EXPECT_EQ(g.get_int("t.i8"), -100);
  EXPECT_EQ(g.get_int("t.u16"), 60000);
  EXPECT_EQ(g.get_int("t.i16"), -30000);
  EXPECT_EQ(g.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(g.get_int("t.i32"), -2000000000);
  EXPECT_EQ(g.get_int("t.u64"), 1ll << 40);
  EXPECT_FALSE(g.get_int("t.u64max").has_value());  // does not fit int64
  EXPECT_EQ(g.find("t.u64max")->u, ~0ull);
  EXPECT_EQ(g.get_int("t.i64"), -(1ll << 50));
  EXPECT_EQ(g.get_float("t.f32"), 1.5);
  EXPECT_EQ(g.get_float("t.f64"), -2.25);
  EXPECT_EQ(g.get_bool("t.bool"), true);
  EXPECT_EQ(g.get_bool("t.false"), false);
  EXPECT_EQ(g.get_string("t.empty"), "");
  EXPECT_EQ(g.get_string("t.utf8"), "h\xc3\xa9llo \"q\"\n");
  EXPECT_EQ(g.find("t.u8")->type, ValueType::UINT8);
  EXPECT_EQ(g.find("t.i64")->type, ValueType::INT64);

  EXPECT_EQ(g.get_int_array("t.a_u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(g.get_int_array("t.a_i8"), (std::vector<int64_t>{-1, 7}));
  EXPECT_EQ(g.get_int_array("t.a_u16"), (std::vector<int64_t>{1, 65535}));
  EXPECT_EQ(g.get_int_array("t.a_i16"), (std::vector<int64_t>{-32768, 5}));
  EXPECT_EQ(g.get_int_array("t.a_u32"), (std::vector<int64_t>{0, 4294967295ll}));
  EXPECT_EQ(g.get_int_array("t.a_i32"), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(g.get_int_array("t.a_u64"), (std::vector<int64_t>{1ll << 62}));
  EXPECT_EQ(g.get_int_array("t.a_i64"), (std::vector<int64_t>{-5, 5}));
  EXPECT_EQ(g.get_f32_array("t.a_f32"), (std::vector<float>{0.5f, -1.0f, 3.25f}));
  EXPECT_EQ(g.get_f32_array("t.a_i32"), (std::vector<float>{-1.0f, 0.0f, 1.0f}));
  EXPECT_FALSE(g.get_int_array("t.a_f32").has_value());
  const Value* f64 = g.find("t.a_f64");
  ASSERT_NE(f64, nullptr);
  EXPECT_EQ(f64->array_type, ValueType::FLOAT64);
  EXPECT_EQ(f64->array_f64(0), 1e300);
  EXPECT_EQ(f64->array_f64(1), -0.125);
  EXPECT_EQ(f64->array_i64(0), INT64_MAX);  // saturates
  const Value* bools = g.find("t.a_bool");
  ASSERT_NE(bools, nullptr);
  EXPECT_EQ(bools->array_type, ValueType::BOOL);
  EXPECT_EQ(bools->array_i64(0), 1);
  EXPECT_EQ(bools->array_i64(1), 0);
  EXPECT_EQ(g.get_int_array("t.a_empty"), std::vector<int64_t>{});
  EXPECT_EQ(g.get_string_array("t.a_str"),
            (std::vector<std::string_view>{"a", "", "ccc", "\xe2\x96\x81x"}));
  EXPECT_EQ(g.get_string_array("t.a_str_empty"), std::vector<std::string_view>{});
  const Value* nested = g.find("t.a_nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->type, ValueType::ARRAY);
  EXPECT_EQ(nested->array_type, ValueType::ARRAY);
  EXPECT_EQ(nested->array_size, 3u);
  EXPECT_FALSE(g.get_int_array("t.a_nested").has_value());
  EXPECT_FALSE(g.get_string_array("t.a_nested").has_value());
  EXPECT_FALSE(g.get_f32_array("t.a_nested").has_value());

  ASSERT_EQ(g.tensors().size(), 4u);
  const TensorInfo& t0 = g.tensors()[0];
  EXPECT_EQ(t0.name, "w.f32");
  EXPECT_EQ(t0.n_dims, 2);
  EXPECT_EQ(t0.ne[0], 4);
  EXPECT_EQ(t0.ne[1], 3);
  EXPECT_EQ(t0.ne[2], 1);
  EXPECT_EQ(t0.n_elements(), 12);
  EXPECT_EQ(t0.offset, 0u);
  EXPECT_EQ(t0.n_bytes, 48u);
  float v[12];
  std::memcpy(v, t0.data, sizeof v);
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[11], 5.5f);
  const TensorInfo* q8 = g.find_tensor("w.q8");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->type, TensorType::Q8_0);
  EXPECT_EQ(q8->n_dims, 4);
  EXPECT_EQ(q8->n_bytes, 2u * 2u * 34u);
  const TensorInfo* q4k = g.find_tensor("w.q4k");
  ASSERT_NE(q4k, nullptr);
  EXPECT_EQ(q4k->n_bytes, 3u * 144u);
  EXPECT_EQ(q4k->offset % g.alignment(), 0u);
}

TEST(GgufSynthetic, RoundTripV3) {
  Writer::Layout lay;
  const std::vector<uint8_t> bytes = full_writer(3).bytes(&lay);
  auto f = File::from_bytes(bytes.data(), bytes.size(), "v3.gguf");
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f.value()->version(), 3u);
  EXPECT_EQ(f.value()->alignment(), 32u);
  EXPECT_EQ(f.value()->data_offset(), lay.data_offset);
  EXPECT_EQ(f.value()->path(), "v3.gguf");
  EXPECT_EQ(f.value()->file_size(), bytes.size());
  expect_full(**f);
  expect_consistent(**f);
  EXPECT_TRUE(Writer::from_file(**f).bytes() == bytes);  // nested arrays re-encoded too
}

TEST(GgufSynthetic, RoundTripV2) {
  const std::vector<uint8_t> bytes = full_writer(2).bytes();
  auto f = File::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f.value()->version(), 2u);
  expect_full(**f);
}

TEST(GgufSynthetic, CustomAlignment) {
  for (uint32_t al : {1u, 2u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(al);
    Writer w = full_writer(3);
    w.set_alignment(al);
    Writer::Layout lay;
    const std::vector<uint8_t> bytes = w.bytes(&lay);
    auto f = File::from_bytes(bytes.data(), bytes.size());
    ASSERT_TRUE(f.is_ok()) << f.message();
    EXPECT_EQ(f.value()->alignment(), al);
    EXPECT_EQ(f.value()->data_offset(), lay.data_offset);
    EXPECT_EQ(f.value()->data_offset() % al, 0u);
    expect_full(**f);
    expect_consistent(**f);
  }
}

TEST(GgufSynthetic, ZeroTensorsAndEmptyMetadata) {
  Writer empty;
  std::vector<uint8_t> bytes = empty.bytes();
  EXPECT_EQ(bytes.size(), 24u);
  auto f = File::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_TRUE(f.value()->metadata().empty());
  EXPECT_TRUE(f.value()->tensors().empty());
  EXPECT_EQ(f.value()->data_offset(), 32u);  // past the end of the 24 bytes: nothing lives there

  Writer vocab;
  vocab.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
  bytes = vocab.bytes();
  auto g = File::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_EQ(g.value()->get_string_array("tokenizer.ggml.tokens")->size(), 2u);
}

TEST(GgufSynthetic, OpenFromDisk) {
  const std::vector<uint8_t> bytes = full_writer(3).bytes();
  const std::string path =
      (fs::temp_directory_path() / ("ubatch_test_gguf_" + std::to_string(::getpid()) + ".gguf")).string();
  {
    FILE* out = std::fopen(path.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), out), bytes.size());
    std::fclose(out);
  }
  auto f = File::open(path);
  fs::remove(path);  // the mapping stays valid after unlink
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f.value()->path(), path);
  expect_full(**f);
}

TEST(GgufFormat, Values) {
  const std::vector<uint8_t> bytes = full_writer(3).bytes();
  auto f = File::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(f.is_ok()) << f.message();
  const File& g = **f;
  EXPECT_EQ(format_value(*g.find("t.u8")), "200");
  EXPECT_EQ(format_value(*g.find("t.i8")), "-100");
  EXPECT_EQ(format_value(*g.find("t.u64max")), "18446744073709551615");
  EXPECT_EQ(format_value(*g.find("t.f32")), "1.5");
  Value eps;
  eps.type = ValueType::FLOAT32;
  eps.f = static_cast<double>(1e-6f);
  EXPECT_EQ(format_value(eps), "1e-06");  // shortest float32 form, not the widened double's
  EXPECT_EQ(format_value(*g.find("t.bool")), "true");
  EXPECT_EQ(format_value(*g.find("t.utf8")), "\"h\xc3\xa9llo \\\"q\\\"\\n\"");
  EXPECT_EQ(format_value(*g.find("t.a_i32")), "[-1, 0, 1]");
  EXPECT_EQ(format_value(*g.find("t.a_i32"), 2), "[-1, 0, ... (3 items)]");
  EXPECT_EQ(format_value(*g.find("t.a_bool")), "[true, false, true]");
  EXPECT_EQ(format_value(*g.find("t.a_str")), "[\"a\", \"\", \"ccc\", \"\xe2\x96\x81x\"]");
  EXPECT_EQ(format_value(*g.find("t.a_empty")), "[]");
  EXPECT_EQ(format_value(*g.find("t.a_nested")), "[... (3 arrays)]");
  EXPECT_EQ(value_type_name(ValueType::FLOAT32), "f32");
  EXPECT_EQ(value_type_name(ValueType::ARRAY), "array");
}

}  // namespace
}  // namespace ubatch::gguf
