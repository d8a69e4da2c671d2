#include "support.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

namespace ubatch::test {

std::string shared_dir() {
  if (const char* env = std::getenv("UBATCH_SHARED_DIR")) return env;
  return UBATCH_SHARED_DIR;
}

std::string reference_path(const std::string& rel) { return shared_dir() + "/reference/" + rel; }

bool have_reference() { return std::filesystem::exists(reference_path("manifest.json")); }

std::string default_model() {
  if (const char* env = std::getenv("UBATCH_MODEL")) return env;
  return UBATCH_DEFAULT_MODEL;
}

std::string smollm2_model() {
  if (const char* env = std::getenv("UBATCH_SMOLLM2_MODEL")) return env;
  return UBATCH_SMOLLM2_MODEL;
}

std::string ubatch_binary() { return UBATCH_BINARY; }

std::string ubatch_command() {
  const std::string launcher = UBATCH_BINARY_LAUNCHER;
  return launcher.empty() ? ubatch_binary() : launcher + " " + ubatch_binary();
}

bool emulated() { return UBATCH_BINARY_LAUNCHER[0] != '\0'; }

std::vector<std::string> ubatch_argv(const std::vector<std::string>& args) {
  std::vector<std::string> argv;
  std::istringstream launcher(UBATCH_BINARY_LAUNCHER);  // CMake joined its words with spaces
  for (std::string w; launcher >> w;) argv.push_back(w);
  argv.push_back(ubatch_binary());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<float> read_f32(const std::string& path) {
  std::vector<uint8_t> bytes = read_file(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

std::string run_command(const std::string& cmd, int* status) {
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    if (status) *status = -1;
    return out;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  int rc = pclose(pipe);
  if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

}  // namespace ubatch::test
