#include "tools/serve_models.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gguf/gguf.h"
#include "grammar/grammar_cache.h"
#include "model/hparams.h"
#include "common/large_buffer.h"

namespace ubatch::tools {

namespace {

// A loaded model and what runs it; the engine stops first, then the context and model go.
class ServedModel : public server::LoadedModel {
 public:
  ServedModel(Loaded loaded, const sched::EngineConfig& config) : loaded_(std::move(loaded)) {
    sched::EngineConfig c = config;
    c.n_ctx_seq = std::max(0, loaded_.model->hparams().n_ctx_train);
    engine_ = std::make_unique<sched::Engine>(*loaded_.context, *loaded_.tokenizer, c);
    // The first structured-output request does not pay for the grammar vocabulary.
    warm_up_ = std::thread([e = engine_.get()] { e->grammars().warm_up(); });
  }
  ~ServedModel() override {
    warm_up_.join();
    engine_.reset();
  }
  sched::Engine& engine() override { return *engine_; }
  const Tokenizer& tokenizer() const override { return *loaded_.tokenizer; }

 private:
  Loaded loaded_;
  std::unique_ptr<sched::Engine> engine_;
  std::thread warm_up_;
};

// The context size load() would choose for this model (options.cpp).
int32_t context_cells(const ModelOptions& o, const HParams& hp) {
  if (o.n_ctx > 0) return o.n_ctx;
  const TensorType kv = kv_type_of(o.kv_type);
  return auto_kv_cells(o.ctx_sequences, hp.n_ctx_train, kv_bytes_per_token(hp, kv), available_memory_bytes());
}

}  // namespace

Result<uint64_t> parse_memory_budget(const std::string& text, uint64_t available_bytes) {
  auto bad = [&] {
    return Status::error(fmt::format("--models-memory '{}': give bytes (optionally with K, M, G or T) or a percentage "
                                     "of available memory (e.g. 60%)", text));
  };
  if (text.empty()) return bad();
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return bad();
  }
  const std::string suffix = text.substr(used);
  if (!(v > 0)) return bad();
  if (suffix == "%") {
    if (v > 100) return bad();
    if (available_bytes == 0) return Status::error("--models-memory: available memory is unknown here; give bytes");
    return static_cast<uint64_t>(static_cast<double>(available_bytes) * v / 100.0);
  }
  double scale = 1;
  if (suffix.size() == 1) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
    const std::string units = "KMGT";
    const size_t k = units.find(c);
    if (k == std::string::npos) return bad();
    for (size_t i = 0; i <= k; ++i) scale *= 1024;
  } else if (!suffix.empty()) {
    return bad();
  }
  return static_cast<uint64_t>(v * scale);
}

Result<std::vector<ModelFile>> collect_model_files(std::vector<ModelFile> files, const std::string& dir,
                                                   const std::function<void(bool, const std::string&)>& log) {
  auto say = [&log](bool warning, const std::string& line) {
    if (log) log(warning, line);
  };
  if (!dir.empty()) {
    std::error_code ec;
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.path().extension() != ".gguf") continue;
      std::error_code e2;
      const bool link = entry.is_symlink(e2);
      // is_regular_file follows links: a link counts as what it points to.
      if (!entry.is_regular_file(e2)) {
        say(true, fmt::format("--models-dir: skipping {}: {}", entry.path().string(),
                              link ? "a symbolic link that does not lead to a regular file" : "not a regular file"));
        continue;
      }
      if (link) {
        const std::filesystem::path target = std::filesystem::canonical(entry.path(), e2);
        say(false, fmt::format("--models-dir: {} is a symbolic link to {} (followed)", entry.path().string(),
                               e2 ? std::string("?") : target.string()));
      }
      found.push_back(entry.path());
    }
    if (ec) return Status::error(fmt::format("--models-dir {}: {}", dir, ec.message()));
    if (found.empty()) return Status::error(fmt::format("--models-dir {}: no .gguf file in it", dir));
    std::sort(found.begin(), found.end());
    for (const auto& p : found) files.push_back({p.string(), p.stem().string(), true});
  }
  if (files.empty()) return Status::error("no model to serve (give -m FILE or --models-dir DIR)");
  for (ModelFile& f : files)
    if (f.name.empty()) f.name = std::filesystem::path(f.path).stem().string();
  return files;
}

Result<server::ModelInfo> probe_model(const ModelFile& file, const ModelOptions& o) {
  Result<std::unique_ptr<gguf::File>> gf = gguf::File::open(file.path);
  if (!gf) return Status::error(fmt::format("{}: {}", file.path, gf.message()));
  Result<HParams> hp = HParams::from_gguf(*gf.value());
  if (!hp) return Status::error(fmt::format("{}: {}", file.path, hp.message()));
  server::ModelInfo info;
  info.name = file.name;
  info.path = file.path;
  info.arch = hp->arch;
  std::error_code ec;
  info.file_bytes = std::filesystem::file_size(file.path, ec);
  const TensorType kv = kv_type_of(o.kv_type);
  info.memory_bytes = 2 * info.file_bytes +
                      static_cast<uint64_t>(context_cells(o, hp.value())) * kv_bytes_per_token(hp.value(), kv);
  // Hybrid models: every parallel sequence's recurrent state, and the prefix snapshots' budget.
  if (const uint64_t state = state_bytes_per_sequence(hp.value(), state_type_of(o.state_type)); state > 0)
    info.memory_bytes += static_cast<uint64_t>(std::max<int64_t>(o.ctx_sequences, 1)) * state + ContextParams{}.state_snapshot_bytes;
  return info;
}

server::ModelLoader make_model_loader(ModelOptions o, sched::EngineConfig engine) {
  // Every model's engine takes its steps in turn with the others (sched/step_gate.h).
  if (!engine.step_gate) engine.step_gate = std::make_shared<sched::StepGate>();
  return [o, engine](const server::ModelInfo& info) -> Result<std::unique_ptr<server::LoadedModel>> {
    ModelOptions mo = o;
    mo.model = info.path;
    Result<Loaded> loaded = load(mo, true);
    if (!loaded) return loaded.status();
    spdlog::info("model {}: {}", info.name, huge_page_summary());
    std::unique_ptr<server::LoadedModel> m = std::make_unique<ServedModel>(std::move(loaded.value()), engine);
    return m;
  };
}

}  // namespace ubatch::tools
