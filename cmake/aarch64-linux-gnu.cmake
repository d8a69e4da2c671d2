# Cross-compiling ubatch for 64-bit ARM Linux (aarch64) on a Debian/Ubuntu x86-64 host:
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# scripts/cross_arm64.sh installs what this needs and runs the tests under qemu.
#
# Compiler: Debian's g++-aarch64-linux-gnu. Libraries and headers: the arm64 "-dev" packages
# of the same distribution, installed side by side with the host's (multiarch: libraries in
# /usr/lib/aarch64-linux-gnu, headers in /usr/include); header-only packages (nlohmann-json,
# CLI11) are shared with the host. Tests run through qemu-aarch64 user-mode emulation when it
# is installed (CMAKE_CROSSCOMPILING_EMULATOR, see below; the CPU model comes from QEMU_CPU).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(UBATCH_CROSS_TRIPLE aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${UBATCH_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${UBATCH_CROSS_TRIPLE}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${UBATCH_CROSS_TRIPLE})

# find_package/find_library: the multiarch directories of the target under /usr, never the
# host's x86-64 ones; programs (pkg-config, qemu) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${UBATCH_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/include/x86_64-linux-gnu)

# pkg-config: only the target's .pc files (and the architecture-independent ones).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${UBATCH_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# qemu-aarch64 finds the target's dynamic loader and libraries under its -L prefix (default /).
# The arm64 -dev packages bring the distribution's arm64 C library (libc6:arm64, multiarch:
# /lib/ld-linux-aarch64.so.1, /lib/aarch64-linux-gnu), so binaries run with that one. The cross
# toolchain's own copy (/usr/aarch64-linux-gnu, libc6-arm64-cross) may be a different build of
# glibc: `-L /usr/aarch64-linux-gnu` would pair its ld.so with the multiarch libc.so.6 (found
# through the library path), and such a pair deadlocks at the first thread. Only without the
# multiarch C library is -L used.
find_program(UBATCH_QEMU_AARCH64 qemu-aarch64)
if(UBATCH_QEMU_AARCH64)
  if(EXISTS /lib/ld-linux-aarch64.so.1)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${UBATCH_QEMU_AARCH64})
  else()
    set(CMAKE_CROSSCOMPILING_EMULATOR ${UBATCH_QEMU_AARCH64} -L /usr/${UBATCH_CROSS_TRIPLE})
  endif()
endif()
