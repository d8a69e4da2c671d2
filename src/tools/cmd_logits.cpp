// `ubatch logits -m MODEL --tokens 1,2,3 -o FILE`: one forward pass over the ids (no BOS
// added) writing float32 little-endian logits of every row, [n_tokens][n_vocab] — the format
// of ../shared/reference/logits, so any oracle can check us. The ids are computed as the
// scheduler computes a prompt: every row but the last flagged chunkable (Batch::chunkable; Gated
// DeltaNet layers run whole 16-position chunks chunk-wise).
#include <cstdio>
#include <fmt/format.h>

#include "tools/command.h"
#include "tools/options.h"

namespace ubatch::tools {
namespace {

int run_logits(const ModelOptions& mo, const std::string& tokens_text, const std::string& out_path) {
  Result<std::vector<int32_t>> ids = parse_id_list(tokens_text);
  if (!ids) return fmt::print(stderr, "error: --tokens: {}\n", ids.message()), 1;
  if (ids->empty()) return fmt::print(stderr, "error: --tokens: no ids given\n"), 1;
  ModelOptions o = mo;
  const int32_t n = static_cast<int32_t>(ids->size());
  o.n_batch = std::max(o.n_batch, n);
  if (o.n_ctx < n) o.n_ctx = std::max(n, 256);
  Result<Loaded> loaded = load(o, false);
  if (!loaded) return fmt::print(stderr, "error: {}\n", loaded.message()), 1;
  Context& ctx = *loaded->context;
  Batch batch;
  for (int32_t i = 0; i < n; ++i) {
    batch.add((*ids)[i], i, 0, true);
    if (i + 1 < n) batch.mark_chunkable();
  }
  DecodeResult r = ctx.decode(batch);
  if (!r.ok()) return fmt::print(stderr, "error: {}\n", r.message), 1;
  FILE* f = std::fopen(out_path.c_str(), "wb");
  if (!f) return fmt::print(stderr, "error: cannot open '{}' for writing\n", out_path), 1;
  bool ok = true;
  for (int32_t i = 0; i < n && ok; ++i)
    ok = std::fwrite(ctx.logits(i), sizeof(float), ctx.n_vocab(), f) == size_t(ctx.n_vocab());
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return fmt::print(stderr, "error: writing '{}' failed\n", out_path), 1;
  fmt::print(stderr, "wrote {} rows x {} logits to {}\n", n, ctx.n_vocab(), out_path);
  return 0;
}

UBATCH_REGISTER_COMMAND("logits", "write the logits of every row of one forward pass (float32 LE [n_tokens][n_vocab])",
                        [](CLI::App& sub) -> std::function<int()> {
  auto mo = std::make_shared<ModelOptions>();
  auto tokens = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  add_model_options(sub, *mo);
  sub.add_option("--tokens", *tokens, "token ids, comma separated (no BOS is added)")->required();
  sub.add_option("-o,--output", *out, "output file")->required();
  return [=] { return run_logits(*mo, *tokens, *out); };
});

}  // namespace
}  // namespace ubatch::tools
