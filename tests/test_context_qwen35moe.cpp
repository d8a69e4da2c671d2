// qwen35moe (Qwen3.5-MoE / Qwen3.6-A3B): the hybrid layers of qwen35 with a mixture of experts
// and a sigmoid-gated shared expert in every layer. No reference logits exist for it, so the
// oracle is built from the qwen35 reference models (tests/qwen35moe_from_dense.h):
//   - experts that are all copies of the dense FFN, with a shared expert that contributes
//     nothing, pass the qwen35 reference rule (and are the qwen35 logits bit for bit with one
//     expert per token, or two under a tied router);
//   - the dense FFN moved into the shared expert (routed experts zero, gate ½, down × 2) gives the
//     qwen35 logits bit for bit;
//   - on a model whose experts differ, the format's reference's logits (tests/data/qwen35moe/,
//     made once by llama.cpp's qwen35moe) hold under the manifest's rule, and each part is read: the shared expert's gate and down
//     projection, the experts' order, the router, expert_used_count (mutation tests), and
//     relabelling the experts consistently keeps every bit;
//   - malformed files fail to load with a message naming the problem;
//   - a sequence's logits do not depend on the batch it runs in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <functional>
#include <nlohmann/json.hpp>

#include "context/context.h"
#include "gguf/gguf_writer.h"
#include "gguf_rewrite.h"
#include "logits_util.h"
#include "qwen35moe_from_dense.h"
#include "reference_rule.h"
#include "support.h"

