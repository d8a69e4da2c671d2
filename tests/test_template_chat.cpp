// ChatTemplateRenderer (chat_template_renderer.h): the variables a chat template sees, tools
// passed or not, bos/eos as literal text, chat_template_kwargs, continue_final_message, the
// error kinds, and concurrent renders of one parsed template.
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "template/chat_template_renderer.h"
#include "template/strftime.h"

namespace {

using nlohmann::ordered_json;
using ubatch::SegmentedText;
using ubatch::jinja::ChatTemplateInputs;
using ubatch::jinja::ChatTemplateRenderer;
using ubatch::jinja::ErrorKind;

const char* kChatML =
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

ChatTemplateInputs conversation() {
  ChatTemplateInputs in;
  in.messages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}])");
  in.now = ubatch::jinja::make_date(2026, 7, 26);
  return in;
}

std::string render_text(const std::string& source, const ChatTemplateInputs& in) {
  auto r = ubatch::jinja::render_chat_template(source, in);
  if (!r) return "ERROR(" + std::string(ubatch::jinja::error_kind_name(r.error().kind)) + "): " + r.error().message;
  return r->text;
}

TEST(TemplateChat, RendersTheConversationWithBosAsLiteral) {
  ChatTemplateInputs in = conversation();
  in.bos_token = "<s>";
  in.add_generation_prompt = true;
  auto r = ubatch::jinja::render_chat_template(kChatML, in);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello there<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_FALSE(r->segments.empty());
  EXPECT_TRUE(r->segments.front().parse_special);  // "<s><|im_start|>" is one literal run
  EXPECT_EQ(r->segments.front().end, 15u);
  EXPECT_FALSE(r->segments[1].parse_special);  // "user"
}

TEST(TemplateChat, ToolsAreAbsentUnlessGiven) {
  const std::string src = "{{ tools is defined }}{% if tools %}:{{ tools|map(attribute='function.name')|join(',') }}{% endif %}";
  ChatTemplateInputs in = conversation();
  EXPECT_EQ(render_text(src, in), "False");
  in.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}])");
  EXPECT_EQ(render_text(src, in), "True:f,g");
  in.tools = ordered_json(nullptr);  // passed as None
  EXPECT_EQ(render_text(src, in), "True");
}

TEST(TemplateChat, ExtraVariablesReachTheTemplate) {
  ChatTemplateInputs in = conversation();
  in.extra_vars = {{"enable_thinking", false}, {"reasoning_effort", "high"}};
  EXPECT_EQ(render_text("{{ enable_thinking }} {{ reasoning_effort }} {{ documents is defined }}", in), "False high False");
  in.extra_vars = {{"messages", ordered_json::array()}};
  EXPECT_EQ(render_text("x", in), "ERROR(runtime): chat template variable 'messages' is set by the renderer");
  in.extra_vars = ordered_json::array();
  EXPECT_EQ(render_text("x", in), "ERROR(runtime): extra_vars must be a JSON object");
}

TEST(TemplateChat, ContinueFinalMessageLeavesTheLastMessageOpen) {
  ChatTemplateInputs in = conversation();
  in.continue_final_message = true;
  EXPECT_EQ(render_text(kChatML, in), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello there");
  // A template that trims the content drops the space after the tag: the cut is right-stripped.
  in.messages.back()["content"] = "Hello there  ";
  EXPECT_EQ(render_text("{% for m in messages %}[{{ m.content|trim }}]{% endfor %}", in), "[Hi][Hello there");
  // Content as parts: the last text part is continued.
  in.messages.back()["content"] = ordered_json::parse(R"([{"type": "text", "text": "A"}, {"type": "text", "text": "B"}])");
  EXPECT_EQ(render_text("{% for p in messages[-1].content %}{{ p.text }}|{% endfor %}", in), "A|B");
  // The tag does not survive: the template dropped the final message.
  EXPECT_EQ(render_text("{{ messages[0].content }}", in).rfind("ERROR(runtime): continue_final_message", 0), 0u);
  in.messages.back()["content"] = 5;
  EXPECT_EQ(render_text(kChatML, in).rfind("ERROR(runtime): continue_final_message is set but the final message has no text", 0), 0u);
}

TEST(TemplateChat, ErrorKindsAreDistinct) {
  ChatTemplateInputs in = conversation();
  auto syntax = ChatTemplateRenderer::create("{% for %}");
  ASSERT_FALSE(syntax);
  EXPECT_EQ(syntax.error().kind, ErrorKind::kSyntax);
  auto raised = ubatch::jinja::render_chat_template(
      "{% if messages[0].role != 'system' %}{{ raise_exception('System message required') }}{% endif %}", in);
  ASSERT_FALSE(raised);
  EXPECT_EQ(raised.error().kind, ErrorKind::kRaiseException);
  EXPECT_EQ(raised.error().message, "System message required");
  auto runtime = ubatch::jinja::render_chat_template("{{ messages[0].content + 1 }}", in);
  ASSERT_FALSE(runtime);
  EXPECT_EQ(runtime.error().kind, ErrorKind::kRuntime);
  ubatch::jinja::RenderLimits tight;
  tight.fuel = 10;
  auto limited = ChatTemplateRenderer::create(kChatML)->render(in, tight);
  ASSERT_FALSE(limited);
  EXPECT_EQ(limited.error().kind, ErrorKind::kLimit);
}

TEST(TemplateChat, StrftimeNowDefaultsToTheLocalDate) {
  ChatTemplateInputs in = conversation();
  in.now.reset();
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char want[32];
  std::strftime(want, sizeof want, "%Y-%m-%d", &local);
  const std::string got = render_text("{{ strftime_now('%Y-%m-%d') }}", in);
  if (got != want) {  // the date may have changed between the two clock reads
    std::time_t t2 = std::time(nullptr);
    localtime_r(&t2, &local);
    std::strftime(want, sizeof want, "%Y-%m-%d", &local);
  }
  EXPECT_EQ(got, want);
}

TEST(TemplateChat, OneParsedTemplateRendersOnManyThreads) {
  auto renderer = ChatTemplateRenderer::create(kChatML);
  ASSERT_TRUE(renderer);
  const ChatTemplateInputs in = conversation();
  const std::string want = renderer->render(in)->text;
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) ok[t] += renderer->render(in)->text == want ? 1 : 0;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 200);
}

TEST(TemplateChat, ReadsVariableTellsWhetherTheTemplateRendersTools) {
  EXPECT_TRUE(ChatTemplateRenderer::create("{% if tools %}{{ tools|tojson }}{% endif %}")->reads_variable("tools"));
  EXPECT_FALSE(ChatTemplateRenderer::create(kChatML)->reads_variable("tools"));
}

}  // namespace
