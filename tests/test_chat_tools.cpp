// Tool-call formats (src/chat/): detection from the corpus templates, parsing the calls each
// template renders, the call grammars (accept the corpus's own call text, refuse unknown
// functions and invalid arguments, auto lets text through), streaming deltas equal to the
// unstreamed parse, and the generic format's prompt text.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/generic_tools.h"
#include "chat/reasoning.h"
#include "chat/tool_call_grammar.h"
#include "chat/tool_call_parser.h"
#include "chat/tool_call_stream.h"
#include "chat/tool_format.h"
#include "grammar_helpers.h"
#include "support.h"

namespace ubatch::chat {
namespace {

using ojson = nlohmann::ordered_json;

ojson read_json(const std::string& path) {
  std::ifstream in(path);
  return ojson::parse(in);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<ToolDef> tools_from(const ojson& tools) {
  std::vector<ToolDef> out;
  for (const ojson& t : tools) {
    ToolDef d;
    d.name = t["function"]["name"].get<std::string>();
    d.description = t["function"].value("description", "");
    d.parameters = t["function"]["parameters"];
    d.raw = t;
    out.push_back(d);
  }
  return out;
}

// The two tools of the corpus (cases.json): get_weather(city, unit?), search_files(path, query, …).
std::vector<ToolDef> corpus_tools() {
  return tools_from(ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search_files", "description": "Search text files under a directory.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "query": {"type": "string"},
       "max_results": {"type": "integer", "default": 10}, "recursive": {"type": "boolean"},
       "min_score": {"type": "number"}, "extensions": {"type": "array", "items": {"type": "string"}}},
       "required": ["path", "query"]}}}])"));
}

// The format each corpus template is detected as (generic: its calls are in no format we parse).
const std::map<std::string, std::string> kExpectedFormat = {
    {"Apertus-8B-Instruct", "apertus"},
    {"Apriel-1.6-15b-Thinker-fixed", "apriel"},
    {"Bielik-11B-v3.0-Instruct", "hermes"},
    {"Cohere2MoE", "command-a"},
    {"CohereForAI-c4ai-command-r-plus-tool_use", "command-r"},
    {"GigaChat3.1-10B-A1.8B", "gigachat"},
    {"Kimi-K2-Instruct", "kimi-k2"},
    {"MiMo-VL", "hermes"},
    {"MiniMax-M1", "minimax-m1"},
    {"Mistral-Small-3.2-24B-Instruct-2506", "mistral"},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "qwen3-xml"},
    {"NVIDIA-Nemotron-Nano-v2", "nemotron-v2"},
    {"Qwen-QwQ-32B", "hermes"},
    {"Qwen-Qwen2.5-7B-Instruct", "hermes"},
    {"Qwen3-Coder", "qwen3-xml"},
    {"Qwen3.5-4B", "qwen3-xml"},
    {"Reka-Edge", "hermes"},
    {"StepFun3.5-Flash", "qwen3-xml"},
    {"fireworks-ai-llama-3-firefunction-v2", "firefunction-v2"},
    {"ibm-granite-granite-4.0", "hermes"},
    {"ibm-granite-granite-4.1", "hermes"},
    {"meetkai-functionary-medium-v3.1", "functionary-v3.1"},
    {"meta-llama-Llama-3.1-8B-Instruct", "llama3"},
    {"meta-llama-Llama-3.3-70B-Instruct", "llama3"},
    {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral"},
    {"moonshotai-Kimi-K2", "kimi-k2"},
    {"openbmb-MiniCPM5-1B", "minicpm"},
    {"poolside-Laguna-S-2.1", "glm"},
    {"poolside-Laguna-XS-2.1", "glm"},
    {"poolside-Laguna-XS.2", "glm"},
    {"tencent-Hy3", "hy3"},
    {"unsloth-Apriel-1.5", "apriel"},
    {"unsloth-mistral-Devstral-Small-2507", "mistral"},
    {"upstage-Solar-Open-100B", "solar-open"},
};

