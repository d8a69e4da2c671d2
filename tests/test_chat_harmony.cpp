// gpt-oss's harmony channels (src/chat/harmony.h): the analysis channel as reasoning, the final
// channel as content, messages to functions.NAME as calls; text that is not harmony as content;
// the stream gives the same reading however the reply is split, and never sends a call before
// its message ends.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "chat/harmony.h"

namespace ubatch::chat {
namespace {

std::vector<ToolDef> weather_tools() {
  ToolDef t;
  t.name = "get_weather";
  t.parameters = nlohmann::ordered_json::parse(R"({"type":"object","properties":{"city":{"type":"string"}}})");
  ToolDef u;
  u.name = "get_time";
  return {t, u};
}

// The stream's pieces joined.
HarmonyReply streamed(const std::vector<std::string>& pieces, const std::vector<ToolDef>& tools) {
  HarmonyStream s(tools);
  HarmonyReply out;
  auto add = [&](const HarmonyStream::Piece& p) {
    out.reasoning += p.reasoning;
    out.content += p.content;
    out.calls.insert(out.calls.end(), p.calls.begin(), p.calls.end());
  };
  for (const std::string& p : pieces) add(s.push(p));
  add(s.finish());
  return out;
}

void expect_same(const HarmonyReply& a, const HarmonyReply& b, const std::string& where) {
  EXPECT_EQ(a.reasoning, b.reasoning) << where;
  EXPECT_EQ(a.content, b.content) << where;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << where;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << where;
  }
}

const std::vector<std::string>& sample_replies() {
  static const std::vector<std::string> replies = {
      "<|channel|>analysis<|message|>The user greets. Reply briefly.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hello! How can I help?",
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
      " to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>",
      "<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis<|message|>two<|end|>"
      "<|start|>assistant<|channel|>final<|message|>a < b and <|x|> stay text<|return|>",
      "just text, no header <| not a marker",
      "<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{\"a\": 1}<|call|>",
      "<|channel|>analysis<|message|>cut before the answ",
      "<|channel|>final<|message|>answer<|end|>\n<|start|>assistant<|channel|>commentary<|message|>preamble",
  };
  return replies;
}

TEST(ChatHarmony, DetectsTheTemplate) {
  std::ifstream in(std::string(UBATCH_TESTS_DIR) + "/data/harmony.jinja", std::ios::binary);
  const std::string harmony((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(harmony.empty());
  EXPECT_TRUE(template_is_harmony(harmony));
  EXPECT_FALSE(template_is_harmony("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"));
  EXPECT_FALSE(template_is_harmony("<think></think>"));
}

TEST(ChatHarmony, AnalysisIsReasoningFinalIsContent) {
  const HarmonyReply r = parse_harmony(sample_replies()[0], weather_tools());
  EXPECT_TRUE(r.has_reasoning);
  EXPECT_EQ(r.reasoning, "The user greets. Reply briefly.");
  EXPECT_EQ(r.content, "Hello! How can I help?");
  EXPECT_TRUE(r.calls.empty());
}

TEST(ChatHarmony, CommentaryToAFunctionIsACall) {
  const HarmonyReply r = parse_harmony(sample_replies()[1], weather_tools());
  EXPECT_EQ(r.reasoning, "Need the weather.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Paris\"}");
  // The recipient in the role part of the header, and a written <|call|>.
  const HarmonyReply t = parse_harmony(sample_replies()[2], weather_tools());
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0].name, "get_time");
  EXPECT_EQ(t.calls[0].arguments, "{}");
  EXPECT_FALSE(t.has_reasoning);
}

TEST(ChatHarmony, SeveralMessagesOfOneKindAreJoined) {
  const HarmonyReply r = parse_harmony(sample_replies()[3], {});
  EXPECT_EQ(r.reasoning, "one\ntwo");
  EXPECT_EQ(r.content, "a < b and <|x|> stay text");
  const HarmonyReply c = parse_harmony(sample_replies()[7], {});
  EXPECT_EQ(c.content, "answer\n\npreamble");  // the "\n" between messages is text outside them
}

TEST(ChatHarmony, WhatIsNotACallIsContent) {
  // Not harmony at all.
  HarmonyReply r = parse_harmony(sample_replies()[4], weather_tools());
  EXPECT_EQ(r.content, sample_replies()[4]);
  EXPECT_FALSE(r.has_reasoning);
  // A function not among the tools; no tools at all; arguments that are not an object or cut.
  r = parse_harmony(sample_replies()[5], weather_tools());
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "{\"a\": 1}");
  r = parse_harmony(sample_replies()[1], {});
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "{\"city\": \"Paris\"}");
  r = parse_harmony("<|channel|>commentary to=functions.get_weather<|message|>[1]", weather_tools());
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "[1]");
  r = parse_harmony("<|channel|>commentary to=functions.get_weather<|message|>{\"city\": \"Pa", weather_tools());
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "{\"city\": \"Pa");
  // A reply cut inside its reasoning, or inside a header.
  r = parse_harmony(sample_replies()[6], {});
  EXPECT_EQ(r.reasoning, "cut before the answ");
  EXPECT_EQ(r.content, "");
  r = parse_harmony("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>fin", {});
  EXPECT_EQ(r.reasoning, "x");
  EXPECT_EQ(r.content, "");
}