namespace ubatch {
namespace {

using gguf::Writer;
using test::Qwen35MoeFromDense;

std::shared_ptr<const gguf::File> q35_dense(const std::string& name) {
  Result<std::unique_ptr<gguf::File>> f = gguf::File::open(test::reference_path("hybrid/models/" + name + ".gguf"));
  EXPECT_TRUE(f.is_ok()) << f.message();
  return f ? std::shared_ptr<const gguf::File>(std::move(f.value())) : nullptr;
}

std::shared_ptr<const gguf::File> q35_from_bytes(std::vector<uint8_t> bytes) {
  EXPECT_FALSE(bytes.empty()) << "the qwen35moe file could not be built";
  if (bytes.empty()) return nullptr;
  auto holder = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  Result<std::unique_ptr<gguf::File>> f = gguf::File::from_bytes(holder->data(), holder->size(), "<qwen35moe>");
  EXPECT_TRUE(f.is_ok()) << f.message();
  return f ? std::shared_ptr<const gguf::File>(std::move(f.value())) : nullptr;
}

// The qwen35moe file built from the qwen35 reference model `dense`.
std::shared_ptr<const gguf::File> q35_moe(const std::string& dense, const Qwen35MoeFromDense& o) {
  std::shared_ptr<const gguf::File> d = q35_dense(dense);
  return d ? q35_from_bytes(test::qwen35moe_from_qwen35(*d, o)) : nullptr;
}

std::unique_ptr<Context> q35_context(std::shared_ptr<const gguf::File> file, int32_t n_ctx, int32_t n_ubatch,
                                     std::string* error = nullptr) {
  if (!file) return nullptr;
  Result<std::unique_ptr<Model>> m = Model::load(std::move(file));
  if (!m) {
    if (error) *error = m.message();
    EXPECT_TRUE(error) << m.message();
    return nullptr;
  }
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_batch = 512;
  p.n_ubatch = n_ubatch;
  p.n_threads = 2;
  Result<std::unique_ptr<Context>> c = Context::create(std::shared_ptr<Model>(std::move(m.value())), p);
  EXPECT_TRUE(c.is_ok()) << c.message();
  return c ? std::move(c.value()) : nullptr;
}

// The qwen35 entries of the hybrid manifest, logits paths relative to reference/.
std::vector<nlohmann::json> q35_manifest_models() {
  std::vector<uint8_t> bytes = test::read_file(test::reference_path("hybrid/manifest-hybrid.json"));
  nlohmann::json man = nlohmann::json::parse(bytes.begin(), bytes.end());
  std::vector<nlohmann::json> out;
  for (auto& model : man["models"]) {
    if (model["arch"] != "qwen35") continue;
    for (auto& c : model["cases"]) c["logits"] = "hybrid/" + c["logits"].get<std::string>();
    out.push_back(model);
  }
  return out;
}

// "models/tiny-qwen35-f32.gguf" → "tiny-qwen35-f32".
std::string q35_stem(const nlohmann::json& model) {
  std::string f = model["file"];
  f = f.substr(f.rfind('/') + 1);
  return f.substr(0, f.size() - 5);
}

// The longest case's prompt and continuation (130 tokens).
std::vector<int32_t> q35_tokens() { return q35_manifest_models()[0]["cases"][3]["tokens"].get<std::vector<int32_t>>(); }

// Experts that all equal the dense FFN (two per token under a pseudo-random router), the shared
// expert contributing exactly 0: every qwen35 reference model's rule holds for the qwen35moe file.
TEST(Qwen35MoeEquivalence, CopiesOfTheDenseFfnPassTheQwen35Reference) {
  UBATCH_REQUIRE_REFERENCE();
  int n_models = 0;
  for (const nlohmann::json& model : q35_manifest_models()) {
    const std::string stem = q35_stem(model);
    const double tol = model["tolerance"];
    SCOPED_TRACE(stem);
    std::unique_ptr<Context> moe = q35_context(q35_moe(stem, Qwen35MoeFromDense{}), model["n_ctx"], 512);
    std::unique_ptr<Context> dense = q35_context(q35_dense(stem), model["n_ctx"], 512);
    ASSERT_TRUE(moe && dense);
    double worst = 0, vs_dense = 0;
    for (const auto& c : model["cases"]) {
      worst = std::max(worst, test::check_case_rows(*moe, c, tol));
      const std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
      moe->kv().clear();
      vs_dense = std::max(vs_dense, test::max_rel_change(test::sequence_logits(*dense, tokens),
                                                         test::sequence_logits(*moe, tokens), moe->n_vocab()));
      dense->kv().clear();
      moe->kv().clear();
    }
    // Greedy generation through decode steps and an odd ubatch size.
    std::unique_ptr<Context> moe7 = q35_context(q35_moe(stem, Qwen35MoeFromDense{}), model["n_ctx"], 7);
    ASSERT_TRUE(moe7);
    for (const auto& c : model["cases"]) test::check_case_greedy(*moe7, c, tol);
    std::printf("qwen35moe from %-18s worst |ours - ref| / row range = %.2e (tolerance %.0e); vs our qwen35 %.2e\n",
                stem.c_str(), worst, tol, vs_dense);
    ++n_models;
  }
  EXPECT_EQ(n_models, 3);
}

// k = 1 (a weight p/p = 1) and k = 2 under an all-zero router (a tie: experts 0 and 1, weights ½
// and ½, ½y + ½y = y) add nothing to the dense FFN's rounding: the qwen35 logits, bit for bit.
TEST(Qwen35MoeEquivalence, OneExpertOrATiedPairIsTheDenseFfnBitForBit) {
  UBATCH_REQUIRE_REFERENCE();
  const std::vector<int32_t> tokens = q35_tokens();
  for (const char* stem : {"tiny-qwen35-f32", "tiny-qwen35-q4_k_m"}) {
    SCOPED_TRACE(stem);
    std::unique_ptr<Context> dense = q35_context(q35_dense(stem), 256, 512);
    ASSERT_TRUE(dense);
    const std::vector<float> ref = test::sequence_logits(*dense, tokens);
    Qwen35MoeFromDense one;
    one.n_expert_used = 1;
    Qwen35MoeFromDense tied;
    tied.router_scale = 0;
    for (const Qwen35MoeFromDense& o : {one, tied}) {
      std::unique_ptr<Context> moe = q35_context(q35_moe(stem, o), 256, 512);
      ASSERT_TRUE(moe);
      EXPECT_TRUE(test::sequence_logits(*moe, tokens) == ref) << "k " << o.n_expert_used << ", router x" << o.router_scale;
    }
  }
}

// The dense FFN as the shared expert (down × 2 under a zero gate: sigmoid(0) · 2y = y) beside
// routed experts whose down projections are zero: the qwen35 logits, bit for bit.
TEST(Qwen35MoeEquivalence, TheDenseFfnAsTheSharedExpertIsBitForBit) {
  UBATCH_REQUIRE_REFERENCE();
  const std::vector<int32_t> tokens = q35_tokens();
  std::unique_ptr<Context> dense = q35_context(q35_dense("tiny-qwen35-f32"), 256, 512);
  Qwen35MoeFromDense o;
  o.expert_down_scale = {0, 0, 0, 0};
  o.shared_down_scale = 2;
  std::unique_ptr<Context> moe = q35_context(q35_moe("tiny-qwen35-f32", o), 256, 512);
  ASSERT_TRUE(dense && moe);
  EXPECT_TRUE(test::sequence_logits(*moe, tokens) == test::sequence_logits(*dense, tokens));
}

// ---- A model whose experts differ: every part is read ---------------------------------------------

// Experts = the dense FFN with down × 0.5, 1.5, −1, 2; a pseudo-random router; the shared expert
// the dense FFN under a pseudo-random gate.
Qwen35MoeFromDense q35_distinct() {
  Qwen35MoeFromDense o;
  o.expert_down_scale = {0.5f, 1.5f, -1.0f, 2.0f};
  o.shared_down_scale = 1;
  o.shared_gate_scale = 0.1f;
  return o;
}

std::vector<uint8_t> q35_distinct_bytes() {
  std::shared_ptr<const gguf::File> d = q35_dense("tiny-qwen35-f32");
  return d ? test::qwen35moe_from_qwen35(*d, q35_distinct()) : std::vector<uint8_t>{};
}


struct Q35Mutation {
  const char* name;
  test::Rewrite rewrite;
};

std::vector<Q35Mutation> q35_mutations() {
  auto zero = [](std::vector<float>& v, const std::vector<int64_t>&) { std::fill(v.begin(), v.end(), 0.0f); };
  std::vector<Q35Mutation> m;
  m.push_back({"shared_expert_gate_zeroed", test::edit_f32({"ffn_gate_inp_shexp.weight"}, zero)});
  m.push_back({"shared_expert_down_zeroed", test::edit_f32({"ffn_down_shexp.weight"}, zero)});
  m.push_back({"experts_permuted",
               test::edit_f32({"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}, test::reverse_outer)});
  m.push_back({"router_negated", test::edit_f32({"ffn_gate_inp.weight"}, [](std::vector<float>& v, const std::vector<int64_t>&) {
                 for (float& x : v) x = -x;
               })});
  m.push_back({"expert_used_count_1", test::set_u32("qwen35moe.expert_used_count", 1)});
  m.push_back({"expert_used_count_3", test::set_u32("qwen35moe.expert_used_count", 3)});
  return m;
}

class Qwen35MoeMutation : public ::testing::TestWithParam<size_t> {};

TEST_P(Qwen35MoeMutation, FeatureIsRead) {
  UBATCH_REQUIRE_REFERENCE();
  const Q35Mutation mc = q35_mutations()[GetParam()];
  const std::vector<uint8_t> base = q35_distinct_bytes();
  ASSERT_FALSE(base.empty());
  std::shared_ptr<const gguf::File> original = q35_from_bytes(base);
  ASSERT_TRUE(original);
  std::shared_ptr<const gguf::File> mutated = q35_from_bytes(test::rewrite(*original, mc.rewrite));
  std::shared_ptr<const gguf::File> same = q35_from_bytes(test::rewrite(*original, test::Rewrite{}));
  std::string err;
  std::unique_ptr<Context> a = q35_context(original, 256, 512), c = q35_context(same, 256, 512);
  std::unique_ptr<Context> b = q35_context(mutated, 256, 512, &err);
  ASSERT_TRUE(a && c);
  ASSERT_TRUE(b) << "the mutated model must still load: " << err;
  const std::vector<int32_t> tokens = q35_tokens();
  const std::vector<float> la = test::sequence_logits(*a, tokens), lb = test::sequence_logits(*b, tokens),
                           lc = test::sequence_logits(*c, tokens);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_TRUE(la == lc) << "rewriting without a change changed the logits";
  const double change = test::max_rel_change(la, lb, a->n_vocab());
  std::printf("qwen35moe %-28s logits move by up to %.2f of the row range\n", mc.name, change);
  EXPECT_GT(change, 0.03) << mc.name << ": the feature does not reach the logits";
}

INSTANTIATE_TEST_SUITE_P(Features, Qwen35MoeMutation, ::testing::Range<size_t>(0, 6),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(q35_mutations()[info.param].name);
                         });

// The format's reference on the model with distinct experts (tests/data/qwen35moe/README.md:
// llama.cpp's qwen35moe, the commit of the hybrid manifest): every row under the manifest's rule.
TEST(Qwen35MoeReferenceLogits, DistinctExpertsMatchTheFormatsReference) {
  UBATCH_REQUIRE_REFERENCE();
  const std::vector<uint8_t> bytes = q35_distinct_bytes();
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  ASSERT_EQ(h, 0x1e0f3416e3f1a42eull) << "the generated model changed: make its reference logits again (README)";
  const nlohmann::json model = q35_manifest_models()[0];
  ASSERT_EQ(q35_stem(model), "tiny-qwen35-f32");
  const std::vector<int32_t> tokens = model["cases"][2]["tokens"].get<std::vector<int32_t>>();
  const std::vector<float> ref =
      test::read_f32(std::string(UBATCH_TESTS_DIR) + "/data/qwen35moe/tiny-qwen35moe-distinct-f32.case2.f32");
  ASSERT_EQ(ref.size(), tokens.size() * 512);
  const double tol = model["tolerance"];
  std::unique_ptr<Context> ctx = q35_context(q35_from_bytes(bytes), 256, 512);
  ASSERT_TRUE(ctx);
  const std::vector<float> ours = test::sequence_logits(*ctx, tokens);
  ASSERT_EQ(ours.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const test::RowCheck rc = test::check_row(&ours[i * 512], &ref[i * 512], 512);
    worst = std::max(worst, rc.max_err / rc.range);
    EXPECT_LE(rc.max_err, tol * rc.range) << "row " << i;
    if (rc.margin > 2 * tol * rc.range) {
      EXPECT_EQ(rc.ours_argmax, rc.ref_argmax) << "row " << i;
    }
  }
  std::printf("qwen35moe distinct experts (F32) worst |ours - ref| / row range = %.2e (tolerance %.0e)\n", worst, tol);
}

// The model with distinct experts is not the dense one (so the tests above can tell), and
// relabelling its experts consistently (router rows and expert tensors reversed together)
// changes no bit.
TEST(Qwen35MoeRouting, DistinctExpertsDifferFromDenseAndRelabellingKeepsEveryBit) {
  UBATCH_REQUIRE_REFERENCE();
  std::shared_ptr<const gguf::File> original = q35_from_bytes(q35_distinct_bytes());
  ASSERT_TRUE(original);
  std::shared_ptr<const gguf::File> relabelled = q35_from_bytes(test::rewrite(
      *original,
      test::edit_f32({"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"},
                     test::reverse_outer)));
  std::unique_ptr<Context> a = q35_context(original, 256, 512), b = q35_context(relabelled, 256, 512);
  std::unique_ptr<Context> dense = q35_context(q35_dense("tiny-qwen35-f32"), 256, 512);
  ASSERT_TRUE(a && b && dense);
  const std::vector<int32_t> tokens = q35_tokens();
  const std::vector<float> la = test::sequence_logits(*a, tokens);
  EXPECT_TRUE(la == test::sequence_logits(*b, tokens));
  const double vs_dense = test::max_rel_change(test::sequence_logits(*dense, tokens), la, a->n_vocab());
  std::printf("qwen35moe with distinct experts vs qwen35: logits differ by up to %.2f of the row range\n", vs_dense);
  EXPECT_GT(vs_dense, 0.03);
}

// ---- Fused gate | up experts ----------------------------------------------------------------------

// ffn_gate_exps and ffn_up_exps of `f` as one ffn_gate_up_exps (per expert: gate rows, then up
// rows), as converters write it with --fuse-gate-up-exps; `n_rows` overrides its second dimension.
test::Rewrite q35_fuse_gate_up(const gguf::File& f, int64_t n_rows = 0) {
  return {nullptr, [&f, n_rows](const gguf::TensorInfo& t, Writer& w) {
            if (test::name_ends_with(t.name, ".ffn_up_exps.weight")) return true;
            if (!test::name_ends_with(t.name, ".ffn_gate_exps.weight")) return false;
            const std::string blk = t.name.substr(0, t.name.size() - std::string("ffn_gate_exps.weight").size());
            const gguf::TensorInfo* up = f.find_tensor(blk + "ffn_up_exps.weight");
            const int64_t X = t.ne[2];
            const size_t per = static_cast<size_t>(t.n_bytes / static_cast<uint64_t>(X));
            std::vector<uint8_t> bytes;
            const auto* g = static_cast<const uint8_t*>(t.data);
            const auto* u = static_cast<const uint8_t*>(up->data);
            for (int64_t e = 0; e < X; ++e) {
              bytes.insert(bytes.end(), g + e * per, g + (e + 1) * per);
              bytes.insert(bytes.end(), u + e * per, u + (e + 1) * per);
            }
            w.add_tensor(blk + "ffn_gate_up_exps.weight", t.type, {t.ne[0], n_rows ? n_rows : 2 * t.ne[1], X},
                         n_rows ? std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(
                                                           bytes.size() / static_cast<size_t>(2 * t.ne[1]) *
                                                           static_cast<size_t>(n_rows)))
                                : bytes);
            return true;
          }};
}

TEST(Qwen35MoeFusedGateUp, GivesTheBitsOfSeparateTensors) {
  UBATCH_REQUIRE_REFERENCE();
  for (const bool quantized : {false, true}) {
    SCOPED_TRACE(quantized ? "q4_k_m copies" : "f32 distinct");
    std::shared_ptr<const gguf::File> original =
        quantized ? q35_moe("tiny-qwen35-q4_k_m", Qwen35MoeFromDense{}) : q35_from_bytes(q35_distinct_bytes());
    ASSERT_TRUE(original);
    std::shared_ptr<const gguf::File> fused = q35_from_bytes(test::rewrite(*original, q35_fuse_gate_up(*original)));
    ASSERT_TRUE(fused);
    ASSERT_TRUE(fused->find_tensor("blk.0.ffn_gate_up_exps.weight"));
    ASSERT_FALSE(fused->find_tensor("blk.0.ffn_gate_exps.weight"));
    std::unique_ptr<Context> a = q35_context(original, 256, 512), b = q35_context(fused, 256, 512);
    ASSERT_TRUE(a && b);
    const std::vector<int32_t> tokens = q35_tokens();
    EXPECT_TRUE(test::sequence_logits(*a, tokens) == test::sequence_logits(*b, tokens));
  }
}

// ---- Strict loading ------------------------------------------------------------------------------

std::string q35_load_error(const test::Rewrite& r) {
  std::shared_ptr<const gguf::File> original = q35_from_bytes(q35_distinct_bytes());
  if (!original) return "<cannot build>";
  std::vector<uint8_t> bytes = test::rewrite(*original, r);
  auto holder = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  Result<std::unique_ptr<gguf::File>> f = gguf::File::from_bytes(holder->data(), holder->size(), "<mutated>");
  if (!f) return f.message();
  Result<std::unique_ptr<Model>> m = Model::load(std::shared_ptr<const gguf::File>(std::move(f.value())));
  return m ? std::string() : m.message();
}

test::Rewrite q35_drop_tensor(const std::string& name) {
  return {nullptr, [name](const gguf::TensorInfo& t, Writer&) { return t.name == name; }};
}

test::Rewrite q35_drop_key(const std::string& key) {
  return {[key](const gguf::MetadataEntry& e, Writer&) { return e.key == key; }, nullptr};
}

// Tensor `name` replaced by one of type `type` and shape `ne` (zero bytes).
test::Rewrite q35_replace_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne) {
  return {nullptr, [name, type, ne](const gguf::TensorInfo& t, Writer& w) {
            if (t.name != name) return false;
            int64_t n = 1;
            for (int64_t d : ne) n *= d;
            const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(type));
            w.add_tensor(name, type, ne, std::vector<uint8_t>(static_cast<size_t>(n / tr->block_size * tr->type_size), 0));
            return true;
          }};
}

TEST(Qwen35MoeStrictLoading, MalformedVariantsNameTheProblem) {
  UBATCH_REQUIRE_REFERENCE();
  struct Case {
    test::Rewrite rewrite;
    std::vector<std::string> expect;
  };
  std::vector<Case> cases;
  // The shared expert's tensors: missing, or of the wrong shape or type.
  cases.push_back({q35_drop_tensor("blk.0.ffn_down_shexp.weight"), {"missing tensor 'blk.0.ffn_down_shexp.weight'"}});
  cases.push_back({q35_drop_tensor("blk.2.ffn_gate_inp_shexp.weight"), {"missing tensor 'blk.2.ffn_gate_inp_shexp.weight'"}});
  cases.push_back({q35_drop_tensor("blk.3.ffn_up_shexp.weight"), {"missing tensor 'blk.3.ffn_up_shexp.weight'"}});
  cases.push_back({q35_replace_tensor("blk.1.ffn_up_shexp.weight", TensorType::F32, {256, 64}),
                   {"blk.1.ffn_up_shexp.weight", "expected [256, 128]"}});
  cases.push_back({q35_replace_tensor("blk.1.ffn_gate_inp_shexp.weight", TensorType::F32, {256, 2}),
                   {"blk.1.ffn_gate_inp_shexp.weight", "expected [256, 1]"}});
  cases.push_back({q35_replace_tensor("blk.0.ffn_gate_inp_shexp.weight", TensorType::Q8_0, {256}),
                   {"blk.0.ffn_gate_inp_shexp.weight", "quantized gate is not supported"}});
  // Its width: a key that disagrees with the tensors; no key at all.
  cases.push_back({test::set_u32("qwen35moe.expert_shared_feed_forward_length", 64),
                   {"blk.0.ffn_gate_shexp.weight", "expected [256, 64]"}});
  cases.push_back({q35_drop_key("qwen35moe.expert_shared_feed_forward_length"),
                   {"missing metadata key 'qwen35moe.expert_shared_feed_forward_length'"}});
  // Routed experts: counts.
  cases.push_back({test::set_u32("qwen35moe.expert_used_count", 0), {"qwen35moe.expert_used_count 0", "[1, expert_count 4]"}});
  cases.push_back({test::set_u32("qwen35moe.expert_used_count", 5), {"qwen35moe.expert_used_count 5", "[1, expert_count 4]"}});
  cases.push_back({test::set_u32("qwen35moe.expert_count", 8),
                   {"blk.0.ffn_gate_exps.weight", "holds 4 experts but expert_count is 8"}});
  cases.push_back({q35_drop_key("qwen35moe.expert_feed_forward_length"),
                   {"missing metadata key 'qwen35moe.expert_feed_forward_length'"}});
  cases.push_back({q35_drop_tensor("blk.1.ffn_gate_inp.weight"), {"missing tensor 'blk.1.ffn_gate_inp.weight'"}});
  // A dense FFN left in the file is not silently ignored; MTP layers are refused by key.
  cases.push_back({{nullptr, nullptr,
                    [](Writer& w) {
                      w.add_tensor("blk.0.ffn_gate.weight", TensorType::F32, {256, 128},
                                   std::vector<uint8_t>(256 * 128 * 4, 0));
                    }},
                   {"not used by architecture 'qwen35moe'", "blk.0.ffn_gate.weight"}});
  cases.push_back({{nullptr, nullptr, [](Writer& w) { w.add_uint("qwen35moe.nextn_predict_layers", gguf::ValueType::UINT32, 1); }},
                   {"qwen35moe.nextn_predict_layers"}});
  // A fused gate | up tensor of the wrong height, and one beside the separate tensors.
  std::shared_ptr<const gguf::File> base = q35_from_bytes(q35_distinct_bytes());
  ASSERT_TRUE(base);
  cases.push_back({q35_fuse_gate_up(*base, 192), {"blk.0.ffn_gate_up_exps.weight", "expected [256, 256, 4]"}});
  cases.push_back({{nullptr, nullptr,
                    [base](Writer& w) {
                      const gguf::TensorInfo* g = base->find_tensor("blk.2.ffn_gate_exps.weight");
                      std::vector<uint8_t> bytes = test::tensor_bytes(*g);
                      bytes.insert(bytes.end(), bytes.begin(), bytes.end());
                      w.add_tensor("blk.2.ffn_gate_up_exps.weight", g->type, {256, 256, 4}, bytes);
                    }},
                   {"not used by architecture 'qwen35moe'", "blk.2.ffn_gate_exps.weight", "blk.2.ffn_up_exps.weight"}});
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string err = q35_load_error(cases[i].rewrite);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + err);
    EXPECT_FALSE(err.empty());
    for (const std::string& want : cases[i].expect) EXPECT_NE(err.find(want), std::string::npos) << want;
  }
}

