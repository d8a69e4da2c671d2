// The web page's files (web/), compiled into the binary at build time by
// cmake/embed_web.cmake: nothing is read from disk or fetched from the network at run time.
#pragma once

#include <string_view>
#include <vector>

namespace ubatch::server {

struct WebAsset {
  std::string_view path;          // URL path under /webui/, e.g. "js/main.js" (index.html: the page at /)
  std::string_view content_type;  // from the file's extension
  std::string_view body;          // the file's bytes
  std::string_view etag;          // "\"<first 16 hex digits of the SHA-256 of body>\""
};

// Every embedded file, sorted by path. Defined in the generated webui_assets.cpp.
const std::vector<WebAsset>& web_assets();
// The file at `path` (relative to web/), or null.
const WebAsset* find_web_asset(std::string_view path);

}  // namespace ubatch::server