// Every corpus template is detected as listed, and where its rendering of an assistant's
// tool calls (c6c: two parallel calls; c6a: one) is in the expected output, the parser reads
// those calls back with their arguments.
TEST(ToolFormats, CorpusTemplatesDetectedAndTheirCallsParsed) {
  UBATCH_REQUIRE_REFERENCE();
  const std::string dir = test::reference_path("templates/");
  const ojson expected = read_json(dir + "expected.json");
  const std::vector<ToolDef> tools = corpus_tools();
  int parsed = 0;
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const std::string id = it.key();
    SCOPED_TRACE(id);
    const ToolFormat& f = detect_tool_format(read_text(dir + id + ".jinja"));
    const auto want = kExpectedFormat.find(id);
    EXPECT_EQ(std::string(f.id), want == kExpectedFormat.end() ? "generic" : want->second);
    if (f.id == "generic") continue;
    bool two = true;
    const ojson* result = &it.value()["c6c_parallel_calls_tool_last"];
    if (!result->contains("output")) {
      result = &it.value()["c6a_tool_history_args_object"];
      two = false;
    }
    if (!result->contains("output")) continue;  // the template cannot render tool history
    const std::string out = (*result)["output"].get<std::string>();
    // The calls start at one of the trigger's occurrences (others may be in the instructions).
    CallScan scan;
    bool found = false;
    size_t user = out.find("Weather in Paris, and find");
    if (user == std::string::npos) user = out.find("What's the weather in Paris?");
    ASSERT_NE(user, std::string::npos);
    for (size_t p = out.find(f.trigger, user); p != std::string::npos && !found; p = out.find(f.trigger, p + 1)) {
      scan = scan_tool_calls(f, std::string_view(out).substr(p), tools, true);
      found = (scan.state == CallScan::State::Done || scan.text_after) && !scan.calls.empty() &&
              scan.calls[0].name == "get_weather";
    }
    ASSERT_TRUE(found) << out;
    ASSERT_GE(scan.calls.size(), 1u);
    EXPECT_EQ(scan.calls[0].name, "get_weather");
    EXPECT_EQ(ojson::parse(scan.calls[0].arguments)["city"], "Paris");
    if (two && !f.single_call) {
      ASSERT_EQ(scan.calls.size(), 2u);
      EXPECT_EQ(scan.calls[1].name, "search_files");
      EXPECT_EQ(ojson::parse(scan.calls[1].arguments),
                ojson::parse(R"({"path": "/home/user/docs", "query": "Paris"})"));
    }
    ++parsed;
  }
  EXPECT_GE(parsed, 28);
}

TEST(ToolParser, TextBeforeCallsIsContentAndMalformedCallsAreText) {
  const std::vector<ToolDef> tools = corpus_tools();
  const ToolFormat& hermes = *find_tool_format("hermes");
  ParsedReply r = parse_tool_calls(
      hermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n",
      tools);
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Oslo\"}");  // the bytes the model wrote
  // Member order does not matter; arguments given as a JSON string are read.
  r = parse_tool_calls(
      hermes, "<tool_call>{\"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\", \"name\": \"get_weather\"}</tool_call>",
      tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Rome\"}");
  for (const char* bad : {
           "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": }}</tool_call>",  // bad JSON
           "<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call>",                 // unknown function
           "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>",           // not an object
           "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call> and more",   // text after
           "<tool_call>{\"name\": \"get_weather\", \"argum",                                   // cut short
           // an unknown function after a valid call, then cut: malformed, not "cut inside calls"
           "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>"
           "<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call><tool_",
       }) {
    SCOPED_TRACE(bad);
    r = parse_tool_calls(hermes, bad, tools);
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, bad);
  }
  // Cut inside a later call (max_tokens, a stop string): the complete calls stay, the cut one is dropped.
  r = parse_tool_calls(hermes,
                       "Looking. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"
                       "</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"argum",
                       tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(r.content, "Looking.");
  // A call equal to an earlier one (same name, same arguments as JSON values) is dropped.
  r = parse_tool_calls(hermes,
                       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>"
                       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":  \"Oslo\"}}</tool_call>"
                       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>"
                       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>",
                       tools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].arguments, "{\"city\": \"Rome\"}");
  // The generic format: only a reply that starts with the object is a call.
  const ToolFormat& generic = generic_tool_format();
  r = parse_tool_calls(generic, " {\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]}",
                       tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "");
  r = parse_tool_calls(generic, "Sure: {\"tool_calls\": []}", tools);
  EXPECT_TRUE(r.calls.empty());
  // Mistral v3's array form after [TOOL_CALLS].
  r = parse_tool_calls(*find_tool_format("mistral"),
                       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
                       "{\"name\": \"search_files\", \"arguments\": {\"path\": \"/\", \"query\": \"x\"}}]",
                       tools);
  EXPECT_EQ(r.calls.size(), 2u);
}

