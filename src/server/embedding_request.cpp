#include "server/embedding_request.h"

#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "tokenizer/tokenizer.h"

namespace ubatch::server {

namespace {

using json = nlohmann::json;

constexpr const char* kInputShape =
    "input must be a non-empty string, an array of non-empty strings, an array of token ids, or an array of "
    "non-empty arrays of token ids";

bool is_token_array(const json& a) {
  if (!a.is_array() || a.empty()) return false;
  for (const json& v : a)
    if (!v.is_number_integer()) return false;
  return true;
}

std::optional<ApiError> read_ids(const json& a, const std::string& where, const EmbeddingLimits& lim,
                                 std::vector<int32_t>& out) {
  out.clear();
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t id = a[i].get<int64_t>();
    if (id < 0 || id >= lim.n_vocab)
      return invalid_request(fmt::format("{}[{}] = {} is outside the vocabulary [0, {})", where, i, id, lim.n_vocab),
                             "input", "invalid_token");
    out.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

std::vector<int32_t> tokenize_text(const std::string& text, const Tokenizer& tok, bool parse_special) {
  std::vector<int32_t> ids = tok.tokenize(text, tok.add_bos_default(), parse_special);
  if (tok.add_eos_default() && tok.eos() >= 0) ids.push_back(tok.eos());
  return ids;
}

}  // namespace

std::optional<ApiError> parse_embedding_request(const json& body, const Tokenizer& tok, const EmbeddingLimits& lim,
                                                EmbeddingRequest& out) {
  out = EmbeddingRequest{};
  if (!body.is_object()) return invalid_request("the request body must be a JSON object");
  for (const char* f : {"model", "user"})
    if (body.contains(f) && !body[f].is_string() && !body[f].is_null())
      return invalid_request(fmt::format("{} must be a string", f), f, "invalid_type");

  if (const auto it = body.find("encoding_format"); it != body.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "float" && *it != "base64"))
      return invalid_request("encoding_format must be \"float\" or \"base64\"", "encoding_format");
    out.base64 = *it == "base64";
  }
  if (const auto it = body.find("dimensions"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > lim.n_embd)
      return invalid_request(fmt::format("dimensions must be an integer in [1, {}] (the model's embedding width)",
                                         lim.n_embd),
                             "dimensions");
    out.dimensions = static_cast<int32_t>(it->get<int64_t>());
  }
  if (const auto it = body.find("truncate"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return invalid_request("truncate must be true or false", "truncate", "invalid_type");
    out.truncate = it->get<bool>();
  }

  const auto in = body.find("input");
  if (in == body.end() || in->is_null()) return invalid_request("input is required", "input", "missing_required_parameter");
  if (in->is_string()) {
    if (in->get_ref<const std::string&>().empty()) return invalid_request("input is an empty string", "input", "empty_prompt");
    out.inputs.push_back(tokenize_text(in->get<std::string>(), tok, lim.parse_special));
  } else if (is_token_array(*in)) {
    out.inputs.emplace_back();
    if (auto e = read_ids(*in, "input", lim, out.inputs.back())) return e;
  } else if (in->is_array() && !in->empty()) {
    if (in->size() > lim.max_inputs)
      return invalid_request(fmt::format("input has {} items, above the limit of {}", in->size(), lim.max_inputs),
                             "input");
    const bool strings = (*in)[0].is_string();
    for (size_t i = 0; i < in->size(); ++i) {
      const json& item = (*in)[i];
      if (strings && item.is_string()) {
        if (item.get_ref<const std::string&>().empty())
          return invalid_request(fmt::format("input[{}] is an empty string", i), "input", "empty_prompt");
        out.inputs.push_back(tokenize_text(item.get<std::string>(), tok, lim.parse_special));
      } else if (!strings && is_token_array(item)) {
        out.inputs.emplace_back();
        if (auto e = read_ids(item, fmt::format("input[{}]", i), lim, out.inputs.back())) return e;
      } else {
        return invalid_request(fmt::format("input[{}]: {} (one kind throughout)", i, kInputShape), "input",
                               item.empty() ? "empty_prompt" : "invalid_type");
      }
    }
  } else {
    return invalid_request(kInputShape, "input", in->is_array() ? "empty_prompt" : "invalid_type");
  }

  out.truncated.assign(out.inputs.size(), false);
  for (size_t i = 0; i < out.inputs.size(); ++i) {
    std::vector<int32_t>& ids = out.inputs[i];
    if (ids.empty())  // text that tokenizes to nothing (no BOS in this vocabulary)
      return invalid_request(fmt::format("input[{}] has no tokens", i), "input", "empty_prompt");
    if (static_cast<int64_t>(ids.size()) <= lim.n_ctx) continue;
    if (!out.truncate)
      return invalid_request(fmt::format("input[{}] has {} tokens, above the limit of {} tokens per input (the "
                                         "context of one sequence); send \"truncate\": true to embed its first {} "
                                         "tokens",
                                         i, ids.size(), lim.n_ctx, lim.n_ctx),
                             "input", "context_length_exceeded");
    ids.resize(static_cast<size_t>(lim.n_ctx));
    out.truncated[i] = true;
  }
  return std::nullopt;
}

std::vector<float> finish_embedding(std::vector<float> v, int32_t dimensions, bool normalize) {
  if (dimensions > 0 && static_cast<size_t>(dimensions) < v.size()) v.resize(static_cast<size_t>(dimensions));
  if (normalize) {
    double ss = 0.0;
    for (float x : v) ss += static_cast<double>(x) * x;
    if (ss > 0.0) {
      const double inv = 1.0 / std::sqrt(ss);
      for (float& x : v) x = static_cast<float>(x * inv);
    }
  }
  return v;
}

std::string base64_floats(const std::vector<float>& v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(v[i]);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<uint8_t>(u >> (8 * b));  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t w = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    for (int k = 3; k >= 0; --k) out.push_back(kAlphabet[(w >> (6 * k)) & 63]);
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    const uint32_t w = (uint32_t{bytes[i]} << 16) | (rest > 1 ? uint32_t{bytes[i + 1]} << 8 : 0);
    out.push_back(kAlphabet[(w >> 18) & 63]);
    out.push_back(kAlphabet[(w >> 12) & 63]);
    out.push_back(rest > 1 ? kAlphabet[(w >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace ubatch::server
