// Utf8StreamDecoder (declared in tokenizer.h): holds back an incomplete trailing character.
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ubatch {

using tokenizer::kReplacementChar;
using tokenizer::Utf8Scan;
using tokenizer::utf8_scan;

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  out.reserve(pending_.size());
  size_t i = 0;
  const std::string_view all(pending_);
  while (i < all.size()) {
    const Utf8Scan r = utf8_scan(all.substr(i));
    if (r.kind == Utf8Scan::INCOMPLETE) break;  // keep it until more bytes arrive
    if (r.kind == Utf8Scan::COMPLETE) {
      out.append(all.substr(i, r.len));
    } else {
      out.append(kReplacementChar);  // can never become valid: replace now
    }
    i += r.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8StreamDecoder::flush() {
  // What is left is at most one incomplete character: one replacement for it.
  std::string out = pending_.empty() ? std::string() : std::string(kReplacementChar);
  pending_.clear();
  return out;
}

}  // namespace ubatch
