// AMX int8 peak loop: tdpbusd tile to tile (compiled with -mamx-tile -mamx-int8; see
// int8_peak_loops.h). Tiles 0..3: four independent C accumulators (16 rows × 64 bytes =
// 16 × 16 int32); tile 4: A (16 × 64 u8); tile 5: B (16 × 64 s8, a 64 × 16 matrix in VNNI
// layout).
#include <immintrin.h>

#include "bench/int8_peak_loops.h"
#include "kernels/amx.h"

namespace ubatch::bench::amx {

int32_t tdpbusd_loop(int64_t n_iter, int32_t seed) {
  kernels::AmxTileConfig cfg;
  for (int t = 0; t < 6; ++t) cfg.set_tile(t, 16, 64);
  kernels::amx_ensure_config(cfg);

  alignas(64) uint8_t a[16 * 64];  // [16][64]
  alignas(64) int8_t b[16 * 64];   // [16][64]
  alignas(64) int32_t c[16 * 16] = {};  // [16][16]
  for (int i = 0; i < 16 * 64; ++i) {
    a[i] = static_cast<uint8_t>(i + seed);
    b[i] = static_cast<int8_t>(i * 7 - seed);
  }
  // The tile intrinsics do not tell the compiler they read a and b: store them first.
  __asm__ volatile("" ::: "memory");
  _tile_loadd(4, a, 64);
  _tile_loadd(5, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < n_iter; ++i) {
    _tile_dpbusd(0, 4, 5);
    _tile_dpbusd(1, 4, 5);
    _tile_dpbusd(2, 4, 5);
    _tile_dpbusd(3, 4, 5);
  }
  uint32_t sum = 0;  // wraps: a checksum
  auto add = [&] {
    for (int32_t v : c) sum += static_cast<uint32_t>(v);
  };
  _tile_stored(0, c, 64);
  add();
  _tile_stored(1, c, 64);
  add();
  _tile_stored(2, c, 64);
  add();
  _tile_stored(3, c, 64);
  add();
  return static_cast<int32_t>(sum);
}

}  // namespace ubatch::bench::amx