// As the format's reference reads it: without expert_shared_feed_forward_length the shared
// expert's width is feed_forward_length.
TEST(Qwen35MoeStrictLoading, SharedWidthFallsBackToFeedForwardLength) {
  UBATCH_REQUIRE_REFERENCE();
  const std::string err = q35_load_error({[](const gguf::MetadataEntry& e, Writer& w) {
                                            if (e.key != "qwen35moe.expert_shared_feed_forward_length") return false;
                                            w.add_uint("qwen35moe.feed_forward_length", gguf::ValueType::UINT32, 128);
                                            return true;
                                          },
                                          nullptr});
  EXPECT_EQ(err, "");
}

// A converter writes the shared expert's gate (a Linear of one output) as {n_embd, 1}: the same
// gate as {n_embd}, the same bits.
TEST(Qwen35MoeStrictLoading, SharedGateMayBeAOneRowMatrix) {
  UBATCH_REQUIRE_REFERENCE();
  std::shared_ptr<const gguf::File> original = q35_from_bytes(q35_distinct_bytes());
  ASSERT_TRUE(original);
  std::shared_ptr<const gguf::File> two_d = q35_from_bytes(test::rewrite(
      *original, {nullptr, [](const gguf::TensorInfo& t, Writer& w) {
                    if (!test::name_ends_with(t.name, "ffn_gate_inp_shexp.weight")) return false;
                    w.add_tensor(t.name, t.type, {t.ne[0], 1}, test::tensor_bytes(t));
                    return true;
                  }}));
  ASSERT_TRUE(two_d);
  ASSERT_EQ(two_d->find_tensor("blk.0.ffn_gate_inp_shexp.weight")->n_dims, 2);
  std::unique_ptr<Context> a = q35_context(original, 256, 512), b = q35_context(two_d, 256, 512);
  ASSERT_TRUE(a && b);
  const std::vector<int32_t> tokens = q35_tokens();
  EXPECT_TRUE(test::sequence_logits(*a, tokens) == test::sequence_logits(*b, tokens));
}

