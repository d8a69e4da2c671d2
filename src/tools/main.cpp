// The `ubatch` binary: dispatches to the subcommands registered by cmd_*.cpp.
#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tools/command.h"

namespace ubatch::tools {

namespace {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace

bool register_command(Command command) {
  registry().push_back(std::move(command));
  return true;
}

std::string default_model_path() {
  if (const char* env = std::getenv("UBATCH_MODEL")) return env;
#ifdef UBATCH_MODELS_DIR
  return std::string(UBATCH_MODELS_DIR) + "/gemma-3-270m-q4_k_m.gguf";
#else
  return "models/gemma-3-270m-q4_k_m.gguf";
#endif
}

}  // namespace ubatch::tools

int main(int argc, char** argv) {
  using namespace ubatch::tools;
  CLI::App app{"ubatch: LLM inference engine and server with token-level dynamic batching"};
  app.require_subcommand(1);
  std::map<CLI::App*, std::function<int()>> runners;
  for (Command& c : registry()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners[sub] = c.setup(*sub);
  }
  // Multi-letter single-dash flags users know from llama.cpp tools (CLI11 only takes
  // single-letter short options): rewrite them to their long names.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i + 1 < args.size(); ++i)
    if (args[i] == "-np" && !args[i + 1].empty() && std::isdigit(static_cast<unsigned char>(args[i + 1][0])))
      args[i] = "--n-parallel";
  std::vector<char*> argv2;
  for (std::string& a : args) argv2.push_back(a.data());
  CLI11_PARSE(app, static_cast<int>(argv2.size()), argv2.data());
  for (auto& [sub, run] : runners)
    if (sub->parsed()) return run();
  return 1;
}
