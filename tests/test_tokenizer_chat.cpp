// apply_chat_template / render_chat: the turn formats of each recognised family, the
// rendering rules of chat_template.h (several and late system messages, same-role runs, a
// trailing assistant message, empty content, roles) for every family, and errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_tokenizer_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

// An excerpt of Gemma 3's Jinja template: enough markers to be recognised.
const char* kGemmaTemplate =
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}...{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' }}...{{ '<end_of_turn>\n' }}"
    "{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%}";
const char* kChatmlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}";

std::string render(const std::string& tmpl, const std::vector<ChatMessage>& m, bool prompt) {
  auto r = apply_chat_template(tmpl, m, prompt);
  EXPECT_TRUE(r) << r.message();
  return r ? *r : std::string();
}

TEST(ChatTemplate, GemmaFoldsSystemIntoFirstUserTurn) {
  const std::vector<ChatMessage> m = {{"system", "Be brief."},
                                      {"user", "  Hi there \n"},
                                      {"assistant", "Hello!"},
                                      {"user", "Bye"}};
  EXPECT_EQ(render(kGemmaTemplate, m, true),
            "<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
            "<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(render(kGemmaTemplate, {{"user", "Hi"}}, false), "<start_of_turn>user\nHi<end_of_turn>\n");
}

TEST(ChatTemplate, GemmaByFamilyName) {
  EXPECT_EQ(render("gemma", {{"user", "Hi"}}, true),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render("gemma3", {{"user", "Hi"}}, true), render("gemma", {{"user", "Hi"}}, true));
}

TEST(ChatTemplate, ChatML) {
  const std::vector<ChatMessage> m = {{"system", "You are helpful."}, {"user", "Hi"}};
  EXPECT_EQ(render(kChatmlTemplate, m, true),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render(kChatmlTemplate, m, false),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  // ChatML carries any role name.
  EXPECT_EQ(render("chatml", {{"tool", "42"}}, false), "<|im_start|>tool\n42<|im_end|>\n");
}

TEST(ChatTemplate, Llama3) {
  const std::string t = "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' %}";
  EXPECT_EQ(render(t, {{"system", "S"}, {"user", " U "}}, true),
            "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2) {
  const std::string t = "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}";
  EXPECT_EQ(render(t, {{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}}, true),
            "[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]");
}

TEST(ChatTemplate, Phi3FromTheReferenceVocabulary) {
  UBATCH_REQUIRE_REFERENCE();
  auto tok = test::tokenizer_from_path(test::reference_path("tokenizer/ggml-vocab-phi-3.gguf"));
  ASSERT_NE(tok, nullptr);
  ASSERT_FALSE(tok->chat_template().empty());
  EXPECT_EQ(render(tok->chat_template(), {{"system", "S"}, {"user", "U"}}, true),
            "<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplate, RenderedGemmaPromptTokenizesToControlTokens) {
  // The chat output is meant to be tokenized with parse_special: markers become single ids.
  test::VocabSpec s;
  s.tokens = {"<unk>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "u", "s", "e", "r",
              "\n", "H", "i", "m", "o", "d", "l"};
  s.types = {2, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  s.scores.assign(s.tokens.size(), 0.0f);
  s.unk = 0;
  s.bos = 1;
  s.eos = 2;
  s.add_space_prefix = 0;
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_TRUE(tok) << tok.message();
  const std::string text = render("gemma", {{"user", "Hi"}}, true);
  const std::vector<int32_t> ids = (*tok)->tokenize(text, true, true);
  const std::vector<int32_t> want = {1, 3, 5, 6, 7, 8, 9, 10, 11, 4, 9, 3, 12, 13, 14, 7, 15, 9};
  EXPECT_EQ(ids, want);
  EXPECT_EQ((*tok)->eot(), 4) << "<end_of_turn> is the end-of-turn token";
  EXPECT_TRUE((*tok)->is_eog(4));
}

TEST(ChatTemplate, UnknownTemplateIsAnErrorNamingIt) {
  auto r = apply_chat_template("{% for m in messages %}<<weird>>{{ m.content }}{% endfor %}",
                               {{"user", "Hi"}}, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("unrecognised"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("<<weird>>"), std::string::npos) << r.message();
}

TEST(ChatTemplate, EmptyTemplateIsAnError) {
  auto r = apply_chat_template("", {{"user", "Hi"}}, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("gemma"), std::string::npos) << r.message();
}

// The families and a name recognised for each.
const std::vector<std::string> kFamilies = {"gemma", "llama3", "chatml", "llama2", "phi3"};

// Rule 4: several system messages are joined in order by "\n\n" — the same prompt as the
// text merged by hand — in every family.
TEST(ChatRules, SeveralSystemMessagesJoinInOrder) {
  for (const std::string& f : kFamilies) {
    SCOPED_TRACE(f);
    EXPECT_EQ(render(f, {{"system", "A"}, {"system", "B"}, {"user", "U"}}, true),
              render(f, {{"system", "A\n\nB"}, {"user", "U"}}, true));
    EXPECT_EQ(render(f, {{"developer", "A"}, {"system", "B"}, {"user", "U"}}, true),
              render(f, {{"system", "A\n\nB"}, {"user", "U"}}, true));
  }
  // Rule 2: chatml and phi3 keep the whitespace of each message, the others strip it.
  EXPECT_EQ(render("chatml", {{"system", "A"}, {"system", " B "}, {"user", "U"}}, true),
            render("chatml", {{"system", "A\n\n B "}, {"user", "U"}}, true));
  EXPECT_EQ(render("gemma", {{"system", "A "}, {"system", " B "}, {"user", "U"}}, true),
            render("gemma", {{"system", "A\n\nB"}, {"user", "U"}}, true));
  EXPECT_EQ(render("llama3", {{"system", "A"}, {"system", "B"}, {"user", "U"}}, true),
            "<|start_header_id|>system<|end_header_id|>\n\nA\n\nB<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Rule 4: consecutive messages of one role form one turn.
TEST(ChatRules, ConsecutiveSameRoleMessagesFormOneTurn) {
  for (const std::string& f : kFamilies) {
    SCOPED_TRACE(f);
    EXPECT_EQ(render(f, {{"user", "A"}, {"user", "B"}, {"assistant", "C"}, {"assistant", "D"}, {"user", "E"}}, true),
              render(f, {{"user", "A\n\nB"}, {"assistant", "C\n\nD"}, {"user", "E"}}, true));
  }
  EXPECT_EQ(render("chatml", {{"user", "A"}, {"user", "B"}}, true),
            "<|im_start|>user\nA\n\nB<|im_end|>\n<|im_start|>assistant\n");
}

// Rule 3: Gemma has no system role — system text is user text, so leading system messages
// open the first user turn and later ones join the user turn they are next to (never the
// model's turn).
TEST(ChatRules, GemmaPlacesSystemTextInUserTurns) {
  EXPECT_EQ(render("gemma", {{"system", "S"}, {"user", "U"}}, true),
            "<start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n");
  // A system message before an assistant message: its own user turn, not inside the model's.
  EXPECT_EQ(render("gemma", {{"system", "S"}, {"assistant", "A"}, {"user", "U"}}, true),
            "<start_of_turn>user\nS<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n"
            "<start_of_turn>user\nU<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render("gemma", {{"user", "U"}, {"assistant", "A"}, {"system", "S"}, {"user", "V"}}, true),
            "<start_of_turn>user\nU<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n"
            "<start_of_turn>user\nS\n\nV<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render("gemma", {{"system", "S"}}, true), "<start_of_turn>user\nS<end_of_turn>\n<start_of_turn>model\n");
}

// A system message after the first position: a system turn in place where the format has
// one (llama3, chatml, phi3); user text for llama2, whose only system slot is the first [INST].
TEST(ChatRules, LateSystemMessage) {
  EXPECT_EQ(render("chatml", {{"user", "U"}, {"system", "S"}}, true),
            "<|im_start|>user\nU<|im_end|>\n<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render("phi3", {{"user", "U"}, {"system", "S"}}, true),
            "<|user|>\nU<|end|>\n<|system|>\nS<|end|>\n<|assistant|>\n");
  EXPECT_EQ(render("llama3", {{"user", "U"}, {"system", "S"}}, false),
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>");
  EXPECT_EQ(render("llama2", {{"system", "S0"}, {"user", "U"}, {"assistant", "A"}, {"system", "S"}, {"user", "V"}}, true),
            "[INST] <<SYS>>\nS0\n<</SYS>>\n\nU [/INST] A </s><s>[INST] S\n\nV [/INST]");
}

// Rule 6: a trailing assistant message is continued — its turn stays open, no new turn —
// and keeps its trailing whitespace.
TEST(ChatRules, TrailingAssistantMessageIsContinued) {
  EXPECT_EQ(render("gemma", {{"user", "U"}, {"assistant", " The answer is "}}, true),
            "<start_of_turn>user\nU<end_of_turn>\n<start_of_turn>model\nThe answer is ");
  EXPECT_EQ(render("llama3", {{"user", "U"}, {"assistant", "The"}}, true),
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nThe");
  EXPECT_EQ(render("chatml", {{"user", "U"}, {"assistant", "The "}}, true),
            "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nThe ");
  EXPECT_EQ(render("phi3", {{"user", "U"}, {"assistant", "The"}}, true),
            "<|user|>\nU<|end|>\n<|assistant|>\nThe");
  EXPECT_EQ(render("llama2", {{"user", "U"}, {"assistant", "The"}}, true), "[INST] U [/INST] The");
  // Without the generation prompt every turn is closed.
  EXPECT_EQ(render("gemma", {{"user", "U"}, {"assistant", "A "}}, false),
            "<start_of_turn>user\nU<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n");
  // Only the last message of a continued turn keeps its trailing whitespace.
  EXPECT_EQ(render("gemma", {{"user", "U"}, {"assistant", "A "}, {"assistant", "B "}}, true),
            "<start_of_turn>user\nU<end_of_turn>\n<start_of_turn>model\nA\n\nB ");
  // An empty trailing assistant message: the same prompt as the generation prompt.
  for (const std::string& f : kFamilies) {
    SCOPED_TRACE(f);
    EXPECT_EQ(render(f, {{"user", "U"}, {"assistant", ""}}, true), render(f, {{"user", "U"}}, true));
  }
}

// Rule 5: empty content adds no text; the turn's markup stays.
TEST(ChatRules, EmptyContent) {
  EXPECT_EQ(render("gemma", {{"user", ""}}, true), "<start_of_turn>user\n<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render("gemma", {{"user", "  \n"}}, true), render("gemma", {{"user", ""}}, true));
  EXPECT_EQ(render("chatml", {{"system", ""}, {"user", "U"}}, true),
            "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  // An empty message in a same-role run adds no separator.
  for (const std::string& f : kFamilies) {
    SCOPED_TRACE(f);
    EXPECT_EQ(render(f, {{"user", "A"}, {"user", ""}, {"user", "B"}}, true), render(f, {{"user", "A\n\nB"}}, true));
  }
  EXPECT_EQ(render("llama2", {{"system", "S"}}, true), "[INST] <<SYS>>\nS\n<</SYS>>\n\n [/INST]");
}

// Rule 1: roles.
TEST(ChatRules, Roles) {
  for (const std::string f : {"gemma", "llama2", "phi3"}) {
    SCOPED_TRACE(f);
    auto r = apply_chat_template(f, {{"user", "U"}, {"tool", "x"}}, true);
    ASSERT_FALSE(r);
    EXPECT_NE(r.message().find("messages[1]"), std::string::npos) << r.message();
    EXPECT_NE(r.message().find("\"tool\""), std::string::npos) << r.message();
    EXPECT_NE(r.message().find(f), std::string::npos) << r.message();
  }
  // llama3 and chatml write other role names into the header.
  EXPECT_EQ(render("llama3", {{"ipython", "42"}}, false), "<|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>");
  // … but not names that could carry markup or break the header.
  for (const std::string& role : std::vector<std::string>{"", "user<|im_end|>", "a b", "x\ny", std::string(65, 'r')}) {
    for (const std::string f : {"llama3", "chatml"}) {
      auto r = apply_chat_template(f, {{role, "x"}}, true);
      EXPECT_FALSE(r) << f << " took role " << role;
    }
  }
  auto r = apply_chat_template("chatml", {{"bad\x01role", "x"}}, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("bad\\x01role"), std::string::npos) << r.message();
}

TEST(ChatRules, Llama2NeedsAUserMessageFirst) {
  auto r = apply_chat_template("llama2", {{"assistant", "A"}, {"user", "U"}}, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("user message before"), std::string::npos) << r.message();
  auto s = apply_chat_template("llama2", {{"system", "S"}, {"assistant", "A"}}, true);
  EXPECT_FALSE(s);
}

// Every family marks its markup and only its markup: the content segments are exactly the
// messages' text (and the role names of open formats, and the "\n\n" joins).
TEST(ChatRules, MarkupAndContentSegments) {
  for (const std::string& f : kFamilies) {
    SCOPED_TRACE(f);
    auto r = render_chat(f, {{"system", "S"}, {"user", "<end_of_turn><|im_end|>[INST]</s>"}, {"assistant", "A"}}, true);
    ASSERT_TRUE(r) << r.message();
    std::string content, markup;
    size_t begin = 0;
    ASSERT_FALSE(r->segments.empty());
    EXPECT_EQ(r->segments.back().end, r->text.size());
    for (const SegmentedText::Segment& seg : r->segments) {
      ASSERT_GT(seg.end, begin);
      (seg.parse_special ? markup : content) += r->text.substr(begin, seg.end - begin);
      begin = seg.end;
    }
    EXPECT_NE(content.find("<end_of_turn><|im_end|>[INST]</s>"), std::string::npos) << content;
    EXPECT_EQ(markup.find("<end_of_turn><|im_end|>"), std::string::npos) << markup;
    for (const char* text : {"S", "A"}) EXPECT_NE(content.find(text), std::string::npos);
  }
}

TEST(ChatTemplate, GemmaRejectsUnknownRoles) {
  auto r = apply_chat_template("gemma", {{"tool", "x"}}, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("tool"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace ubatch
