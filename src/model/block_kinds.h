// Constructors of the block kinds (one file each); make_mixer() and make_ffn() in blocks.cpp choose among them.
#pragma once

#include <memory>

#include "model/block.h"

namespace ubatch {

// Softmax attention over the layer's KV cache: Q/K/V projections (separate or fused attn_qkv,
// optional biases), optional per-head QK RMSNorm, RoPE (none on NoPE layers; partial when
// rope.dimension_count < head size), sliding window, soft-cap. gated: attn_q holds per head
// [Q_h | gate_h] and the attention output is multiplied by sigmoid(gate) (Qwen3.5).
std::unique_ptr<Block> make_attention_block(bool gated);
// Gated DeltaNet (Yang et al. 2025) as Qwen3.5 stores it.
std::unique_ptr<Block> make_deltanet_block();
// LFM2's gated short convolution.
std::unique_ptr<Block> make_shortconv_block();
// A routed mixture of experts (block_moe.cpp): qwen3moe's and gpt-oss's routing, expert-grouped; with
// qwen35moe's sigmoid-gated shared expert where the architecture has one.
std::unique_ptr<Block> make_moe_ffn();

}  // namespace ubatch
