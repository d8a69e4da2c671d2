// `ubatch serve`'s models: which files (-m, repeatable with --alias; --models-dir; none: the
// two embedded models), what each takes loaded (server/model_registry.h's ModelInfo), the
// memory budget (--models-memory), and the loader that builds a model's context and engine.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/engine.h"
#include "server/model_registry.h"
#include "tools/options.h"

namespace ubatch::tools {

// The default budget: this share of MemAvailable at start-up (the rest stays for the OS,
// the page cache and the server's own buffers).
constexpr double kDefaultModelsMemoryShare = 0.75;

// --models-memory: "8G", "512M", "1073741824" (bytes, with an optional K/M/G/T suffix, powers
// of 1024) or "60%" (of MemAvailable now). Errors name the value.
Result<uint64_t> parse_memory_budget(const std::string& text, uint64_t available_bytes);

struct ModelFile {
  std::string path;
  std::string name;  // "" : the file's stem
  bool from_dir = false;  // found in --models-dir (not named by -m)
};

// The files to serve: `files` as given, then every *.gguf entry of `dir` (sorted, named by the
// entry's stem), not descending into subdirectories. The symlink rule: an entry that is a
// symbolic link is followed wherever it points (a Hugging Face cache holds links to its blobs)
// and served when its target is a regular file, under the link's name; the log says where it
// points (`log`, warning false). Entries that are not regular files (directories, dangling links,
// devices) are skipped with a warning (`log`, warning true). A file that is not a GGUF is a probe
// error (probe_model), which never shows the file's bytes.
// Errors: a directory that cannot be read or holds no .gguf, no file at all.
Result<std::vector<ModelFile>> collect_model_files(
    std::vector<ModelFile> files, const std::string& dir,
    const std::function<void(bool warning, const std::string& line)>& log = {});

// Reads each file's header (not its weights): architecture, size, and the memory it takes
// loaded with `o` for the context: the file twice (mapped weights and, at most as large, their
// packed copies) plus the KV cache at the context size `o` gives (n_ctx, or automatic).
Result<server::ModelInfo> probe_model(const ModelFile& file, const ModelOptions& o);

// Loads a model for the registry: model, tokenizer, context (with `o`, n_ctx as probed) and an
// engine with `engine`; the grammar vocabulary warms up in the background. Every engine it
// makes shares one sched::StepGate (its own unless engine.step_gate is set): the models with
// work take turns step by step, each step on all compute threads.
server::ModelLoader make_model_loader(ModelOptions o, sched::EngineConfig engine);

}  // namespace ubatch::tools
