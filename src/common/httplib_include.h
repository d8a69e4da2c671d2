// Includes cpp-httplib as Debian ships it (libcpp-httplib-dev 0.11): a declarations-only
// header whose implementation lives in libcpp-httplib.so, compiled with OpenSSL, zlib and
// Brotli support. Those three macros change the layout of httplib::Request and
// httplib::ClientImpl, so every translation unit that includes <httplib.h> must define them
// exactly as the library was built (`pkg-config --cflags cpp-httplib`); include this header
// instead of <httplib.h> (server, bench and tests do). Link with -lcpp-httplib.
#pragma once

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT 1
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT 1
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT 1
#endif

#include <httplib.h>
