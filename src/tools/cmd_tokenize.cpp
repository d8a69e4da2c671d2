// `ubatch tokenize [-m MODEL] [--no-bos] [--parse-special] [--pieces]`: reads all of stdin
// (bytes as they are, trailing newlines included) and prints its token ids, space separated,
// on one line. Loads only the vocabulary (no weights are touched). With --pieces, prints one
// "id<TAB>piece" line per token instead (pieces with special tokens rendered).
// Exit status 0, or 1 with the error on stderr.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/command.h"

namespace ubatch::tools {
namespace {

struct TokenizeOptions {
  std::string model;
  bool no_bos = false;
  bool parse_special = false;
  bool pieces = false;
};

int run_tokenize(const TokenizeOptions& o) {
  auto file = gguf::File::open(o.model);
  if (!file) {
    std::fprintf(stderr, "ubatch tokenize: %s\n", file.message().c_str());
    return 1;
  }
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) {
    std::fprintf(stderr, "ubatch tokenize: %s: %s\n", o.model.c_str(), tok.message().c_str());
    return 1;
  }
  std::ios::sync_with_stdio(false);
  const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const bool add_bos = !o.no_bos && (*tok)->add_bos_default();
  const std::vector<int32_t> ids = (*tok)->tokenize(text, add_bos, o.parse_special);
  std::string out;
  if (o.pieces) {
    for (int32_t id : ids) {
      out += std::to_string(id);
      out.push_back('\t');
      out += (*tok)->token_to_piece(id, /*special=*/true);
      out.push_back('\n');
    }
  } else {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out.push_back(' ');
      out += std::to_string(ids[i]);
    }
    out.push_back('\n');
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

UBATCH_REGISTER_COMMAND("tokenize", "Print the token ids of the text on standard input",
                        [](CLI::App& sub) {
                          auto o = std::make_shared<TokenizeOptions>();
                          o->model = default_model_path();
                          sub.add_option("-m,--model", o->model, "GGUF model (its vocabulary)")
                              ->capture_default_str();
                          sub.add_flag("--no-bos", o->no_bos, "Do not prepend BOS");
                          sub.add_flag("--parse-special", o->parse_special,
                                       "Recognise control tokens (e.g. <start_of_turn>) in the text");
                          sub.add_flag("--pieces", o->pieces,
                                       "Print one id and its piece per line instead");
                          return [o] { return run_tokenize(*o); };
                        });

}  // namespace
}  // namespace ubatch::tools
