// The body of POST /v1/embeddings (docs/API.md, "POST /v1/embeddings"), checked and turned
// into token ids, and the finishing of one pooled vector for the response: truncation to
// `dimensions`, L2 normalisation, and OpenAI's base64 encoding (little-endian float32).
// Internal to src/server/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/errors.h"

namespace ubatch {
class Tokenizer;
}

namespace ubatch::server {

struct EmbeddingLimits {
  int32_t n_ctx = 0;            // most tokens one input may have (one sequence's context)
  int32_t n_vocab = 0;          // token ids must be in [0, n_vocab)
  int32_t n_embd = 0;           // width of a vector; `dimensions` may not exceed it
  bool parse_special = true;    // text inputs: special-token text becomes special tokens
  size_t max_inputs = 2048;     // most inputs per request (OpenAI's limit)
};

struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;  // token ids of each input, in request order (each non-empty)
  std::vector<bool> truncated;               // [inputs] cut to n_ctx tokens ("truncate": true)
  bool base64 = false;                       // encoding_format "base64" (default "float")
  int32_t dimensions = 0;                    // > 0: keep the first `dimensions` components
  bool truncate = false;                     // cut inputs longer than n_ctx instead of refusing them
};

// Reads `input` (a string, an array of strings, an array of token ids, or an array of arrays
// of token ids), `encoding_format`, `dimensions`, `truncate`; `model` and `user` must be
// strings when present; other fields are ignored. Text is tokenized as a completion prompt
// (BOS as the model says, EOS appended when the model's tokenizer asks for it).
// Errors (400, naming the field): a missing, empty or mistyped input, a token id outside the
// vocabulary, an input longer than n_ctx tokens without "truncate": true (code
// context_length_exceeded, naming the limit), more than max_inputs inputs, an unknown
// encoding_format, dimensions outside [1, n_embd].
std::optional<ApiError> parse_embedding_request(const nlohmann::json& body, const Tokenizer& tokenizer,
                                                const EmbeddingLimits& limits, EmbeddingRequest& out);

// The vector as answered: its first `dimensions` components (all when 0), then divided by
// its L2 norm when `normalize` (a zero vector stays zero).
std::vector<float> finish_embedding(std::vector<float> v, int32_t dimensions, bool normalize);

// Standard base64 (RFC 4648, with padding) of the floats' bytes as little-endian IEEE-754
// float32 — what OpenAI's `encoding_format: "base64"` carries.
std::string base64_floats(const std::vector<float>& v);

}  // namespace ubatch::server