// The grammar of every format accepts the call text its templates render (the corpus's
// spacing), refuses a function that is not among the tools and arguments that miss a
// required property.
TEST(ToolGrammar, EveryFormatAcceptsItsOwnCallsAndRefusesInvalidOnes) {
  const std::vector<ToolDef> tools = corpus_tools();
  auto spellable = [](std::string_view) { return true; };
  struct Case {
    const char* format;
    std::string good, unknown_fn, missing_arg;
  };
  const std::vector<Case> cases = {
      {"hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\"}}\n</tool_call>"},
      {"llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}",
       "{\"name\": \"get_time\", \"parameters\": {}}",
       "{\"name\": \"search_files\", \"parameters\": {\"path\": \"/\"}}"},
      {"mistral", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "[TOOL_CALLS]get_time[ARGS]{}",
       "[TOOL_CALLS]get_weather[ARGS]{}"},
      {"qwen3-xml",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
       "<tool_call>\n<function=search_files>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>"},
      {"generic", "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}",
       "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {}}]}",
       "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {}}]}"},
      {"phi4", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]<|/tool_call|>",
       "<|tool_call|>[{\"name\": \"x\", \"arguments\": {}}]<|/tool_call|>",
       "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {}}]<|/tool_call|>"},
      {"functionary-v3.1", "<function=get_weather>{\"city\": \"Paris\"}</function>", "<function=x>{}</function>",
       "<function=get_weather>{}</function>"},
      {"kimi-k2",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": "
       "\"Paris\"}<|tool_call_end|><|tool_calls_section_end|>",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.x:0<|tool_call_argument_begin|>{}<|tool_call_end|><|"
       "tool_calls_section_end|>",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{}<|tool_"
       "call_end|><|tool_calls_section_end|>"},
      {"glm", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
       "<tool_call>x\n</tool_call>", "<tool_call>search_files\n</tool_call>"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.format);
    const ToolFormat& f = *find_tool_format(c.format);
    ToolRequest req;
    req.tools = tools;
    req.choice.mode = ToolChoice::Mode::Required;
    Result<ToolGrammar> g = tool_call_grammar(f, req, spellable);
    ASSERT_TRUE(g) << g.message();
    EXPECT_TRUE(g->prefill.empty());
    auto compiled = test::compile_gbnf(g->gbnf);
    ASSERT_NE(compiled, nullptr);
    EXPECT_TRUE(test::matches(compiled, c.good)) << g->gbnf;
    EXPECT_FALSE(test::is_prefix(compiled, c.unknown_fn));
    EXPECT_FALSE(test::matches(compiled, c.missing_arg));
    EXPECT_FALSE(test::matches(compiled, "Hello"));
    // The text of a call the grammar accepts parses back to that call.
    const ParsedReply back = parse_tool_calls(f, c.good, tools);
    ASSERT_EQ(back.calls.size(), 1u);
    EXPECT_EQ(back.calls[0].name, "get_weather");
    // auto: free text, text then a call, and the call alone are all sentences.
    req.choice.mode = ToolChoice::Mode::Auto;
    Result<ToolGrammar> a = tool_call_grammar(f, req, spellable);
    ASSERT_TRUE(a) << a.message();
    auto compiled_auto = test::compile_gbnf(a->gbnf);
    ASSERT_NE(compiled_auto, nullptr);
    EXPECT_TRUE(test::matches(compiled_auto, "It is sunny."));
    EXPECT_TRUE(test::matches(compiled_auto, c.good));
    EXPECT_FALSE(test::matches(compiled_auto, c.missing_arg));
    if (!f.trigger_at_start) {
      EXPECT_TRUE(test::matches(compiled_auto, "Let me look.\n" + c.good));
    }
  }
}

