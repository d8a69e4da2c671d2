// libFuzzer entry for model loading (built with -DUBATCH_FUZZ=ON; docs/FUZZING.md).
//
// The GGUF reader has its own target (gguf_fuzz); this one starts from *valid* files — a small
// synthetic model of every architecture ubatch runs (arch.cpp; the mixtures of experts with 3-D
// expert tensors, retypable to MXFP4, and qwen35moe's shared expert) — and applies edits chosen by the
// input: keys dropped, set to other numbers, types or strings (RoPE scaling types included),
// tensors dropped, reshaped or retyped, stray keys and tensors added. Every edited file must
// either fail Model::load with a message, or load and then run a short decode without any
// sanitizer report: strict loading is what stands between a malformed file and the kernels.
//
//   scripts/fuzz.sh --seconds 300 model_load_fuzz
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "context/context.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"

using namespace ubatch;
using namespace ubatch::gguf;

namespace {

struct Key {
  std::string name;
  enum Kind { U32, F32, STR, I32ARR } kind;
  uint32_t u = 0;
  float f = 0;
  std::string s;
  std::vector<int32_t> arr;  // I32ARR
};

struct Tensor {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<int64_t> ne;
};

struct Spec {
  std::vector<Key> keys;
  std::vector<Tensor> tensors;
};

// A valid small model: n_embd 32, 2 heads of 16 (1 KV head), n_ff 64, vocabulary 40; layer
// count and the architecture's own keys and tensors as a converter writes them.
Spec make_spec(const std::string& arch) {
  const int64_t E = 32, H = 2, KV = 1, D = arch == "qwen3" || arch == "gemma2" || arch == "qwen3moe" ? 32 : 16,
                F = 64, V = 40;
  const int L = arch == "smollm3" ? 4 : 2;
  Spec s;
  auto k = [&](const std::string& n, uint32_t u) { s.keys.push_back({arch + "." + n, Key::U32, u, 0, "", {}}); };
  auto ka = [&](const std::string& n, std::vector<int32_t> a) {
    s.keys.push_back({arch + "." + n, Key::I32ARR, 0, 0, "", std::move(a)});
  };
  auto kf = [&](const std::string& n, float f) { s.keys.push_back({arch + "." + n, Key::F32, 0, f, "", {}}); };
  s.keys.push_back({"general.architecture", Key::STR, 0, 0, arch, {}});
  // qwen35moe: qwen35's hybrid layers with qwen3moe's experts and a shared expert.
  const bool qwen35moe = arch == "qwen35moe", qwen35 = arch == "qwen35" || qwen35moe, lfm2 = arch == "lfm2";
  // Mixtures of experts: 4 experts of width 32 (feed_forward_length present, unused), 2 per
  // token; gpt-oss with sinks, biases, a window on even layers and YaRN; qwen35moe's shared
  // expert of width 48 (expert_shared_feed_forward_length).
  const bool qwen3moe = arch == "qwen3moe", gptoss = arch == "gpt-oss", moe = qwen3moe || gptoss || qwen35moe;
  const int64_t FS = 48;
  const int64_t X = 4, FX = 32;
  k("context_length", 128);
  k("embedding_length", E);
  k("block_count", L);
  k("feed_forward_length", F);
  k("attention.head_count", H);
  if (lfm2) ka("attention.head_count_kv", {0, KV});  // layer 0 a short convolution, layer 1 attention
  else k("attention.head_count_kv", KV);
  // Hybrid layers (layer 0 recurrent, layer 1 attention): Gated DeltaNet of 2 key heads and 4
  // value heads of 8 (conv channels 2·16 + 32 = 64), partial RoPE with M-RoPE sections; the
  // short convolution of 3 taps.
  const int64_t SD = 8, SK = 2, SV = 4, SC = 4, SCH = 2 * SK * SD + SV * SD, LC = 3;
  if (qwen35) {
    k("full_attention_interval", 2);
    k("rope.dimension_count", 8);
    ka("rope.dimension_sections", {2, 2, 0, 0});
    k("ssm.conv_kernel", SC);
    k("ssm.state_size", SD);
    k("ssm.group_count", SK);
    k("ssm.time_step_rank", SV);
    k("ssm.inner_size", SV * SD);
  }
  if (lfm2) k("shortconv.l_cache", LC);
  if (moe) {
    k("expert_count", X);
    k("expert_used_count", 2);
    k("expert_feed_forward_length", FX);
  }
  if (qwen35moe) k("expert_shared_feed_forward_length", FS);
  if (gptoss) {
    k("attention.sliding_window", 4);
    s.keys.push_back({arch + ".rope.scaling.type", Key::STR, 0, 0, "yarn", {}});
    kf("rope.scaling.factor", 4.0f);
    k("rope.scaling.original_context_length", 64);
  }
  kf("attention.layer_norm_rms_epsilon", 1e-6f);
  kf("rope.freq_base", 10000.0f);
  if (D != E / H) {
    k("attention.key_length", D);
    k("attention.value_length", D);
  }
  if (arch == "phi3") {
    k("rope.dimension_count", D);
    k("rope.scaling.original_context_length", 32);
    kf("rope.scaling.attn_factor", 1.1f);
    k("attention.sliding_window", 64);
  }
  if (arch == "gemma2" || arch == "gemma3") k("attention.sliding_window", 4);
  if (arch == "gemma2") {
    kf("attn_logit_softcapping", 5.0f);
    kf("final_logit_softcapping", 3.0f);
  }
  auto t = [&](const std::string& n, std::vector<int64_t> ne) { s.tensors.push_back({n, TensorType::F32, std::move(ne)}); };
  t("token_embd.weight", {E, V});
  t(lfm2 ? "token_embd_norm.weight" : "output_norm.weight", {E});
  if (arch == "qwen2" || arch == "phi3" || qwen35 || gptoss) t("output.weight", {E, V});
  if (arch == "llama") t("rope_freqs.weight", {D / 2});
  if (arch == "phi3") {
    t("rope_factors_short.weight", {D / 2});
    t("rope_factors_long.weight", {D / 2});
  }
  // A mixture-of-experts FFN's tensors (qwen35moe: with the shared expert, and layer 1's gate
  // and up experts fused into ffn_gate_up_exps).
  auto moe_ffn = [&](const std::string& b) {
    t(b + "ffn_gate_inp.weight", {E, X});
    if (qwen35moe && b == "blk.1.") {
      t(b + "ffn_gate_up_exps.weight", {E, 2 * FX, X});
    } else {
      t(b + "ffn_gate_exps.weight", {E, FX, X});
      t(b + "ffn_up_exps.weight", {E, FX, X});
    }
    t(b + "ffn_down_exps.weight", {FX, E, X});
    if (qwen35moe) {
      t(b + "ffn_gate_inp_shexp.weight", {E});
      t(b + "ffn_gate_shexp.weight", {E, FS});
      t(b + "ffn_up_shexp.weight", {E, FS});
      t(b + "ffn_down_shexp.weight", {FS, E});
    }
  };
  for (int il = 0; il < L; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    t(b + "attn_norm.weight", {E});
    if ((qwen35 || lfm2) && il == 0) {  // the recurrent layer
      if (qwen35) {
        t(b + "attn_qkv.weight", {E, SCH});
        t(b + "attn_gate.weight", {E, SV * SD});
        t(b + "ssm_beta.weight", {E, SV});
        t(b + "ssm_alpha.weight", {E, SV});
        t(b + "ssm_conv1d.weight", {SC, SCH});
        t(b + "ssm_dt.bias", {SV});
        t(b + "ssm_a", {SV});
        t(b + "ssm_norm.weight", {SD});
        t(b + "ssm_out.weight", {SV * SD, E});
        t(b + "post_attention_norm.weight", {E});
      } else {
        t(b + "shortconv.in_proj.weight", {E, 3 * E});
        t(b + "shortconv.conv.weight", {LC, E});
        t(b + "shortconv.out_proj.weight", {E, E});
        t(b + "ffn_norm.weight", {E});
      }
      if (moe) {
        moe_ffn(b);
        continue;
      }
      t(b + "ffn_gate.weight", {E, F});
      t(b + "ffn_up.weight", {E, F});
      t(b + "ffn_down.weight", {F, E});
      continue;
    }
    if (arch == "phi3") {
      t(b + "attn_qkv.weight", {E, H * D + 2 * KV * D});
    } else {
      t(b + "attn_q.weight", {E, (qwen35 ? 2 : 1) * H * D});  // qwen35: [Q_h | gate_h] per head
      t(b + "attn_k.weight", {E, KV * D});
      t(b + "attn_v.weight", {E, KV * D});
    }
    if (arch == "qwen2" || gptoss) {
      t(b + "attn_q.bias", {H * D});
      t(b + "attn_k.bias", {KV * D});
      t(b + "attn_v.bias", {KV * D});
    }
    t(b + "attn_output.weight", {H * D, E});
    t(b + (qwen35 || gptoss ? "post_attention_norm.weight" : "ffn_norm.weight"), {E});
    if (moe) {
      moe_ffn(b);
      if (qwen35moe) {
        t(b + "attn_q_norm.weight", {D});
        t(b + "attn_k_norm.weight", {D});
      } else if (qwen3moe) {
        t(b + "attn_q_norm.weight", {D});
        t(b + "attn_k_norm.weight", {D});
      } else {
        t(b + "attn_output.bias", {E});
        t(b + "attn_sinks.weight", {H});
        t(b + "ffn_gate_inp.bias", {X});
        t(b + "ffn_gate_exps.bias", {FX, X});
        t(b + "ffn_up_exps.bias", {FX, X});
        t(b + "ffn_down_exps.bias", {E, X});
      }
      continue;
    }
    if (arch == "phi3") {
      t(b + "ffn_up.weight", {E, 2 * F});
    } else {
      t(b + "ffn_gate.weight", {E, F});
      t(b + "ffn_up.weight", {E, F});
    }
    t(b + "ffn_down.weight", {F, E});
    if (arch == "qwen3" || arch == "gemma3" || qwen35 || lfm2) {
      t(b + "attn_q_norm.weight", {D});
      t(b + "attn_k_norm.weight", {D});
    }
    if (arch == "gemma2" || arch == "gemma3") {
      t(b + "post_attention_norm.weight", {E});
      t(b + "post_ffw_norm.weight", {E});
    }
  }
  return s;
}

const char* const kArchs[] = {"llama",  "qwen2",  "qwen3", "phi3",     "gemma2", "gemma3",
                              "smollm3", "qwen35", "lfm2",  "qwen3moe", "gpt-oss", "qwen35moe"};
constexpr size_t kNumArchs = sizeof(kArchs) / sizeof(kArchs[0]);
// Keys the edits may add (some read, some refused): every architecture-specific one we know.
const char* const kExtraSuffixes[] = {
    "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length", "rope.scaling.attn_factor",
    "rope.freq_base_swa", "attention.sliding_window", "attention.sliding_window_pattern", "attn_logit_softcapping",
    "final_logit_softcapping", "rope.dimension_count", "attention.key_length", "vocab_size", "logit_scale",
    "expert_count", "rope.scaling.finetuned", "full_attention_interval", "ssm.conv_kernel", "ssm.state_size",
    "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size", "shortconv.l_cache", "nextn_predict_layers",
    "rope.dimension_sections", "attention.head_count_kv", "expert_used_count", "expert_feed_forward_length",
    "expert_shared_count", "expert_shared_feed_forward_length"};
constexpr size_t kNumExtraSuffixes = sizeof(kExtraSuffixes) / sizeof(kExtraSuffixes[0]);
const char* const kStrings[] = {"linear", "none", "yarn", "longrope", "llama3", "", "dynamic"};
const TensorType kTypes[] = {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_K, TensorType::MXFP4};
constexpr size_t kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);