// ---- What `ubatch info` and the load log say -----------------------------------------------------

// The hybrid layers, the experts, the shared expert, and the parameters: total, and active per
// token (the shared expert always active, k of the n routed experts).
TEST(Qwen35MoeInfo, FeaturesNameTheSharedExpertAndTheActiveParameters) {
  UBATCH_REQUIRE_REFERENCE();
  std::shared_ptr<const gguf::File> file = q35_from_bytes(q35_distinct_bytes());
  ASSERT_TRUE(file);
  Result<std::unique_ptr<Model>> m = Model::load(file);
  ASSERT_TRUE(m.is_ok()) << m.message();
  uint64_t total = 0, experts = 0;
  for (const gguf::TensorInfo& t : file->tensors()) {
    uint64_t n = 1;
    for (int d = 0; d < t.n_dims; ++d) n *= static_cast<uint64_t>(t.ne[d]);
    total += n;
    if (t.name.find("_exps.") != std::string::npos) experts += n;
  }
  const uint64_t active = total - experts / 2;  // 2 of 4 experts
  std::string all;
  for (const std::string& f : m.value()->features()) all += f + "\n";
  for (const std::string& want :
       {std::string("hybrid layers: gated_attention [3], gated_deltanet [0,1,2]"),
        std::string("mixture of experts: 4 experts, 2 per token (router: softmax, top-k, renormalised), expert width 128"),
        std::string("shared expert of width 128, scaled by sigmoid(ffn_gate_inp_shexp . x)"),
        fmt::format("parameters {:.2f} M total, {:.2f} M active per token", total / 1e6, active / 1e6)})
    EXPECT_NE(all.find(want), std::string::npos) << want << "\nin:\n" << all;
}