TEST(ToolGrammar, NamedFunctionParallelCallsAndUnspellableMarkers) {
  const std::vector<ToolDef> tools = corpus_tools();
  auto spellable = [](std::string_view) { return true; };
  const ToolFormat& hermes = *find_tool_format("hermes");
  ToolRequest req;
  req.tools = tools;
  req.choice = {ToolChoice::Mode::Named, "search_files"};
  Result<ToolGrammar> g = tool_call_grammar(hermes, req, spellable);
  ASSERT_TRUE(g) << g.message();
  auto named = test::compile_gbnf(g->gbnf);
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string search =
      "<tool_call>\n{\"name\": \"search_files\", \"arguments\": {\"path\": \"/\", \"query\": \"a\"}}\n</tool_call>";
  EXPECT_FALSE(test::matches(named, weather));
  EXPECT_TRUE(test::matches(named, search));
  EXPECT_TRUE(test::matches(named, search + "\n" + search));  // parallel_tool_calls defaults to true
  req.parallel = false;
  auto single = test::compile_gbnf(tool_call_grammar(hermes, req, spellable)->gbnf);
  EXPECT_FALSE(test::matches(single, search + "\n" + search));
  req.choice = {ToolChoice::Mode::Named, "nope"};
  EXPECT_FALSE(tool_call_grammar(hermes, req, spellable));
  // Mistral's markers are control tokens: [TOOL_CALLS] goes to the prompt, the calls are a
  // JSON array (the inner [ARGS] cannot be written), and the parser reads that back.
  req.choice = {ToolChoice::Mode::Required, ""};
  req.parallel = true;
  auto no_markers = [](std::string_view s) { return s.find('[') != 0 && s.find("<|") != 0; };
  const ToolFormat& mistral = *find_tool_format("mistral");
  Result<ToolGrammar> m = tool_call_grammar(mistral, req, no_markers);
  ASSERT_TRUE(m) << m.message();
  EXPECT_EQ(m->prefill, "[TOOL_CALLS]");
  auto mg = test::compile_gbnf(m->gbnf);
  const std::string reply = "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]";
  EXPECT_TRUE(test::matches(mg, reply)) << m->gbnf;
  EXPECT_EQ(parse_tool_calls(mistral, m->prefill + reply, tools).calls.size(), 1u);
  // auto with an unspellable trigger: no grammar, the reply is parsed afterwards.
  req.choice.mode = ToolChoice::Mode::Auto;
  Result<ToolGrammar> free = tool_call_grammar(mistral, req, no_markers);
  ASSERT_TRUE(free);
  EXPECT_TRUE(free->gbnf.empty());
}

// A prompt that ends inside an open <think> block: required calls come after the reasoning.
TEST(ToolGrammar, RequiredCallsAfterAnOpenReasoningBlock) {
  const std::vector<ToolDef> tools = corpus_tools();
  auto spellable = [](std::string_view) { return true; };
  ToolRequest req;
  req.tools = tools;
  req.choice.mode = ToolChoice::Mode::Required;
  Result<ToolGrammar> g = tool_call_grammar(*find_tool_format("hermes"), req, spellable, "</think>");
  ASSERT_TRUE(g) << g.message();
  auto compiled = test::compile_gbnf(g->gbnf);
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  EXPECT_TRUE(test::matches(compiled, "The user wants weather.\n</think>\n\n" + call)) << g->gbnf;
  EXPECT_TRUE(test::matches(compiled, "</think>" + call));
  EXPECT_FALSE(test::matches(compiled, call));                          // the block must be closed first
  EXPECT_FALSE(test::matches(compiled, "Thinking.</think>\nNo call."));  // and a call must follow
}

TEST(ToolGrammar, RuleRenamingLeavesLiteralsClassesAndCountsAlone) {
  EXPECT_EQ(prefix_gbnf_rules("root ::= \"a root\" [a-z-] ws{0,20} x-y # root\n", "t0-"),
            "t0-root ::= \"a root\" [a-z-] t0-ws{0,20} t0-x-y # root\n");
  EXPECT_EQ(prefix_gbnf_rules("r ::= \"\\\"q\" [\\]x]", "p-"), "p-r ::= \"\\\"q\" [\\]x]");
}

