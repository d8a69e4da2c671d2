// `ubatch bench`'s engine side on the tiny reference model: model cost accounting, test runs
// (rates, KV cleared, KV too small), and the bandwidth and matmul-peak probes.
#include <gtest/gtest.h>

#include <filesystem>

#include "bench/llm_bench.h"
#include "bench/membw.h"
#include "bench/roofline.h"
#include "support.h"

namespace ubatch::bench {
namespace {

class BenchEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    UBATCH_REQUIRE_REFERENCE();
    const std::string path = test::reference_path("models/tiny-llama-q8_0.gguf");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "tiny model not found at " << path;
    Result<std::unique_ptr<Model>> m = Model::load_file(path);
    ASSERT_TRUE(m) << m.message();
    model_ = std::shared_ptr<Model>(std::move(m.value()));
  }
  std::unique_ptr<Context> context(int32_t n_ctx, int32_t n_batch = 64, int32_t n_ubatch = 16) {
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_ubatch = n_ubatch;
    cp.n_threads = 2;
    Result<std::unique_ptr<Context>> c = Context::create(model_, cp);
    EXPECT_TRUE(c) << c.message();
    return c ? std::move(c.value()) : nullptr;
  }
  std::shared_ptr<Model> model_;
};

TEST_F(BenchEngine, ModelCostOfTinyLlama) {
  const ModelCost c = model_cost(*model_);
  // 3 layers × (q 256·256 + k 256·128 + v 256·128 + o 256·256 + gate/up/down 3 × 256·512).
  EXPECT_EQ(c.layer_params, 3u * (65536 + 32768 + 32768 + 65536 + 3 * 131072));
  EXPECT_EQ(c.output_params, 512u * 256u);
  EXPECT_EQ(c.main_type, TensorType::Q8_0);
  EXPECT_EQ(c.weight_bytes, model_->weight_bytes());
  // Separate output matrix: the embedding table is not streamed.
  const gguf::TensorInfo* embd = model_->file().find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(c.streamed_bytes, c.weight_bytes - embd->n_bytes);
  EXPECT_GT(c.n_params, c.layer_params + c.output_params);
  EXPECT_EQ(describe_model(*model_, c).rfind("llama ", 0), 0u);
}

TEST_F(BenchEngine, RunsEveryKindOfTest) {
  std::vector<BenchTest> tests = make_tests({20}, {6}, {8}, {4}, {3});
  auto ctx = context(kv_cells_needed(tests, 16), 16, 8);  // n_batch 16 < 3 × 8 prompt tokens: several decodes
  ASSERT_NE(ctx, nullptr);
  BenchOptions o;
  o.reps = 2;
  for (const BenchTest& t : tests) {
    Result<BenchResult> r = run_test(*ctx, {2, 16, 8}, t, o);
    ASSERT_TRUE(r) << t.name() << ": " << r.message();
    EXPECT_EQ(r->prompt_s.size(), 2u);
    EXPECT_EQ(r->gen_s.size(), 2u);
    EXPECT_EQ(r->n_threads, 2);
    EXPECT_EQ(r->n_ubatch, 8);
    if (t.n_prompt > 0) {
      EXPECT_GT(r->prompt_tps.mean, 0) << t.name();
    }
    if (t.n_gen > 0) {
      EXPECT_GT(r->gen_tps.mean, 0) << t.name();
    }
    EXPECT_EQ(ctx->kv().stats().n_sequences, 0) << "KV not cleared after " << t.name();
    EXPECT_EQ(ctx->kv().stats().n_blocks_used, 0);
  }
  // Every token went through the model: warm-up + 2 reps of each test.
  EXPECT_GT(ctx->perf().n_tokens, 2u * (20 + 6 + 3 * 12));
}

TEST_F(BenchEngine, TooSmallCacheIsAnError) {
  auto ctx = context(32);
  ASSERT_NE(ctx, nullptr);
  BenchOptions o;
  o.reps = 1;
  Result<BenchResult> r = run_test(*ctx, {2, 64, 16}, BenchTest{64, 0, 1, false}, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("KV"), std::string::npos) << r.message();
  o.reps = 0;
  EXPECT_FALSE(run_test(*ctx, {2, 64, 16}, BenchTest{4, 0, 1, false}, o));
}

