#include "model/block_kinds.h"

namespace ubatch {

std::unique_ptr<Block> make_mixer(MixerKind kind) {
  switch (kind) {
    case MixerKind::Attention: return make_attention_block(false);
    case MixerKind::GatedAttention: return make_attention_block(true);
    case MixerKind::GatedDeltaNet: return make_deltanet_block();
    case MixerKind::ShortConv: return make_shortconv_block();
  }
  return nullptr;
}

std::unique_ptr<Block> make_ffn(FfnKind kind) {
  switch (kind) {
    case FfnKind::Dense: return make_dense_ffn();
    case FfnKind::Moe: return make_moe_ffn();
  }
  return nullptr;
}

}  // namespace ubatch
