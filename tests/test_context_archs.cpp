// The six architectures of ../shared/reference/manifest-archs.json (qwen2, qwen3, phi3, Llama 3
// frequency factors, gemma2, smollm3): logits parity with the reference under its rule (every
// row, argmax, greedy16), each at the n_ctx the reference ran with (Phi-3's LongRoPE picks its
// short or long factors by it); one mutation test per feature — the same model with the
// feature's tensor or key changed gives other logits, so the feature is read; and strict
// loading — malformed variants fail with a message naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "context/context.h"
#include "gguf/gguf_writer.h"
#include "gguf_rewrite.h"
#include "reference_rule.h"
#include "support.h"

namespace ubatch {
namespace {

using gguf::Writer;

std::unique_ptr<Context> context_for(std::shared_ptr<const gguf::File> file, int32_t n_ctx, int32_t n_ubatch,
                                     int n_threads, std::string* error = nullptr) {
  Result<std::unique_ptr<Model>> m = Model::load(std::move(file));
  if (!m) {
    if (error) *error = m.message();
    return nullptr;
  }
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_batch = 512;
  p.n_ubatch = n_ubatch;
  p.n_threads = n_threads;
  Result<std::unique_ptr<Context>> c = Context::create(std::shared_ptr<Model>(std::move(m.value())), p);
  EXPECT_TRUE(c.is_ok()) << c.message();
  return c ? std::move(c.value()) : nullptr;
}

std::shared_ptr<const gguf::File> open_file(const std::string& path) {
  Result<std::unique_ptr<gguf::File>> f = gguf::File::open(path);
  EXPECT_TRUE(f.is_ok()) << f.message();
  return f ? std::shared_ptr<const gguf::File>(std::move(f.value())) : nullptr;
}

std::shared_ptr<const gguf::File> from_bytes(const std::vector<uint8_t>& bytes) {
  Result<std::unique_ptr<gguf::File>> f = gguf::File::from_bytes(bytes.data(), bytes.size(), "<mutated>");
  EXPECT_TRUE(f.is_ok()) << f.message();
  return f ? std::shared_ptr<const gguf::File>(std::move(f.value())) : nullptr;
}

nlohmann::json manifest() {
  std::vector<uint8_t> bytes = test::read_file(test::reference_path("manifest-archs.json"));
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

// All logits of `tokens` run as one sequence: [n_tokens, n_vocab].
std::vector<float> all_logits(Context& ctx, const std::vector<int32_t>& tokens) {
  ctx.kv().clear();
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, true);
  DecodeResult r = ctx.decode(b);
  EXPECT_TRUE(r.ok()) << r.message;
  std::vector<float> out;
  if (!r.ok()) return out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* row = ctx.logits(static_cast<int32_t>(i));
    out.insert(out.end(), row, row + ctx.n_vocab());
  }
  return out;
}

TEST(ArchReferenceLogits, EveryModelEveryCaseEveryRow) {
  UBATCH_REQUIRE_REFERENCE();
  nlohmann::json man = manifest();
  int n_entries = 0;
  for (const auto& model : man["models"]) {
    const std::string file = model["file"];
    const double tol = model["tolerance"];
    EXPECT_EQ(model["n_vocab"].get<int32_t>(), 512);
    const int32_t n_ctx = model["n_ctx"];
    SCOPED_TRACE(file + " n_ctx " + std::to_string(n_ctx));
    std::unique_ptr<Context> ctx = context_for(open_file(test::reference_path(file)), n_ctx, 512, 2);
    ASSERT_TRUE(ctx);
    ++n_entries;
    int case_index = 0;
    double worst = 0;
    for (const auto& c : model["cases"]) {
      SCOPED_TRACE("case " + std::to_string(case_index++));
      worst = std::max(worst, test::check_case_rows(*ctx, c, tol));
    }
    std::printf("%-32s n_ctx %4d  worst |ours - ref| / row range = %.2e (tolerance %.0e)\n", file.c_str(),
                n_ctx, worst, tol);
  }
  EXPECT_EQ(n_entries, 21);
}

TEST(ArchReferenceLogits, GreedyGenerationMatchesGreedy16) {
  UBATCH_REQUIRE_REFERENCE();
  nlohmann::json man = manifest();
  for (const auto& model : man["models"]) {
    const std::string file = model["file"];
    const double tol = model["tolerance"];
    EXPECT_EQ(model["n_vocab"].get<int32_t>(), 512);
    const int32_t n_ctx = model["n_ctx"];
    SCOPED_TRACE(file + " n_ctx " + std::to_string(n_ctx));
    // Odd ubatch size: prompts split over several forward passes, then one-token decode steps.
    std::unique_ptr<Context> ctx = context_for(open_file(test::reference_path(file)), n_ctx, 7, 2);
    ASSERT_TRUE(ctx);
    for (const auto& c : model["cases"]) test::check_case_greedy(*ctx, c, tol);
  }
}

// ---- Rewriting a model: the tool of the mutation and malformed-file tests ----------------------

using test::Rewrite;
using test::rewrite;
using test::tensor_bytes;
using test::tensor_shape;

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Largest |a - b| over the rows, relative to each row's range in `a`.
double max_rel_change(const std::vector<float>& a, const std::vector<float>& b, int32_t n_vocab) {
  double worst = 0;
  for (size_t r = 0; r * n_vocab < a.size(); ++r) {
    const float* x = &a[r * n_vocab];
    const float* y = &b[r * n_vocab];
    const auto [mn, mx] = std::minmax_element(x, x + n_vocab);
    double d = 0;
    for (int32_t v = 0; v < n_vocab; ++v) d = std::max(d, static_cast<double>(std::fabs(x[v] - y[v])));
    worst = std::max(worst, d / (*mx - *mn));
  }
  return worst;
}

// The 130-token prompt of the manifest's last case (far past Gemma 2's window of 12).
std::vector<int32_t> mutation_prompt() {
  nlohmann::json man = manifest();
  const auto& c = man["models"][0]["cases"][3];
  std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
  tokens.resize(c["n_prompt"].get<size_t>());
  return tokens;
}

struct MutationCase {
  const char* name;
  const char* model;  // F32 file under reference/models
  int32_t n_ctx;
  Rewrite rewrite;
};

// A vector tensor replaced by ones.
Rewrite ones(const std::string& name) {
  return {nullptr,
          [name](const gguf::TensorInfo& t, Writer& w) {
            if (t.name != name) return false;
            w.add_tensor(t.name, t.type, tensor_shape(t), f32_bytes(std::vector<float>(t.ne[0], 1.0f)));
            return true;
          },
          nullptr};
}

std::vector<MutationCase> mutation_cases() {
  std::vector<MutationCase> cases;
  // Qwen2: Q/K/V biases zeroed.
  cases.push_back({"qwen2_biases_zeroed", "tiny-qwen2-f32", 256,
                   {nullptr,
                    [](const gguf::TensorInfo& t, Writer& w) {
                      if (!ends_with(t.name, ".bias")) return false;
                      w.add_tensor(t.name, t.type, tensor_shape(t));  // zeros
                      return true;
                    },
                    nullptr}});
  // Llama 3: frequency factors all 1; Phi-3: LongRoPE factors all 1 (at n_ctx 512, the long
  // set is the one in use).
  cases.push_back({"llama3_rope_freqs_ones", "tiny-llama3-f32", 256, ones("rope_freqs.weight")});
  cases.push_back({"phi3_long_factors_ones", "tiny-phi3-f32", 512, ones("rope_factors_long.weight")});
  // Phi-3: the attention factor 1.
  cases.push_back({"phi3_attn_factor_one", "tiny-phi3-f32", 256,
                   {[](const gguf::MetadataEntry& e, Writer& w) {
                      if (e.key != "phi3.rope.scaling.attn_factor") return false;
                      w.add_f32(e.key, 1.0f);
                      return true;
                    },
                    nullptr, nullptr}});
  // Gemma 2: each soft-cap removed, then the window widened past the prompt.
  for (const char* key : {"gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping"}) {
    const std::string k = key;
    cases.push_back({k == "gemma2.attn_logit_softcapping" ? "gemma2_attn_softcap_removed" : "gemma2_final_softcap_removed",
                     "tiny-gemma2-f32", 256,
                     {[k](const gguf::MetadataEntry& e, Writer&) { return e.key == k; }, nullptr, nullptr}});
  }
  cases.push_back({"gemma2_window_widened", "tiny-gemma2-f32", 256,
                   {[](const gguf::MetadataEntry& e, Writer& w) {
                      if (e.key != "gemma2.attention.sliding_window") return false;
                      w.add_uint(e.key, gguf::ValueType::UINT32, 4096);
                      return true;
                    },
                    nullptr, nullptr}});
  // SmolLM3 run as llama: RoPE on the NoPE layers too (same weights, keys renamed).
  cases.push_back({"smollm3_nope_layers_given_rope", "tiny-smollm3-f32", 256,
                   {[](const gguf::MetadataEntry& e, Writer& w) {
                      if (e.key == "general.architecture") {
                        w.add_string(e.key, "llama");
                        return true;
                      }
                      if (e.key.rfind("smollm3.", 0) == 0) {
                        w.add_value("llama." + e.key.substr(8), e.value);
                        return true;
                      }
                      return false;
                    },
                    nullptr, nullptr}});
  return cases;
}

class ArchMutation : public ::testing::TestWithParam<size_t> {};

TEST_P(ArchMutation, FeatureIsRead) {
  UBATCH_REQUIRE_REFERENCE();
  const MutationCase mc = mutation_cases()[GetParam()];
  std::shared_ptr<const gguf::File> original = open_file(test::reference_path(std::string("models/") + mc.model + ".gguf"));
  ASSERT_TRUE(original);
  std::shared_ptr<const gguf::File> mutated = from_bytes(rewrite(*original, mc.rewrite));
  ASSERT_TRUE(mutated);
  // The rewrite tool itself changes nothing when it changes nothing.
  std::shared_ptr<const gguf::File> same = from_bytes(rewrite(*original, Rewrite{}));
  ASSERT_TRUE(same);
  const std::vector<int32_t> prompt = mutation_prompt();
  std::string err;
  std::unique_ptr<Context> a = context_for(original, mc.n_ctx, 512, 2);
  std::unique_ptr<Context> b = context_for(mutated, mc.n_ctx, 512, 2, &err);
  std::unique_ptr<Context> c = context_for(same, mc.n_ctx, 512, 2);
  ASSERT_TRUE(a && c);
  ASSERT_TRUE(b) << "the mutated model must still load: " << err;
  const std::vector<float> la = all_logits(*a, prompt), lb = all_logits(*b, prompt), lc = all_logits(*c, prompt);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_TRUE(la == lc) << "rewriting without a change changed the logits";
  const double change = max_rel_change(la, lb, a->n_vocab());
  std::printf("%-34s logits move by up to %.2f of the row range\n", mc.name, change);
  // Ten times the F32 tolerance of the reference rule: the mutated model would fail it.
  EXPECT_GT(change, 0.03) << mc.name << ": the feature does not reach the logits";
}

INSTANTIATE_TEST_SUITE_P(Features, ArchMutation, ::testing::Range<size_t>(0, 8),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(mutation_cases()[info.param].name);
                         });

