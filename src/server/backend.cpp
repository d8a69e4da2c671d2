#include "server/backend.h"

#include <spdlog/spdlog.h>

#include "sched/engine.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace {

// The chat format for a model whose GGUF carries no template: the family whose turn
// markers are single tokens of the vocabulary.
std::string guess_chat_family(const Tokenizer& tok) {
  static const std::pair<const char*, const char*> kMarkers[] = {
      {"<start_of_turn>", "gemma"}, {"<|start_header_id|>", "llama3"}, {"<|im_start|>", "chatml"}, {"<|user|>", "phi3"}};
  for (const auto& [marker, family] : kMarkers)
    if (tok.tokenize(marker, false, true).size() == 1) return family;
  return "chatml";
}

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& name, sched::Engine& engine, const Tokenizer& tokenizer,
                                      const std::string& chat_template) {
  auto b = std::make_unique<Backend>();
  b->name = name;
  b->engine = &engine;
  b->tokenizer = &tokenizer;
  b->n_ctx = engine.n_ctx_seq();
  b->kv_cells = engine.n_ctx();
  b->n_vocab = engine.n_vocab();
  b->chat_template = chat_template;
  if (b->chat_template.empty()) b->chat_template = tokenizer.chat_template();
  if (b->chat_template.empty()) b->chat_template = guess_chat_family(tokenizer);
  const std::string bos = tokenizer.bos() >= 0 ? tokenizer.token_to_piece(tokenizer.bos(), true) : "";
  const std::string eos = tokenizer.eos() >= 0 ? tokenizer.token_to_piece(tokenizer.eos(), true) : "";
  auto renderer = chat::ChatRenderer::create(b->chat_template, tokenizer.chat_template_tool_use(), bos, eos);
  if (!renderer) {
    b->chat_template_error = renderer.message();
    spdlog::warn("model {}: chat template unusable, /v1/chat/completions will answer 500: {}", name, renderer.message());
  } else {
    b->chat = renderer.value();
    spdlog::info("model {}: chat: {}", name, b->chat->describe());
  }
  return b;
}

}  // namespace ubatch::server