// Streaming: for many ways of cutting a reply into pieces, the deltas add up to the unstreamed
// parse (content, and per call one id and name, then arguments whose concatenation is the
// call's arguments) — constrained (each call sent once complete; valid replies or their cut
// prefixes only, as a grammar guarantees) and not (calls held until the reply ends).
// A reply that repeats a complete call (same function, arguments equal as JSON values) is
// found once the repeat is complete — not before, nor
// for different arguments, an unknown function or a cut call.
TEST(ToolCallParser, RepeatsACallOnceTheRepeatIsComplete) {
  const std::vector<ToolDef> tools = corpus_tools();
  const ToolFormat& generic = *find_tool_format("generic");
  const std::string first = "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
  const std::string repeat = ", {\"name\": \"get_weather\", \"arguments\": {\n  \"city\":\"Paris\"\n}}";
  const std::string reply = first + repeat;
  for (size_t n = 0; n + 1 < reply.size(); ++n)  // (the call's own "}" may or may not be needed)
    EXPECT_FALSE(repeats_a_call(generic, reply.substr(0, n), tools)) << reply.substr(0, n);
  EXPECT_TRUE(repeats_a_call(generic, reply, tools));
  EXPECT_TRUE(repeats_a_call(generic, reply + "]}", tools));
  EXPECT_FALSE(repeats_a_call(generic, first + ", {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}", tools));
  EXPECT_FALSE(repeats_a_call(generic, first + ", {\"name\": \"nope\", \"arguments\": {\"city\": \"Paris\"}}", tools));
  EXPECT_FALSE(repeats_a_call(generic, "Plain text", tools));
  const ToolFormat& hermes = *find_tool_format("hermes");
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  EXPECT_FALSE(repeats_a_call(hermes, call, tools));
  EXPECT_FALSE(repeats_a_call(hermes, call + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\"", tools));
  EXPECT_TRUE(repeats_a_call(hermes, call + "\n" + call, tools));
}

TEST(ToolStream, DeltasAddUpToTheUnstreamedReply) {
  const std::vector<ToolDef> tools = corpus_tools();
  struct Case {
    const char* format;
    std::string text;
    bool valid;  // a reply a grammar could produce
  };
  const std::vector<Case> cases = {
      {"hermes",
       "I will look.  \n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"search_files\", \"arguments\": {\"path\": \"/tmp\", \"query\": \"<tool_call>\"}}\n"
       "</tool_call>",
       true},
      {"hermes", "No call here, just <tool text and a < sign.", true},
      {"hermes", "Broken <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": 1,,}}</tool_call>", false},
      {"hermes", "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": 5}", false},
      {"generic", "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}", true},
      {"generic", "  {not json at all", false},
      {"hermes",  // cut by max_tokens inside the second call: the first is kept
       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>\n"
       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"ci",
       true},
      {"generic",  // a repeated call is dropped
       "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": "
       "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_weather\", \"arguments\": "
       "{\"city\": \"Rome\"}}]}",
       true},
      {"generic", "Plain {text}", true},
      {"qwen3-xml",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>", true},
      {"mistral",  // an unknown function after a valid call, then a cut marker (found by tool_call_fuzz)
       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]launch[ARGS]{\"x\": 1}[", false},
      {"mistral",
       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]search_files[ARGS]{\"path\": \"/\", \"query\": "
       "\"q\"}",
       true},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const ToolFormat& f = *find_tool_format(c.format);
    const ParsedReply want = parse_tool_calls(f, c.text, tools);
    for (int trial = 0; trial < 40; ++trial) {
      const bool constrained = trial % 2 == 1;
      if (constrained && !c.valid) continue;
      SCOPED_TRACE(std::string(c.format) + " trial " + std::to_string(trial) + ": " + c.text);
      ToolCallStream s(f, tools, "", constrained);
      std::string content;
      std::vector<ToolCall> calls;
      auto take = [&](const ToolStreamDelta& d) {
        content += d.content;
        for (const ToolCallDelta& cd : d.calls) {
          if (!cd.id.empty()) {
            ASSERT_EQ(cd.index, static_cast<int>(calls.size()));
            calls.push_back(ToolCall{cd.id, cd.name, ""});
          }
          ASSERT_LT(cd.index, static_cast<int>(calls.size()));
          calls[static_cast<size_t>(cd.index)].arguments += cd.arguments;
        }
      };
      for (size_t p = 0; p < c.text.size();) {
        const size_t n = trial == 0 ? 1 : 1 + rng() % 9;
        take(s.push(c.text.substr(p, n)));
        p += n;
      }
      take(s.finish());
      EXPECT_EQ(s.has_calls(), !want.calls.empty());
      EXPECT_EQ(content, want.content);
      ASSERT_EQ(calls.size(), want.calls.size());
      for (size_t k = 0; k < calls.size(); ++k) {
        EXPECT_EQ(calls[k].name, want.calls[k].name);
        EXPECT_EQ(calls[k].arguments, want.calls[k].arguments);
        EXPECT_EQ(calls[k].id.rfind("call_", 0), 0u);
      }
    }
  }
}