// ---- Position shifts (KvCache::seq_shift) re-rotate keys with each architecture's RoPE -------

// A prompt at positions 0..n-1 shifted by +d, then one more token, gives the logits of the same
// tokens placed at d..d+n directly: the re-rotation uses the layer's base and scale, the
// frequency factors in use, no rotation on NoPE layers, and no second attention factor.
TEST(ArchSeqShift, ShiftedKeysMatchKeysComputedAtTheNewPositions) {
  UBATCH_REQUIRE_REFERENCE();
  const std::vector<int32_t> prompt = mutation_prompt();
  const int32_t n = 40, d = 25;
  for (const auto& model_and_ctx : {std::pair{"tiny-llama3-f32", 256}, std::pair{"tiny-smollm3-f32", 256},
                                    std::pair{"tiny-phi3-f32", 512}, std::pair{"tiny-gemma2-f32", 256},
                                    std::pair{"tiny-qwen3-f32", 256}}) {
    // (Named variables, not a structured binding: clang 14, the fuzz/ASan build's compiler,
    // cannot capture a binding in a lambda.)
    const char* model = model_and_ctx.first;
    const int32_t n_ctx = model_and_ctx.second;
    SCOPED_TRACE(model);
    auto make = [&] {
      Result<std::unique_ptr<Model>> m = Model::load(open_file(test::reference_path(std::string("models/") + model + ".gguf")));
      EXPECT_TRUE(m.is_ok());
      ContextParams p;
      p.n_ctx = n_ctx;
      p.n_threads = 1;
      p.kv_type = TensorType::F32;
      return std::move(Context::create(std::shared_ptr<Model>(std::move(m.value())), p).value());
    };
    std::unique_ptr<Context> shifted = make(), direct = make();
    Batch b;
    for (int32_t i = 0; i < n; ++i) b.add(prompt[i], i, 0, false);
    ASSERT_TRUE(shifted->decode(b).ok());
    ASSERT_TRUE(shifted->kv().seq_shift(0, 0, -1, d));
    b.clear();
    b.add(prompt[n], n + d, 0, true);
    ASSERT_TRUE(shifted->decode(b).ok());
    b.clear();
    for (int32_t i = 0; i <= n; ++i) b.add(prompt[i], i + d, 0, i == n);
    ASSERT_TRUE(direct->decode(b).ok());
    const std::vector<float> ls(shifted->logits(0), shifted->logits(0) + shifted->n_vocab());
    const std::vector<float> ld(direct->logits(n), direct->logits(n) + direct->n_vocab());
    EXPECT_LT(max_rel_change(ld, ls, direct->n_vocab()), 1e-4);
  }
}

