// Utf8StreamDecoder: multi-byte characters split across pushes are held back, never emitted
// in halves; invalid bytes become U+FFFD (one per maximal ill-formed subpart).
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ubatch {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

bool is_valid_utf8_ref(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const tokenizer::Utf8Scan r = tokenizer::utf8_scan(std::string_view(s).substr(i));
    if (r.kind != tokenizer::Utf8Scan::COMPLETE) return false;
    i += r.len;
  }
  return true;
}

TEST(Utf8StreamDecoder, AsciiPassesThrough) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("Hello"), "Hello");
  EXPECT_EQ(d.push(", world\n"), ", world\n");
  EXPECT_EQ(d.flush(), "");
}

TEST(Utf8StreamDecoder, EveryMultiByteCharacterSplitAtEveryByte) {
  // 2-, 3- and 4-byte characters: é, €, 日, 🦙 (U+1F999), and the largest code point.
  for (const std::string ch : {"\xC3\xA9", "\xE2\x82\xAC", "\xE6\x97\xA5", "\xF0\x9F\xA6\x99",
                               "\xF4\x8F\xBF\xBF"}) {
    Utf8StreamDecoder d;
    std::string out;
    for (size_t k = 0; k + 1 < ch.size(); ++k) {
      EXPECT_EQ(d.push(ch.substr(k, 1)), "") << "byte " << k << " of a " << ch.size() << "-byte char";
    }
    out += d.push(ch.substr(ch.size() - 1));
    EXPECT_EQ(out, ch);
    EXPECT_EQ(d.flush(), "");
  }
}

TEST(Utf8StreamDecoder, SplitInsideTextKeepsCompletePrefix) {
  const std::string text = "a\xE6\x97\xA5" "b\xF0\x9F\xA6\x99" "c";  // a日b🦙c
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Utf8StreamDecoder d;
    const std::string first = d.push(text.substr(0, cut));
    EXPECT_TRUE(is_valid_utf8_ref(first)) << "cut " << cut;
    const std::string second = d.push(text.substr(cut));
    EXPECT_EQ(first + second + d.flush(), text) << "cut " << cut;
  }
}

TEST(Utf8StreamDecoder, IncompleteAtEndFlushesAsReplacement) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("x\xF0\x9F\xA6"), "x");
  EXPECT_EQ(d.flush(), kFffd);
  EXPECT_EQ(d.flush(), "");  // nothing left
  EXPECT_EQ(d.push("y"), "y");
}

TEST(Utf8StreamDecoder, InvalidBytesBecomeReplacementImmediately) {
  Utf8StreamDecoder d;
  // Lone continuation byte, bytes that never appear in UTF-8, an overlong, a surrogate.
  EXPECT_EQ(d.push("a\x80" "b"), "a" + kFffd + "b");
  EXPECT_EQ(d.push("\xFF\xFE"), kFffd + kFffd);
  EXPECT_EQ(d.push("\xC0\xAF"), kFffd + kFffd);      // C0 never valid; AF lone continuation
  EXPECT_EQ(d.push("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // U+D800: ED then A0 is invalid
  EXPECT_EQ(d.push("\xF5"), kFffd);                  // above U+10FFFF
  EXPECT_EQ(d.flush(), "");
}

TEST(Utf8StreamDecoder, TruncatedSequenceFollowedByAsciiIsOneReplacement) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("\xE6\x97"), "");       // could still become 日
  EXPECT_EQ(d.push("z"), kFffd + "z");     // it cannot any more: one U+FFFD for E6 97
  EXPECT_EQ(d.flush(), "");
}

TEST(Utf8StreamDecoder, OutputAlwaysValidForArbitraryBytes) {
  // Every byte value in every position of a short stream, pushed one at a time.
  for (int a = 0; a < 256; ++a) {
    for (int b : {0x00, 0x41, 0x80, 0x9F, 0xA0, 0xBF, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xFF}) {
      Utf8StreamDecoder d;
      std::string out = d.push(std::string(1, static_cast<char>(a)));
      out += d.push(std::string(1, static_cast<char>(b)));
      out += d.push("\x80\x80");
      out += d.flush();
      EXPECT_TRUE(is_valid_utf8_ref(out)) << a << " " << b;
    }
  }
}

TEST(Utf8Scan, ClassifiesPerTable37) {
  using tokenizer::Utf8Scan;
  using tokenizer::utf8_scan;
  EXPECT_EQ(utf8_scan("A").kind, Utf8Scan::COMPLETE);
  EXPECT_EQ(utf8_scan("\xC3\xA9").len, 2u);
  EXPECT_EQ(utf8_scan("\xE0\xA0\x80").kind, Utf8Scan::COMPLETE);  // U+0800
  EXPECT_EQ(utf8_scan("\xE0\x9F\x80").kind, Utf8Scan::INVALID);   // overlong
  EXPECT_EQ(utf8_scan("\xF4\x90\x80\x80").kind, Utf8Scan::INVALID);  // > U+10FFFF
  EXPECT_EQ(utf8_scan("\xF0\x9F").kind, Utf8Scan::INCOMPLETE);
  EXPECT_EQ(utf8_scan("\xF0\x9F\x41").len, 2u);  // maximal subpart F0 9F
}

}  // namespace
}  // namespace ubatch
