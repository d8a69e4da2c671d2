// apply_chat_template: the turn formats of each recognised family, and errors.
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

TEST(ChatTemplate, GemmaRejectsUnknownRoles) {
  auto r = apply_chat_template("gemma", {{"tool", "x"}}, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("tool"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace ubatch
