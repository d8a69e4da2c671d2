// AMX plumbing in one place: detection, the process-wide permission request, and the
// per-thread tile configuration. Kernels that use AMX tiles call amx_available() once (it is
// cached) and amx_ensure_config() on each thread before their first tile instruction.
//
// Linux keeps the 8 KiB tile data state (XTILEDATA) disabled for a process until it asks for
// it with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); a tile load before that dies
// with SIGILL. amx_available() makes that request once and remembers the answer. The tile
// configuration (LDTILECFG) is per thread; amx_ensure_config() keeps a thread_local copy of
// the last configuration it loaded so repeated calls with the same one cost a 64-byte compare.
// Each thread that loaded a configuration releases its tiles when it exits.
//
// The functions that execute tile instructions (amx_load_config, amx_ensure_config,
// amx_dot_tile_u8s8) abort with an internal check when amx_available() is false, rather than
// dying with SIGILL; amx_release() is a no-op then.
#pragma once

#include <cstdint>
#include <string>

namespace ubatch::kernels {

// True only when CPUID reports AMX-TILE and AMX-INT8, XCR0 enables the tile state, and the
// kernel granted this process XTILEDATA (arch_prctl ARCH_REQ_XCOMP_PERM, asked once,
// process-wide; thread-safe). On false, why (when given) receives one line:
// "CPU has no AMX-INT8", "OS does not enable tile state in XCR0",
// "arch_prctl(ARCH_REQ_XCOMP_PERM) refused: <strerror>", or "AMX needs Linux on x86-64".
bool amx_available(std::string* why = nullptr);

// The 64-byte LDTILECFG operand, palette 1: tile i has rows[i] rows (≤ 16) of colsb[i] bytes
// (≤ 64, a multiple of 4 for int8 products); palette 1 has 8 tiles, so entries 8..15 and the
// reserved bytes must stay 0. A tile with 0 rows is unused.
struct alignas(64) AmxTileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;      // restart row after an interrupted tile load/store; keep 0
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};    // bytes per row of tile i
  uint8_t rows[16] = {};      // rows of tile i

  // Sets tile `index` (0..7) to `n_rows` rows of `n_colsb` bytes; returns *this.
  AmxTileConfig& set_tile(int index, int n_rows, int n_colsb);
  // Palette 1, tiles 8..15 and reserved bytes 0, rows ≤ 16, colsb ≤ 64.
  bool valid() const;
  bool operator==(const AmxTileConfig&) const = default;
};
static_assert(sizeof(AmxTileConfig) == 64, "LDTILECFG takes exactly 64 bytes");

// Loads cfg into this thread's tile configuration (LDTILECFG; zeroes all tiles) and records
// it as this thread's current one. Aborts when !amx_available() or !cfg.valid().
void amx_load_config(const AmxTileConfig& cfg);

// Loads cfg only if it differs from the configuration this thread last loaded through
// amx_load_config/amx_ensure_config (and not released since). Same aborts as amx_load_config.
// Tiles keep their contents when nothing is loaded. Configurations loaded by other means
// than these functions are not seen.
void amx_ensure_config(const AmxTileConfig& cfg);

// Releases this thread's tiles (TILERELEASE: back to the init state, smaller context
// switches) and forgets its configuration. No-op when this thread has none loaded.
void amx_release();

// One tile product, for tests and self-checks: c += A·B with
//   a: [16][64] uint8 (A, row-major, 16 × 64),
//   b: [16][64] int8  (B of shape 64 × 16 in VNNI layout: b[k/4][4n + k%4] = B[k][n]),
//   c: [16][16] int32 (row-major, accumulated in place),
// all with 64-byte row strides, i.e. c[m][n] += Σ_k a[m][k] · B[k][n] (TDPBUSD). Uses tiles 0..2
// and loads its own configuration (amx_ensure_config), replacing this thread's. Aborts when
// !amx_available().
void amx_dot_tile_u8s8(const uint8_t* a, const int8_t* b, int32_t* c);

}  // namespace ubatch::kernels
