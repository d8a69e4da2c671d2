// The OpenAPI 3 document of the server's API, served at GET /openapi.json. Its source is
// docs/openapi.yaml; the build converts it to JSON (cmake/openapi_embed.py, python3-yaml)
// and compiles it in, so the served document is always the one in the source tree.
#pragma once

#include <string_view>

namespace ubatch::server {

// The document as compact JSON (ASCII; valid for the life of the process).
std::string_view openapi_json();

}  // namespace ubatch::server