// ---- Strict loading ---------------------------------------------------------------------------

std::string load_error(const std::string& model, const Rewrite& r) {
  std::shared_ptr<const gguf::File> original = open_file(test::reference_path("models/" + model + ".gguf"));
  if (!original) return "<cannot open>";
  std::shared_ptr<const gguf::File> mutated = from_bytes(rewrite(*original, r));
  if (!mutated) return "<cannot parse>";
  Result<std::unique_ptr<Model>> m = Model::load(mutated);
  return m ? std::string() : m.message();
}

Rewrite drop_tensor(const std::string& name) {
  return {nullptr, [name](const gguf::TensorInfo& t, Writer&) { return t.name == name; }, nullptr};
}

Rewrite set_key_string(const std::string& key, const std::string& value) {
  return {[key, value](const gguf::MetadataEntry& e, Writer& w) {
            if (e.key != key) return false;
            w.add_string(key, value);
            return true;
          },
          nullptr, nullptr};
}

TEST(ArchStrictLoading, MalformedVariantsNameTheProblem) {
  UBATCH_REQUIRE_REFERENCE();
  struct Case {
    const char* model;
    Rewrite rewrite;
    std::vector<std::string> expect;  // substrings of the error
  };
  std::vector<Case> cases;
  // A missing tensor.
  cases.push_back({"tiny-qwen3-f32", drop_tensor("blk.1.attn_k_norm.weight"), {"missing tensor", "blk.1.attn_k_norm.weight"}});
  cases.push_back({"tiny-phi3-f32", drop_tensor("rope_factors_long.weight"), {"rope_factors_long.weight"}});
  cases.push_back({"tiny-phi3-f32", drop_tensor("blk.0.attn_qkv.weight"), {"missing tensor", "blk.0.attn_qkv.weight"}});
  // A wrong shape: the fused QKV one row set short.
  cases.push_back({"tiny-phi3-f32",
                   {nullptr,
                    [](const gguf::TensorInfo& t, Writer& w) {
                      if (t.name != "blk.0.attn_qkv.weight") return false;
                      w.add_tensor(t.name, t.type, {t.ne[0], t.ne[1] - 128});
                      return true;
                    },
                    nullptr},
                   {"blk.0.attn_qkv.weight", "expected [256, 512]"}});
  cases.push_back({"tiny-qwen2-f32",
                   {nullptr,
                    [](const gguf::TensorInfo& t, Writer& w) {
                      if (t.name != "blk.0.attn_q.bias") return false;
                      w.add_tensor(t.name, t.type, {128});
                      return true;
                    },
                    nullptr},
                   {"blk.0.attn_q.bias", "expected [256, 1]"}});
  // An unknown RoPE scaling type, and YaRN, which we do not implement.
  {
    Rewrite r;
    r.extra = [](Writer& w) { w.add_string("llama.rope.scaling.type", "yarn"); };
    cases.push_back({"tiny-llama3-f32", r, {"rope.scaling.type", "yarn", "not supported"}});
    Rewrite r2;
    r2.extra = [](Writer& w) { w.add_string("qwen2.rope.scaling.type", "dynamic-ntk"); };
    cases.push_back({"tiny-qwen2-f32", r2, {"dynamic-ntk"}});
  }
  // A block_count no file of this size can hold (10^7 layers sized gigabytes of layer slots
  // before a tensor was read; found by model_load_fuzz): refused before anything is sized.
  cases.push_back({"tiny-qwen3-f32",
                   {[](const gguf::MetadataEntry& e, Writer& w) {
                      if (e.key != "qwen3.block_count") return false;
                      w.add_uint(e.key, gguf::ValueType::UINT32, 10000000);
                      return true;
                    },
                    nullptr, nullptr},
                   {"block_count 10000000 exceeds the", "tensors in the file"}});
  // A head count that does not divide.
  cases.push_back({"tiny-gemma2-f32",
                   {[](const gguf::MetadataEntry& e, Writer& w) {
                      if (e.key != "gemma2.attention.head_count_kv") return false;
                      w.add_uint(e.key, gguf::ValueType::UINT32, 3);
                      return true;
                    },
                    nullptr, nullptr},
                   {"head_count 4 is not a multiple of head_count_kv 3"}});
  // A key that may change the math and that we do not know.
  {
    Rewrite r;
    r.extra = [](Writer& w) { w.add_f32("qwen3.logit_scale", 0.5f); };
    cases.push_back({"tiny-qwen3-f32", r, {"qwen3.logit_scale", "not understood"}});
  }
  // A tensor nothing reads (a Llama file with an attention-output bias is fine; a stray
  // tensor is not).
  {
    Rewrite r;
    r.extra = [](Writer& w) { w.add_tensor("blk.0.attn_sinks.weight", TensorType::F32, {4}); };
    cases.push_back({"tiny-smollm3-f32", r, {"not used", "blk.0.attn_sinks.weight"}});
  }
  // An unknown architecture.
  cases.push_back({"tiny-qwen2-f32", set_key_string("general.architecture", "qwen9"), {"unsupported architecture 'qwen9'", "qwen2"}});
  for (const Case& c : cases) {
    const std::string err = load_error(c.model, c.rewrite);
    SCOPED_TRACE(std::string(c.model) + ": " + err);
    ASSERT_FALSE(err.empty()) << "loaded, but should have failed";
    for (const std::string& part : c.expect) EXPECT_NE(err.find(part), std::string::npos) << "missing '" << part << "'";
  }
}

