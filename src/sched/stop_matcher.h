// Stop strings over a stream of text pieces: text is emitted only once it can no longer
// be the start of a stop string; a stop string is never emitted, even when it spans
// several tokens; a partial match that fails is released (neither lost nor duplicated).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ubatch::sched {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text` (complete UTF-8 characters). Returns what may be emitted now. When a stop
  // string appears, *stopped is set, the text before it is returned and the rest dropped.
  std::string push(std::string_view text, bool* stopped);
  // End of generation: everything still held back.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace ubatch::sched
