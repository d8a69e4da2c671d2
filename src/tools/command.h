// Subcommands of the `ubatch` binary register themselves here, one file each
// (cmd_run.cpp, cmd_info.cpp, …), so main.cpp never changes when one is added.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace ubatch::tools {

// setup() adds the subcommand's options to `sub` and returns the function to run after
// parsing; its return value is the process exit status.
struct Command {
  std::string name;
  std::string help;
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

bool register_command(Command command);

// Default model path: models/gemma-3-270m-q4_k_m.gguf under the directory set-up installs
// into (UBATCH_MODEL in the environment overrides it).
std::string default_model_path();

}  // namespace ubatch::tools

#define UBATCH_CONCAT_INNER(a, b) a##b
#define UBATCH_CONCAT(a, b) UBATCH_CONCAT_INNER(a, b)
// UBATCH_REGISTER_COMMAND("run", "help text", [](CLI::App& sub) { ...; return [=]{...}; });
#define UBATCH_REGISTER_COMMAND(name, help, setup_fn)                      \
  static const bool UBATCH_CONCAT(ubatch_command_registered_, __LINE__) = \
      ::ubatch::tools::register_command({name, help, setup_fn})