TEST_F(BenchEngine, Probes) {
  kernels::ThreadPool pool(2);
  Result<BandwidthResult> bw = measure_read_bandwidth(pool, size_t{16} << 20, 2);
  ASSERT_TRUE(bw) << bw.message();
  EXPECT_GT(bw->gbps, 0);
  EXPECT_GE(bw->gbps, bw->mean_gbps);
  EXPECT_EQ(bw->buffer_bytes, size_t{16} << 20);
  EXPECT_EQ(bw->n_threads, 2);
  EXPECT_FALSE(measure_read_bandwidth(pool, 1000, 1));  // below 1 MiB
  EXPECT_FALSE(measure_read_bandwidth(pool, size_t{4} << 20, 0));

  Result<ComputePeak> peak = measure_matmul_peak(*model_, pool, 1);
  ASSERT_TRUE(peak) << peak.message();
  EXPECT_GT(peak->gflops, 0);
  EXPECT_EQ(peak->type, TensorType::Q8_0);
  EXPECT_EQ(peak->n_in, 512);  // largest Q8_0 layer matrices: ffn_gate/up/down; the widest is ffn_down
  EXPECT_GT(peak->n_rows, 0);
  EXPECT_EQ(peak->n_threads, 2);
  EXPECT_GE(default_bandwidth_buffer_bytes(), size_t{64} << 20);
}

}  // namespace
}  // namespace ubatch::bench

namespace ubatch::bench {
namespace {

// The step's bytes of a mixture of experts count only the touched experts; those of a hybrid
// model its recurrent state (tiny reference models of ../shared/reference/{moe,hybrid}).
TEST(BenchModelCost, ExpertsAndRecurrentState) {
  UBATCH_REQUIRE_REFERENCE();
  struct Case {
    const char* path;
    bool moe, hybrid;
  };
  for (const Case& k : {Case{"moe/models/tiny-qwen3moe-q8_0.gguf", true, false},
                        Case{"moe/models/tiny-gptoss-mxfp4_moe.gguf", true, false},
                        Case{"hybrid/models/tiny-qwen35-q8_0.gguf", false, true}}) {
    const std::string path = test::reference_path(k.path);
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "reference model not found at " << path;
    Result<std::unique_ptr<Model>> m = Model::load_file(path);
    ASSERT_TRUE(m) << path << ": " << m.message();
    const ModelCost c = model_cost(*m.value());
    SCOPED_TRACE(path);
    if (k.moe) {
      EXPECT_GT(c.expert_bytes, 0u);
      EXPECT_LT(c.expert_bytes, c.streamed_bytes);
      EXPECT_EQ(c.n_expert, m.value()->hparams().n_expert);
      EXPECT_GT(c.expert_params, 0u);
      const double dense = static_cast<double>(c.streamed_bytes - c.expert_bytes);
      EXPECT_DOUBLE_EQ(step_bytes(c, 1),
                       dense + static_cast<double>(c.expert_bytes) * c.n_expert_used / c.n_expert);
    } else {
      EXPECT_EQ(c.expert_bytes, 0u);
      EXPECT_EQ(c.expert_params, 0u);
    }
    // Recurrent layers are those without a KV layer; a hybrid has both kinds.
    const std::vector<int32_t>& kv = m.value()->hparams().kv_layer;
    int n_recurrent = 0;
    for (size_t il = 0; il < c.layer_is_recurrent.size(); ++il) {
      EXPECT_EQ(c.layer_is_recurrent[il], il < kv.size() && kv[il] < 0) << "layer " << il;
      n_recurrent += c.layer_is_recurrent[il] ? 1 : 0;
    }
    if (k.hybrid) {
      EXPECT_GT(n_recurrent, 0);
      EXPECT_LT(n_recurrent, c.n_layer);
    } else {
      EXPECT_EQ(n_recurrent, 0);
    }
    EXPECT_EQ(c.state_bytes, k.hybrid ? state_bytes_per_sequence(m.value()->hparams()) : 0u);
    if (k.hybrid) {
      EXPECT_GT(c.state_bytes, 0u);
      EXPECT_DOUBLE_EQ(step_bytes(c, 4), static_cast<double>(c.streamed_bytes) + 8.0 * c.state_bytes);
    }
  }
}

}  // namespace
}  // namespace ubatch::bench