std::vector<uint8_t> build(const Spec& s) {
  Writer w(3);
  uint32_t fill = 12345;
  for (const Key& k : s.keys) {
    if (k.kind == Key::U32) w.add_uint(k.name, ValueType::UINT32, k.u);
    else if (k.kind == Key::F32) w.add_f32(k.name, k.f);
    else if (k.kind == Key::STR) w.add_string(k.name, k.s);
    else {
      std::vector<uint8_t> bytes(k.arr.size() * 4);
      if (!bytes.empty()) std::memcpy(bytes.data(), k.arr.data(), bytes.size());
      w.add_array(k.name, ValueType::INT32, k.arr.size(), bytes);
    }
  }
  for (const Tensor& t : s.tensors) {
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(t.type));
    if (n <= 0 || n > (1 << 20) || tr == nullptr || n % tr->block_size != 0) continue;  // cannot be written
    const size_t bytes = static_cast<size_t>(n / tr->block_size * tr->type_size);
    std::vector<uint8_t> data(bytes);
    if (t.type == TensorType::F32) {
      for (int64_t i = 0; i < n; ++i) {  // small finite values
        fill = fill * 1103515245u + 12345u;
        const float v = (static_cast<float>((fill >> 8) & 0xffff) / 65535.0f - 0.5f) * 0.2f + (t.ne.size() == 1 ? 1.0f : 0.0f);
        std::memcpy(&data[static_cast<size_t>(i) * 4], &v, 4);
      }
    } else if (t.type == TensorType::MXFP4) {  // exponent byte 127 + v, codes from the fill
      for (size_t i = 0; i < bytes; ++i) {
        fill = fill * 1103515245u + 12345u;
        data[i] = static_cast<uint8_t>(i % 17 == 0 ? 120 + (fill >> 28) : fill >> 24);
      }
    }  // other types: zero blocks (valid: zero scales)
    w.add_tensor(t.name, t.type, t.ne, data);
  }
  return w.bytes();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Spec s = make_spec(kArchs[data[0] % kNumArchs]);
  const std::string arch = s.keys[0].s;
  // Edits: 3 bytes each (op, index, value).
  for (size_t i = 1; i + 2 < size && i < 1 + 3 * 12; i += 3) {
    const uint8_t op = data[i] % 10, idx = data[i + 1], v = data[i + 2];
    if (op == 0 && !s.keys.empty()) {
      s.keys.erase(s.keys.begin() + idx % s.keys.size());
    } else if (op == 1 && !s.keys.empty()) {
      Key& k = s.keys[idx % s.keys.size()];
      k.kind = Key::U32;
      k.u = v < 200 ? v : (v == 255 ? 0xffffffffu : (1u << ((v - 200) % 32)));  // shift < 32: defined
    } else if (op == 2 && !s.keys.empty()) {
      Key& k = s.keys[idx % s.keys.size()];
      k.kind = Key::F32;
      k.f = v == 0 ? 0.0f : v == 1 ? -1.0f : v == 2 ? 1e30f : static_cast<float>(v) / 8.0f;
    } else if (op == 3 && !s.keys.empty()) {
      Key& k = s.keys[idx % s.keys.size()];
      k.kind = Key::STR;
      k.s = kStrings[v % 7];
    } else if (op == 4 && !s.tensors.empty()) {
      s.tensors.erase(s.tensors.begin() + idx % s.tensors.size());
    } else if (op == 5 && !s.tensors.empty()) {
      Tensor& t = s.tensors[idx % s.tensors.size()];
      t.ne[v % t.ne.size()] = (v / 4) % 2 ? t.ne[v % t.ne.size()] * 2 : std::max<int64_t>(1, t.ne[v % t.ne.size()] / 2);
    } else if (op == 6 && !s.tensors.empty()) {
      s.tensors[idx % s.tensors.size()].type = kTypes[v % kNumTypes];
    } else if (op == 7) {
      const char* suffix = kExtraSuffixes[idx % kNumExtraSuffixes];
      if (v % 4 == 0) s.keys.push_back({arch + "." + suffix, Key::STR, 0, 0, kStrings[v % 7], {}});
      else if (v % 4 == 1) s.keys.push_back({arch + "." + suffix, Key::U32, v, 0, "", {}});
      else if (v % 4 == 2) s.keys.push_back({arch + "." + suffix, Key::F32, 0, static_cast<float>(v) / 16.0f, "", {}});
      else s.keys.push_back({arch + "." + suffix, Key::I32ARR, 0, 0, "", std::vector<int32_t>(v % 7, v % 5 - 1)});
    } else if (op == 9 && !s.keys.empty()) {  // an integer array: an element changed, or one added or dropped
      Key& k = s.keys[idx % s.keys.size()];
      if (k.kind == Key::I32ARR) {
        if (v % 3 == 0 && !k.arr.empty()) k.arr[v % k.arr.size()] = static_cast<int32_t>(v / 3) - 4;
        else if (v % 3 == 1) k.arr.push_back(v % 4);
        else if (!k.arr.empty()) k.arr.pop_back();
      }
    } else if (op == 8) {
      s.tensors.push_back({v % 2 ? "blk.0.attn_output.bias" : "stray.weight", TensorType::F32, {v % 2 ? 32 : 8}});
    }
  }
  const std::vector<uint8_t> bytes = build(s);
  Result<std::unique_ptr<File>> f = File::from_bytes(bytes.data(), bytes.size(), "fuzz");
  if (!f) return 0;  // the writer wrote something the reader refuses (e.g. a duplicate key)
  std::shared_ptr<const File> file(std::move(f.value()));
  Result<std::unique_ptr<Model>> m = Model::load(file);
  if (!m) {
    if (m.message().empty()) __builtin_trap();  // an error must say what is wrong
    return 0;
  }
  // It loaded: it must run.
  ContextParams p;
  p.n_ctx = 64;
  p.n_batch = 16;
  p.n_ubatch = 8;
  p.n_threads = 1;
  Result<std::unique_ptr<Context>> ctx = Context::create(std::shared_ptr<Model>(std::move(m.value())), p);
  if (!ctx) return 0;
  Batch b;
  for (int32_t i = 0; i < 10; ++i) b.add(i % (*ctx)->n_vocab(), i, 0, i == 9);
  if (!(*ctx)->decode(b).ok()) __builtin_trap();
  // (Values are not checked: a file may legitimately hold numbers that overflow, e.g. an
  // attention factor of 1e30; what must not happen is a crash or a sanitizer report.)
  return 0;
}