TEST(ArchStrictLoading, FeaturesAreReported) {
  UBATCH_REQUIRE_REFERENCE();
  struct Expect {
    const char* model;
    std::vector<std::string> features;
  };
  const std::vector<Expect> expects = {
      {"tiny-qwen2-q8_0", {"Q/K/V biases", "RoPE NeoX", "separate output"}},
      {"tiny-qwen3-q8_0", {"per-head Q/K RMSNorm", "head size 96", "tied output"}},
      {"tiny-phi3-q8_0", {"fused QKV", "fused gate|up", "LongRoPE (original context 256"}},
      {"tiny-llama3-q8_0", {"RoPE frequency factors (rope_freqs)", "RoPE normal"}},
      {"tiny-gemma2-q8_0", {"attention soft-cap 5", "final-logit soft-cap 3", "sliding window 12 on 1 of 2 layers"}},
      {"tiny-smollm3-q8_0", {"NoPE layers 3, 7"}},
  };
  for (const Expect& e : expects) {
    Result<std::unique_ptr<Model>> m = Model::load_file(test::reference_path(std::string("models/") + e.model + ".gguf"));
    ASSERT_TRUE(m.is_ok()) << e.model << ": " << m.message();
    std::string all;
    for (const std::string& f : (*m)->features()) all += f + "; ";
    for (const std::string& want : e.features) EXPECT_NE(all.find(want), std::string::npos) << e.model << ": " << all;
  }
}

}  // namespace
}  // namespace ubatch
