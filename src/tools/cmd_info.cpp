// `ubatch info [MODEL]`: what a GGUF file holds — header, every metadata key with its type and
// value (long arrays summarised), the tensor table, totals (parameters, bytes per type), and
// the tokenizer its vocabulary builds (model, pre-tokenizer, BOS/EOS/EOT/EOM, end-of-generation
// ids).
// Reads nothing but the header and metadata pages: tensor data is mapped, never touched.
// Ends with this machine: its CPU topology, the default compute threads and why, the CPU
// features and the kernel level.
// Exit status 0, or 1 with the reader's error on stderr.
#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "kernels/matmul.h"
#include "kernels/packed_weight.h"
#include "tokenizer/tokenizer.h"
#include "tools/command.h"
#include "tools/options.h"

namespace ubatch::tools {
namespace {

std::string human_bytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024.0 && u < 4) {
    n /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", n) : fmt::format("{:.2f} {}", n, units[u]);
}

std::string type_label(const gguf::Value& v) {
  if (v.type != gguf::ValueType::ARRAY) return std::string(gguf::value_type_name(v.type));
  return fmt::format("array[{}; {}]", gguf::value_type_name(v.array_type), v.array_size);
}

std::string shape_of(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", t.ne[d]);
  return s + "]";
}

// The architecture as ubatch reads it: hyper-parameters, the features recognised, keys known
// and not applied — or why the model would not load.
std::string model_section(const std::unique_ptr<gguf::File>& file) {
  std::shared_ptr<const gguf::File> shared(file.get(), [](const gguf::File*) {});  // borrowed
  Result<std::unique_ptr<Model>> m = Model::inspect(shared);
  if (!m) return fmt::format("\nmodel:       does not load: {}\n", m.message());
  const HParams& hp = (*m)->hparams();
  std::string out = fmt::format(
      "\nmodel:       architecture {}, {} layers, n_embd {}, n_ff {}, {} heads of {} ({} KV heads), n_vocab {}, "
      "trained context {}\n",
      hp.arch, hp.n_layer, hp.n_embd, hp.n_ff, hp.n_head, hp.head_dim_k, hp.n_kv_head, hp.n_vocab, hp.n_ctx_train);
  out += "features:   ";
  for (size_t i = 0; i < (*m)->features().size(); ++i) out += (i ? "; " : " ") + (*m)->features()[i];
  out += "\n";
  for (const std::string& k : hp.ignored_keys) out += fmt::format("not applied: {}\n", k);
  return out;
}

// The tokenizer the file's vocabulary builds (or why it does not): its model and
// pre-tokenizer, and the special ids that start and end a text or a turn.
std::string tokenizer_section(const gguf::File& f) {
  if (!f.find("tokenizer.ggml.model")) return "\ntokenizer: none (no tokenizer.ggml.model)\n";
  auto tok = Tokenizer::from_gguf(f);
  if (!tok) return fmt::format("\ntokenizer: not loadable: {}\n", tok.message());
  const Tokenizer& t = **tok;
  const std::string& model = t.model_name();
  const char* kind = model == "llama" ? "SPM" : model == "gpt2" ? "byte-level BPE" : "WordPiece";
  auto id = [&](int32_t v) {
    return v < 0 ? std::string("-") : fmt::format("{} {}", v, t.token_to_piece(v, /*special=*/true));
  };
  std::string out = fmt::format("\ntokenizer: {} ({}), {} tokens", model, kind, t.n_vocab());
  if (!t.pre_tokenizer().empty()) out += fmt::format(", pre-tokenizer {}", t.pre_tokenizer());
  out += fmt::format("\n  bos {}{}; eos {}; eot {}; eom {}\n", id(t.bos()),
                     t.add_bos_default() ? " (added)" : "", id(t.eos()), id(t.eot()), id(t.eom()));
  std::string eog;
  for (int32_t v : t.eog_ids()) eog += fmt::format("{}{}", eog.empty() ? "" : ", ", id(v));
  out += fmt::format("  end of generation: {}\n", eog.empty() ? "none" : eog);
  return out;
}

int run_info(const std::string& path, size_t max_items, bool show_tensors) {
  auto opened = gguf::File::open(path);
  if (!opened) {
    std::fprintf(stderr, "ubatch info: %s\n", opened.message().c_str());
    return 1;
  }
  const gguf::File& f = **opened;
  std::string out;
  out += fmt::format("file:        {} ({}, {} bytes)\n", f.path(), human_bytes(static_cast<double>(f.file_size())),
                     f.file_size());
  out += fmt::format("version:     {}\n", f.version());
  out += fmt::format("alignment:   {}\n", f.alignment());
  out += fmt::format("tensors:     {}\n", f.tensors().size());
  out += fmt::format("data offset: {}\n", f.data_offset());
  out += model_section(*opened);

  size_t key_width = 0, type_width = 0;
  for (const gguf::MetadataEntry& e : f.metadata()) {
    key_width = std::max(key_width, e.key.size());
    type_width = std::max(type_width, type_label(e.value).size());
  }
  out += fmt::format("\nmetadata: {} keys\n", f.metadata().size());
  for (const gguf::MetadataEntry& e : f.metadata())
    out += fmt::format("  {:<{}}  {:<{}}  {}\n", e.key, key_width, type_label(e.value), type_width,
                       gguf::format_value(e.value, max_items));

  struct TypeTotal {
    size_t n_tensors = 0;
    int64_t n_elements = 0;
    uint64_t n_bytes = 0;
  };
  std::map<std::string_view, TypeTotal> by_type;
  int64_t n_params = 0;
  uint64_t n_bytes = 0;
  size_t name_width = 4, shape_width = 5;
  for (const gguf::TensorInfo& t : f.tensors()) {
    name_width = std::max(name_width, t.name.size());
    shape_width = std::max(shape_width, shape_of(t).size());
    TypeTotal& tt = by_type[tensor_type_name(t.type)];
    ++tt.n_tensors;
    tt.n_elements += t.n_elements();  // cannot overflow: the data of each lies inside the file
    tt.n_bytes += t.n_bytes;
    n_params += t.n_elements();
    n_bytes += t.n_bytes;
  }
  if (show_tensors && !f.tensors().empty()) {
    out += fmt::format("\ntensors: {}  (offset: from the data section start)\n", f.tensors().size());
    out += fmt::format("  {:>5}  {:<{}}  {:<5}  {:<{}}  {:>12}  {:>12}\n", "#", "name", name_width,
                       "type", "shape", shape_width, "offset", "bytes");
    size_t k = 0;
    for (const gguf::TensorInfo& t : f.tensors())
      out += fmt::format("  {:>5}  {:<{}}  {:<5}  {:<{}}  {:>12}  {:>12}\n", k++, t.name, name_width,
                         tensor_type_name(t.type), shape_of(t), shape_width, t.offset, t.n_bytes);
  }
  out += fmt::format("\ntotals: {} parameters ({:.2f} M), {} of tensor data ({} bytes)", n_params,
                     static_cast<double>(n_params) / 1e6, human_bytes(static_cast<double>(n_bytes)),
                     n_bytes);
  if (n_params > 0)
    out += fmt::format(", {:.3f} bits per parameter", 8.0 * static_cast<double>(n_bytes) /
                                                           static_cast<double>(n_params));
  out += "\n";
  for (const auto& [name, tt] : by_type)
    out += fmt::format("  {:<5}  {:>4} tensors  {:>12} parameters  {:>12}  ({:.1f}%)\n", name,
                       tt.n_tensors, tt.n_elements, human_bytes(static_cast<double>(tt.n_bytes)),
                       n_bytes ? 100.0 * static_cast<double>(tt.n_bytes) / static_cast<double>(n_bytes) : 0.0);
  out += tokenizer_section(f);
  // What loading costs in memory: the matrices a model multiplies by (2-D tensors, without
  // token_embd.weight when output.weight exists, and each expert of a 3-D expert tensor) are repacked for the kernels
  // (kernels/packed_weight.h) and their file pages released; the rest stays mapped.
  uint64_t matrix_file = 0, matrix_packed = 0;
  const bool untied = f.find_tensor("output.weight") != nullptr;
  for (const gguf::TensorInfo& t : f.tensors()) {
    // 3-D expert tensors are packed expert by expert.
    if (t.n_dims < 2 || t.n_dims > 3 || (untied && t.name == "token_embd.weight")) continue;
    const int64_t n_mats = t.n_dims == 3 ? t.ne[2] : 1;
    const size_t pb = kernels::packed_weight_bytes(t.type, t.ne[0], t.ne[1]) * static_cast<size_t>(n_mats);
    if (pb == 0) continue;
    matrix_file += t.n_bytes;
    matrix_packed += pb;
  }
  if (matrix_file > 0)
    out += fmt::format("packed for the kernels at load: {} of matrices -> {} ({:+.1f}%); the file pages "
                       "they came from are released\n",
                       human_bytes(static_cast<double>(matrix_file)), human_bytes(static_cast<double>(matrix_packed)),
                       100.0 * (static_cast<double>(matrix_packed) / static_cast<double>(matrix_file) - 1.0));
  // The kernels this machine would run the model with (UBATCH_SIMD caps it), and its threads.
  std::string lowered;
  const kernels::SimdLevel level = kernels::matmul_simd_level(&lowered);
  const char* reason = !lowered.empty() ? lowered.c_str() : kernels::simd_level_reason();
  out += fmt::format("matmul SIMD level on this machine: {}{}{}{} (this build: {})\n", kernels::simd_level_name(level),
                     *reason ? " (" : "", reason, *reason ? ")" : "", kernels::simd_level_names());
  out += "\nthis machine:\n";
  for (const std::string& line : machine_lines(0)) out += "  " + line + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

UBATCH_REGISTER_COMMAND("info", "Print a GGUF file's header, metadata and tensor table", [](CLI::App& sub) {
  struct Options {
    std::string model = default_model_path();
    size_t max_items = 8;
    bool no_tensors = false;
  };
  auto opt = std::make_shared<Options>();
  sub.add_option("model", opt->model, "GGUF file (default: the embedded default model)");
  sub.add_option("--max-items", opt->max_items, "Array elements shown before summarising")
      ->capture_default_str();
  sub.add_flag("--no-tensors", opt->no_tensors, "Omit the tensor table (totals are still printed)");
  return std::function<int()>([opt] { return run_info(opt->model, opt->max_items, !opt->no_tensors); });
});

}  // namespace
}  // namespace ubatch::tools