TEST(ChatHarmony, StreamSplitAtEveryPositionEqualsTheWhole) {
  const std::vector<ToolDef> tools = weather_tools();
  for (const std::string& reply : sample_replies()) {
    const HarmonyReply whole = parse_harmony(reply, tools);
    for (size_t cut = 0; cut <= reply.size(); ++cut)
      expect_same(streamed({reply.substr(0, cut), reply.substr(cut)}, tools), whole,
                  reply + " cut at " + std::to_string(cut));
    std::vector<std::string> bytes;
    for (char c : reply) bytes.emplace_back(1, c);
    expect_same(streamed(bytes, tools), whole, reply + " byte by byte");
    std::mt19937 rng(7);
    for (int round = 0; round < 20; ++round) {
      std::vector<std::string> pieces;
      for (size_t i = 0; i < reply.size();) {
        const size_t n = std::min<size_t>(reply.size() - i, 1 + rng() % 12);
        pieces.push_back(reply.substr(i, n));
        i += n;
      }
      expect_same(streamed(pieces, tools), whole, reply + " random pieces");
    }
  }
}

TEST(ChatHarmony, ReplyStartsWhereTheGenerationPromptLeftTheHeader) {
  const std::string before = "<|start|>user<|message|>Hi<|end|>";
  EXPECT_EQ(harmony_reply_start(before + "<|start|>assistant"), "");
  EXPECT_EQ(harmony_reply_start(before + "<|start|>assistant<|channel|>final<|message|>"), "<|channel|>final<|message|>");
  EXPECT_EQ(harmony_reply_start(before + "<|start|>assistant<|channel|>analysis"), "<|channel|>analysis");
  EXPECT_EQ(harmony_reply_start(before + "<|start|>assistant to=functions.f"), " to=functions.f");
  // Not a header left open: a continued message's text, a closed message, no assistant turn.
  EXPECT_EQ(harmony_reply_start(before + "<|start|>assistant<|channel|>final<|message|>Hello"), "");
  EXPECT_EQ(harmony_reply_start(before + "<|start|>assistant<|channel|>final<|message|>Hello<|end|>"), "");
  EXPECT_EQ(harmony_reply_start(before), "");
  EXPECT_EQ(harmony_reply_start(before + "<|start|>assistantX"), "");
  // The reply is read from that start.
  const HarmonyReply r = parse_harmony("<|channel|>final<|message|>" + std::string("Hello"), {});
  EXPECT_EQ(r.content, "Hello");
}

TEST(ChatHarmony, StreamSendsReasoningAsItComesAndCallsWhole) {
  const std::vector<ToolDef> tools = weather_tools();
  HarmonyStream s(tools);
  EXPECT_TRUE(s.push("<|channel|>analysis<|message|>Thinking").reasoning == "Thinking");
  EXPECT_EQ(s.push(" more<|").reasoning, " more");  // "<|" may start a marker: held back
  EXPECT_TRUE(s.push("end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>")
                  .empty());
  EXPECT_TRUE(s.push("{\"city\": \"Pa").empty());  // the call goes out whole, at its end
  EXPECT_TRUE(s.push("ris\"}").empty());
  const HarmonyStream::Piece end = s.finish();
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_TRUE(s.has_calls());
}

}  // namespace
}  // namespace ubatch::chat
