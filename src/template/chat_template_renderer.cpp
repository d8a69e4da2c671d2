#include "template/chat_template_renderer.h"

#include <new>

#include "template/json.h"
#include "template/methods.h"

namespace ubatch::jinja {

namespace {

constexpr std::string_view kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG";

TemplateError input_error(std::string message) { return TemplateError{ErrorKind::kRuntime, std::move(message), {}}; }

std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm out{};
  localtime_r(&t, &out);
  return out;
}

// Appends the continue tag to the last message's text; false when it has none.
bool tag_final_message(nlohmann::ordered_json& messages) {
  if (!messages.is_array() || messages.empty() || !messages.back().is_object()) return false;
  auto& content = messages.back()["content"];
  const std::string tag = std::string(kContinueTag) + " ";
  if (content.is_string()) {
    content = content.get<std::string>() + tag;
    return true;
  }
  if (content.is_array()) {
    for (auto it = content.rbegin(); it != content.rend(); ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        (*it)["text"] = (*it)["text"].get<std::string>() + tag;
        return true;
      }
    }
  }
  return false;
}

}  // namespace

TemplateResult<ChatTemplateRenderer> ChatTemplateRenderer::create(std::string_view source) {
  TemplateResult<Template> t = Template::parse(source);
  if (!t) return t.error();
  return ChatTemplateRenderer(std::move(t).value());
}

TemplateResult<SegmentedText> ChatTemplateRenderer::render(const ChatTemplateInputs& inputs, const RenderLimits& limits,
                                                           RenderStats* stats) const {
  if (!inputs.extra_vars.is_object()) return input_error("extra_vars must be a JSON object");
  std::vector<std::pair<std::string, Value>> vars;
  RenderOptions options;
  options.limits = limits;
  options.now = inputs.now ? *inputs.now : local_now();
  try {
    nlohmann::ordered_json tagged;
    const nlohmann::ordered_json* messages = &inputs.messages;
    if (inputs.continue_final_message) {
      tagged = inputs.messages;
      if (!tag_final_message(tagged))
        return input_error("continue_final_message is set but the final message has no text to continue");
      messages = &tagged;
    }
    vars.emplace_back("messages", from_json(*messages));
    vars.emplace_back("add_generation_prompt", Value::boolean(inputs.add_generation_prompt));
    vars.emplace_back("bos_token", Value::literal(inputs.bos_token));
    vars.emplace_back("eos_token", Value::literal(inputs.eos_token));
    if (inputs.tools) vars.emplace_back("tools", from_json(*inputs.tools));
    for (const auto& [name, value] : inputs.extra_vars.items()) {
      for (const auto& v : vars)
        if (v.first == name) return input_error("chat template variable '" + name + "' is set by the renderer");
      vars.emplace_back(name, from_json(value));
    }
  } catch (const TemplateException& e) {
    return e.error();
  } catch (const std::bad_alloc&) {
    return TemplateError{ErrorKind::kLimit, "out of memory while converting the chat to template values", {}};
  }

  TemplateResult<MarkedText> out = template_.render(vars, options, stats);
  if (!out) return out.error();
  MarkedText text = std::move(out).value();
  if (inputs.continue_final_message) {
    const std::string& s = text.str();
    const size_t with_space = s.rfind(std::string(kContinueTag) + " ");
    if (with_space != std::string::npos) {
      text = text.substr(0, with_space);
    } else {
      const size_t bare = s.rfind(kContinueTag);
      if (bare == std::string::npos)
        return input_error(
            "continue_final_message is set but the final message does not appear in the chat after applying the "
            "chat template");
      text = strip_text(text.substr(0, bare), nullptr, false, true);
    }
  }
  return std::move(text).release();
}

TemplateResult<SegmentedText> render_chat_template(std::string_view source, const ChatTemplateInputs& inputs,
                                                   const RenderLimits& limits) {
  TemplateResult<ChatTemplateRenderer> r = ChatTemplateRenderer::create(source);
  if (!r) return r.error();
  return r->render(inputs, limits);
}

}  // namespace ubatch::jinja
