// Block formats against the reference implementation: every tensor listed in
// reference/dequant/manifest.json, read from its tiny model with the GGUF reader and
// dequantized whole, must match the reference's float32 output:
// max |ours - ref| <= 1e-6 * max |ref| (the manifest's rule).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/quant.h"
#include "support.h"

namespace ubatch {
namespace {

TEST(DequantReference, EveryManifestTensorMatches) {
  UBATCH_REQUIRE_REFERENCE();
  const std::string manifest_path = test::reference_path("dequant/manifest.json");
  std::ifstream in(manifest_path);
  ASSERT_TRUE(in) << "cannot open " << manifest_path;
  const nlohmann::json manifest = nlohmann::json::parse(in);
  const auto& tensors = manifest.at("tensors");
  ASSERT_FALSE(tensors.empty());
  int checked = 0;
  for (const auto& entry : tensors) {
    const std::string model = entry.at("model"), name = entry.at("tensor"), type = entry.at("type");
    SCOPED_TRACE(model + " " + name + " (" + type + ")");
    auto file = gguf::File::open(test::reference_path(model));
    ASSERT_TRUE(file.is_ok()) << file.message();
    const gguf::TensorInfo* info = (*file)->find_tensor(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(tensor_type_name(info->type), type);
    ASSERT_TRUE(kernels::can_dequantize(info->type));

    const std::vector<float> ref = test::read_f32(test::reference_path(entry.at("file")));
    ASSERT_EQ(static_cast<int64_t>(ref.size()), info->n_elements());
    ASSERT_EQ(static_cast<int64_t>(ref.size()), entry.at("values").get<int64_t>());

    // Row by row, as the kernels see a weight (ne[0] elements per row).
    const int64_t n_row = info->ne[0], n_rows = info->n_elements() / n_row;
    const size_t row_bytes = tensor_row_bytes(info->type, n_row);
    ASSERT_EQ(row_bytes * n_rows, info->n_bytes);
    std::vector<float> ours(ref.size());
    for (int64_t r = 0; r < n_rows; ++r)
      kernels::dequantize_row(info->type, static_cast<const uint8_t*>(info->data) + r * row_bytes,
                              ours.data() + r * n_row, n_row);

    // A NaN on either side makes its maximum NaN, which fails the checks below. (Written
    // without std::fmax: GCC 12 for aarch64 dies vectorizing that reduction at -O3.)
    double max_ref = 0, max_err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double r = std::fabs(double(ref[i])), e = std::fabs(double(ours[i]) - double(ref[i]));
      if (!(r <= max_ref)) max_ref = r;
      if (!(e <= max_err)) max_err = e;
    }
    EXPECT_GT(max_ref, 0.0);
    EXPECT_LE(max_err, 1e-6 * max_ref) << "max error " << max_err << ", max |ref| " << max_ref;
    ++checked;
  }
  EXPECT_GE(checked, 12);
}

}  // namespace
}  // namespace ubatch
