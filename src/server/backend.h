// What a route needs of one loaded model: its engine, tokenizer, chat renderer and limits.
// Built once per load (make_backend) and shared by every request to that model until it is
// unloaded (model_registry.h). Internal to src/server/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "chat/chat_renderer.h"

namespace ubatch {
class Tokenizer;
namespace sched {
class Engine;
}
}  // namespace ubatch

namespace ubatch::server {

struct Backend {
  std::string name;  // the model's id (/v1/models, responses' "model")
  sched::Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  std::string chat_template;     // resolved: the model's template or a family name
  std::shared_ptr<const chat::ChatRenderer> chat;  // null: the template cannot render (chat answers 500)
  std::string chat_template_error;  // why chat is null
  int32_t n_ctx = 0;     // most tokens one request's sequence may hold (prompt + generated)
  int32_t kv_cells = 0;  // KV cache capacity, all sequences together
  int32_t n_vocab = 0;
};

// The backend of `engine` + `tokenizer` (both must outlive it). `chat_template`: --chat-template
// ("" : the model's own template, else the family whose turn markers are single tokens of the
// vocabulary). A template that cannot be used leaves `chat` null and says why (logged).
std::unique_ptr<Backend> make_backend(const std::string& name, sched::Engine& engine, const Tokenizer& tokenizer,
                                      const std::string& chat_template);

}  // namespace ubatch::server