// ---- Batch invariance ----------------------------------------------------------------------------

class Qwen35MoeBatch : public ::testing::TestWithParam<const char*> {};

TEST_P(Qwen35MoeBatch, OutputDoesNotDependOnTheBatch) {
  UBATCH_REQUIRE_REFERENCE();
  const std::string which = GetParam();
  auto make = [&](int32_t n_ubatch) {
    if (which == "distinct-f32") return q35_context(q35_from_bytes(q35_distinct_bytes()), 1024, n_ubatch);
    return q35_context(q35_moe("tiny-qwen35-q8_0", Qwen35MoeFromDense{}), 1024, n_ubatch);
  };
  const std::vector<int32_t> p = q35_tokens();
  std::unique_ptr<Context> alone = make(512), mixed = make(512), chunked = make(5);
  ASSERT_TRUE(alone && mixed && chunked);
  const std::vector<int32_t> a(p.begin(), p.begin() + 37);
  const std::vector<float> ref = test::sequence_logits(*alone, a);
  EXPECT_TRUE(test::logits_among_other_sequences(*mixed, a, p) == ref)
      << "a sequence's logits changed with the other rows of its batch";
  EXPECT_TRUE(test::sequence_logits(*chunked, a) == ref) << "a sequence's logits changed with n_ubatch";
}

INSTANTIATE_TEST_SUITE_P(Models, Qwen35MoeBatch, ::testing::Values("distinct-f32", "copies-q8_0"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace ubatch