TEST(GenericTools, SystemTextAndHistoryAsText) {
  const std::vector<ToolDef> tools = corpus_tools();
  const ojson messages = ojson::parse(R"([
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 3}"}])");
  const ojson out = generic_tools_messages(messages, tools);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["role"], "system");
  EXPECT_EQ(out[0]["content"], generic_tools_system_text(tools));
  EXPECT_NE(out[0]["content"].get<std::string>().find("{\"name\":\"get_weather\""), std::string::npos);
  EXPECT_EQ(out[2]["content"], "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}]}");
  EXPECT_FALSE(out[2].contains("tool_calls"));
  EXPECT_EQ(out[3]["role"], "user");
  EXPECT_EQ(out[3]["content"], "Result of get_weather (call_1): {\"temp\": 3}");
  // The history's call text is a reply the generic grammar accepts, and parses back.
  const ParsedReply back = parse_tool_calls(generic_tool_format(), out[2]["content"].get<std::string>(), tools);
  ASSERT_EQ(back.calls.size(), 1u);
  EXPECT_EQ(back.calls[0].arguments, "{\"city\":\"Oslo\"}");
  // A system message gets the tools appended.
  const ojson with_system = generic_tools_messages(ojson::parse(R"([{"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"}])"),
                                                   tools);
  ASSERT_EQ(with_system.size(), 2u);
  EXPECT_EQ(with_system[0]["content"], "Be brief.\n\n" + generic_tools_system_text(tools));
}

}  // namespace
}  // namespace ubatch::chat

namespace ubatch::chat {
namespace {

// Reasoning blocks (reasoning.h): the split of whole replies, and the stream's pieces adding
// up to it for every way of cutting the reply.
TEST(Reasoning, SplitsTheBlockFromTheAnswer) {
  ReasoningSplit s = split_reasoning("\nThe user greets.\n</think>\n\nHello!", true);
  EXPECT_TRUE(s.has_reasoning);
  EXPECT_EQ(s.reasoning, "The user greets.");
  EXPECT_EQ(s.content, "Hello!");
  s = split_reasoning("  <think>plan</think>Answer", false);  // the reply opens the block itself
  EXPECT_EQ(s.reasoning, "plan");
  EXPECT_EQ(s.content, "Answer");
  s = split_reasoning("still thinking when max_tokens cut", true);  // never closed: all reasoning
  EXPECT_EQ(s.reasoning, "still thinking when max_tokens cut");
  EXPECT_EQ(s.content, "");
  s = split_reasoning("No block <think>here</think>", false);  // only a block that opens the reply
  EXPECT_FALSE(s.has_reasoning);
  EXPECT_EQ(s.content, "No block <think>here</think>");
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_EQ(parse_reasoning_format("deepseek"), ReasoningFormat::Deepseek);
  EXPECT_FALSE(parse_reasoning_format("DeepSeek").has_value());
}

TEST(Reasoning, StreamPiecesAddUpToTheSplit) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"\nThe user greets. </thin k>\n</think>\n\nHello <think> again", true},
      {"  <think> a </think> b ", false},
      {"<thi", false},
      {"<think>cut inside </thi", false},
      {"plain answer, no block", false},
      {"  \n ", true},
  };
  std::mt19937 rng(11);
  for (const auto& [text, open] : cases) {
    const ReasoningSplit want = split_reasoning(text, open);
    for (int trial = 0; trial < 30; ++trial) {
      SCOPED_TRACE(text + " trial " + std::to_string(trial));
      ReasoningStream s(open);
      std::string reasoning, content;
      for (size_t p = 0; p < text.size();) {
        const size_t n = trial == 0 ? 1 : 1 + rng() % 7;
        const ReasoningStream::Piece piece = s.push(text.substr(p, n));
        reasoning += piece.reasoning;
        content += piece.content;
        p += n;
      }
      const ReasoningStream::Piece tail = s.finish();
      EXPECT_EQ(reasoning + tail.reasoning, want.reasoning);
      EXPECT_EQ(content + tail.content, want.content);
    }
  }
}

}  // namespace
}  // namespace ubatch::chat
