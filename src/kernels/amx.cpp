// Compiled with -mamx-tile -mamx-int8 (CMakeLists.txt): the compiler emits tile instructions
// only where the _tile_* intrinsics below are called, each after an amx_available() check.
#include "kernels/amx.h"

#include <cerrno>
#include <cstring>

#include "common/status.h"
#include "kernels/cpu_features.h"

#if defined(__linux__) && defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define UBATCH_HAVE_AMX_PLUMBING 1
#endif

namespace ubatch::kernels {

namespace {

struct AmxPermission {
  bool ok = false;
  std::string why;
};

#ifdef UBATCH_HAVE_AMX_PLUMBING
constexpr int kArchGetXcompPerm = 0x1022;   // ARCH_GET_XCOMP_PERM (asm/prctl.h)
constexpr int kArchReqXcompPerm = 0x1023;   // ARCH_REQ_XCOMP_PERM
constexpr int kXfeatureXtiledata = 18;      // XFEATURE_XTILEDATA

AmxPermission request_permission() {
  AmxPermission p;
  const CpuFeatures& f = cpu_features();
  if (!f.amx_int8) return p.why = "CPU has no AMX-INT8", p;
  if (!f.os_amx) return p.why = "OS does not enable tile state in XCR0", p;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    const int err = errno;  // before anything else can change it
    return p.why = std::string("arch_prctl(ARCH_REQ_XCOMP_PERM) refused: ") + std::strerror(err), p;
  }
  uint64_t granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 || !(granted & (uint64_t{1} << kXfeatureXtiledata)))
    return p.why = "arch_prctl(ARCH_GET_XCOMP_PERM) does not list XTILEDATA after the request", p;
  p.ok = true;
  return p;
}
#else
AmxPermission request_permission() { return {false, "AMX needs Linux on x86-64"}; }
#endif

const AmxPermission& permission() {
  static const AmxPermission p = request_permission();
  return p;
}

#ifdef UBATCH_HAVE_AMX_PLUMBING
// This thread's loaded configuration; releases the tiles when the thread exits.
struct ThreadTiles {
  AmxTileConfig config;
  bool loaded = false;
  ~ThreadTiles() {
    if (loaded) _tile_release();
  }
};
thread_local ThreadTiles t_tiles;

// The _tile_* intrinsics are asm statements that do not tell the compiler which memory they
// read (GCC 12: ldtilecfg names 8 bytes, tileloadd none): make every earlier store visible.
inline void memory_barrier() { __asm__ volatile("" ::: "memory"); }
#endif

}  // namespace

bool amx_available(std::string* why) {
  const AmxPermission& p = permission();
  if (!p.ok && why) *why = p.why;
  return p.ok;
}

AmxTileConfig& AmxTileConfig::set_tile(int index, int n_rows, int n_colsb) {
  UBATCH_CHECK(index >= 0 && index < 8);
  rows[index] = static_cast<uint8_t>(n_rows);
  colsb[index] = static_cast<uint16_t>(n_colsb);
  return *this;
}

bool AmxTileConfig::valid() const {
  if (palette_id != 1 || start_row != 0) return false;
  for (uint8_t r : reserved)
    if (r != 0) return false;
  for (int i = 0; i < 16; ++i) {
    if (i >= 8 && (rows[i] != 0 || colsb[i] != 0)) return false;
    if (rows[i] > 16 || colsb[i] > 64) return false;
    if ((rows[i] == 0) != (colsb[i] == 0)) return false;  // LDTILECFG faults (#GP) otherwise
  }
  return true;
}

#ifdef UBATCH_HAVE_AMX_PLUMBING

void amx_load_config(const AmxTileConfig& cfg) {
  UBATCH_CHECK_MSG(amx_available(), "AMX tile configuration without AMX (check amx_available() first)");
  UBATCH_CHECK_MSG(cfg.valid(), "invalid AMX tile configuration");
  t_tiles.config = cfg;
  memory_barrier();
  _tile_loadconfig(&t_tiles.config);
  t_tiles.loaded = true;
}

void amx_ensure_config(const AmxTileConfig& cfg) {
  if (t_tiles.loaded && t_tiles.config == cfg) return;
  amx_load_config(cfg);
}

void amx_release() {
  if (!t_tiles.loaded) return;
  _tile_release();
  t_tiles.loaded = false;
}

void amx_dot_tile_u8s8(const uint8_t* a, const int8_t* b, int32_t* c) {
  AmxTileConfig cfg;
  cfg.set_tile(0, 16, 64).set_tile(1, 16, 64).set_tile(2, 16, 64);  // C (16 × 16 int32), A, B
  amx_ensure_config(cfg);
  memory_barrier();
  _tile_loadd(0, c, 64);
  _tile_loadd(1, a, 64);
  _tile_loadd(2, b, 64);
  _tile_dpbusd(0, 1, 2);
  _tile_stored(0, c, 64);
  memory_barrier();
}

#else

void amx_load_config(const AmxTileConfig&) {
  UBATCH_CHECK_MSG(false, "AMX tile configuration without AMX (check amx_available() first)");
}
void amx_ensure_config(const AmxTileConfig& cfg) { amx_load_config(cfg); }
void amx_release() {}
void amx_dot_tile_u8s8(const uint8_t*, const int8_t*, int32_t*) {
  UBATCH_CHECK_MSG(false, "AMX tile product without AMX (check amx_available() first)");
}

#endif

}  // namespace ubatch::kernels
