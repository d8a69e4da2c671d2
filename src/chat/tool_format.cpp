// The table of tool-call formats (tool_format.h) and their detection from template markers.
// Marker strings are facts of each model family's chat format, as its template renders an
// assistant's calls (checked against ../shared/reference/templates in tests/test_chat_tools.cpp).
#include "chat/tool_format.h"

namespace ubatch::chat {

namespace {

std::vector<ToolFormat> make_formats() {
  std::vector<ToolFormat> f;
  {
    ToolFormat g;
    g.id = "generic";
    g.syntax = CallSyntax::GenericObject;
    g.trigger = "{";
    g.trigger_at_start = true;
    f.push_back(g);
  }
  {
    ToolFormat t;  // Hermes 2 Pro, Qwen 2.5 / QwQ, MiMo, Granite 4, Bielik, Reka
    t.id = "hermes";
    t.syntax = CallSyntax::JsonObject;
    t.trigger = "<tool_call>";
    t.call_open = "<tool_call>\n";
    t.call_close = "\n</tool_call>";
    t.call_sep = "\n";
    f.push_back(t);
  }
  {
    ToolFormat t;  // Llama 3.1 / 3.2 / 3.3: a bare JSON object, one call
    t.id = "llama3";
    t.syntax = CallSyntax::JsonObject;
    t.trigger = "{";
    t.trigger_at_start = true;
    t.args_key = "parameters";
    t.args_key_aliases = {"arguments"};
    t.single_call = true;
    f.push_back(t);
  }
  {
    ToolFormat
        t;  // Mistral tokenizer v11+ (Mistral Small 3.2, Ministral 3, Devstral); also reads v3's [TOOL_CALLS][{…}]
    t.id = "mistral";
    t.syntax = CallSyntax::NameThenJson;
    t.trigger = "[TOOL_CALLS]";
    t.call_open = "[TOOL_CALLS]";
    t.name_end = "[ARGS]";
    t.id_open = "[CALL_ID]";
    t.id_end = "[ARGS]";
    f.push_back(t);
  }
  {
    ToolFormat t;  // Phi-4-mini
    t.id = "phi4";
    t.syntax = CallSyntax::JsonArray;
    t.trigger = "<|tool_call|>";
    t.section_open = "<|tool_call|>";
    t.section_close = "<|/tool_call|>";
    f.push_back(t);
  }
  {
    ToolFormat t;  // Functionary v3.1 (Llama 3.1 based)
    t.id = "functionary-v3.1";
    t.syntax = CallSyntax::NameThenJson;
    t.trigger = "<function=";
    t.call_open = "<function=";
    t.name_end = ">";
    t.call_close = "</function>";
    f.push_back(t);
  }
  {
    ToolFormat t;  // FireFunction v2
    t.id = "firefunction-v2";
    t.syntax = CallSyntax::JsonArray;
    t.trigger = "functools";
    t.section_open = "functools";
    f.push_back(t);
  }
  {
    ToolFormat t;  // Apriel 1.5 / 1.6
    t.id = "apriel";
    t.syntax = CallSyntax::JsonArray;
    t.trigger = "<tool_calls>";
    t.section_open = "<tool_calls>";
    t.section_close = "</tool_calls>";
    f.push_back(t);
  }
  {
    ToolFormat t;  // NVIDIA Nemotron Nano v2
    t.id = "nemotron-v2";
    t.syntax = CallSyntax::JsonArray;
    t.trigger = "<TOOLCALL>";
    t.section_open = "<TOOLCALL>";
    t.section_close = "</TOOLCALL>";
    f.push_back(t);
  }
  {
    ToolFormat t;  // MiniMax-M1: one JSON object per line
    t.id = "minimax-m1";
    t.syntax = CallSyntax::JsonObject;
    t.trigger = "<tool_calls>";
    t.section_open = "<tool_calls>\n";
    t.section_close = "\n</tool_calls>";
    t.call_sep = "\n";
    f.push_back(t);
  }
  {
    ToolFormat t;  // GigaChat 3.1
    t.id = "gigachat";
    t.syntax = CallSyntax::JsonObject;
    t.trigger = "<|function_call|>";
    t.call_open = "<|function_call|>";
    t.single_call = true;
    f.push_back(t);
  }
  {
    ToolFormat t;  // Cohere Command A (Cohere2)
    t.id = "command-a";
    t.syntax = CallSyntax::JsonArray;
    t.trigger = "<|START_ACTION|>";
    t.section_open = "<|START_ACTION|>";
    t.section_close = "<|END_ACTION|>";
    t.name_key = "tool_name";
    t.args_key = "parameters";
    f.push_back(t);
  }
  {
    ToolFormat t;  // Cohere Command R+ (tool_use template)
    t.id = "command-r";
    t.syntax = CallSyntax::JsonArray;
    t.trigger = "Action:";
    t.section_open = "Action:\n```json\n";
    t.section_close = "\n```";
    t.name_key = "tool_name";
    t.args_key = "parameters";
    f.push_back(t);
  }
  {
    ToolFormat t;  // Kimi K2
    t.id = "kimi-k2";
    t.syntax = CallSyntax::NameThenJson;
    t.trigger = "<|tool_calls_section_begin|>";
    t.section_open = "<|tool_calls_section_begin|>";
    t.section_close = "<|tool_calls_section_end|>";
    t.call_open = "<|tool_call_begin|>";
    t.name_end = "<|tool_call_argument_begin|>";
    t.call_close = "<|tool_call_end|>";
    t.name_prefix = "functions.";
    t.name_index_suffix = true;
    f.push_back(t);
  }
  {
    ToolFormat t;  // Upstage Solar Open
    t.id = "solar-open";
    t.syntax = CallSyntax::NameThenJson;
    t.trigger = "<|tool_calls|>";
    t.section_open = "<|tool_calls|>";
    t.section_close = "<|calls|>";
    t.call_open = "<|tool_call:begin|>";
    t.id_before_name = "<|tool_call:name|>";
    t.name_end = "<|tool_call:args|>";
    t.call_close = "<|tool_call:end|>";
    f.push_back(t);
  }
  {
    ToolFormat t;  // Apertus
    t.id = "apertus";
    t.syntax = CallSyntax::JsonNameMap;
    t.trigger = "<|tools_prefix|>";
    t.section_open = "<|tools_prefix|>";
    t.section_close = "<|tools_suffix|>";
    f.push_back(t);
  }
  {
    ToolFormat t;  // Qwen3-Coder, Qwen 3.5, StepFun 3.5, Nemotron 3 Nano
    t.id = "qwen3-xml";
    t.syntax = CallSyntax::XmlParams;
    t.trigger = "<tool_call>";
    t.call_open = "<tool_call>\n<function=";
    t.name_end = ">\n";
    t.param_open = "<parameter=";
    t.key_end = ">\n";
    t.value_end = "\n</parameter>\n";
    t.call_close = "</function>\n</tool_call>";
    t.call_sep = "\n";
    f.push_back(t);
  }
  {
    ToolFormat t;  // GLM 4.5 style (poolside Laguna)
    t.id = "glm";
    t.syntax = CallSyntax::XmlParams;
    t.trigger = "<tool_call>";
    t.call_open = "<tool_call>";
    t.name_end = "\n";
    t.param_open = "<arg_key>";
    t.key_end = "</arg_key>\n<arg_value>";
    t.value_end = "</arg_value>\n";
    t.call_close = "</tool_call>";
    t.call_sep = "\n";
    f.push_back(t);
  }
  {
    ToolFormat t;  // Tencent Hunyuan 3
    t.id = "hy3";
    t.syntax = CallSyntax::XmlParams;
    t.trigger = "<tool_calls:opensource>";
    t.section_open = "<tool_calls:opensource>\n";
    t.section_close = "</tool_calls:opensource>";
    t.call_open = "<tool_call:opensource>";
    t.name_end = "<tool_sep:opensource>\n";
    t.param_open = "<arg_key:opensource>";
    t.key_end = "</arg_key:opensource>\n<arg_value:opensource>";
    t.value_end = "</arg_value:opensource>\n";
    t.call_close = "</tool_call:opensource>";
    t.call_sep = "\n";
    f.push_back(t);
  }
  {
    ToolFormat t;  // MiniCPM 5
    t.id = "minicpm";
    t.syntax = CallSyntax::XmlParams;
    t.trigger = "<function name=\"";
    t.call_open = "<function name=\"";
    t.name_end = "\">";
    t.param_open = "<param name=\"";
    t.key_end = "\">";
    t.value_end = "</param>";
    t.call_close = "</function>";
    t.call_sep = "\n";
    f.push_back(t);
  }
  return f;
}

bool has(std::string_view s, std::string_view marker) { return s.find(marker) != std::string_view::npos; }

}  // namespace

const std::vector<ToolFormat>& tool_formats() {
  static const std::vector<ToolFormat> formats = make_formats();
  return formats;
}

const ToolFormat& generic_tool_format() { return tool_formats().front(); }

const ToolFormat* find_tool_format(std::string_view id) {
  for (const ToolFormat& f : tool_formats())
    if (f.id == id) return &f;
  return nullptr;
}

const ToolFormat& detect_tool_format(std::string_view t) {
  auto by = [](std::string_view id) -> const ToolFormat& { return *find_tool_format(id); };
  // Most specific markers first: several formats share "<tool_call>".
  if (has(t, "[TOOL_CALLS]")) return by("mistral");
  if (has(t, "<|tool_calls_section_begin|>")) return by("kimi-k2");
  if (has(t, "<|tool_call:begin|>")) return by("solar-open");
  if (has(t, "<|tools_prefix|>")) return by("apertus");
  if (has(t, "<|START_ACTION|>")) return by("command-a");
  if (has(t, "<tool_calls:opensource>") || (has(t, "<tool_calls{}>") && has(t, "opensource"))) return by("hy3");
  if (has(t, "<function=") && has(t, "<parameter=")) return by("qwen3-xml");
  if (has(t, "<arg_key>") && has(t, "<tool_call>")) return by("glm");
  if (has(t, "<function name=") && has(t, "<param name=")) return by("minicpm");
  if (has(t, "<function=") && has(t, "python_tag")) return by("functionary-v3.1");
  if (has(t, "functools[")) return by("firefunction-v2");
  if (has(t, "<TOOLCALL>")) return by("nemotron-v2");
  if (has(t, "<tool_calls>[")) return by("apriel");
  if (has(t, "<tool_calls>")) return by("minimax-m1");
  if (has(t, "<|function_call|>")) return by("gigachat");
  if (has(t, "Action:") && has(t, "```json")) return by("command-r");
  if (has(t, "<|tool|>") && has(t, "<|/tool|>")) return by("phi4");
  if (has(t, "<invoke name=")) return generic_tool_format();  // MiniMax-M3's XML calls: not parsed
  if (has(t, "<tool_call>")) return by("hermes");
  if (has(t, "<|start_header_id|>") && has(t, "\"parameters\"")) return by("llama3");
  return generic_tool_format();
}

}  // namespace ubatch::chat
