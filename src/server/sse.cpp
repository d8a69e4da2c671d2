#include "server/sse.h"

#include "server/errors.h"

namespace ubatch::server {

std::string sse_frame(const nlohmann::json& chunk) {
  std::string out = "data: ";
  out += dump_json(chunk);  // compact: JSON escapes every newline inside strings
  out += "\n\n";
  return out;
}

}  // namespace ubatch::server
