// What the command-line tools (microllm, microllm_alignment) share: a subcommand registers
// its options on the parent app and returns the function that runs it once parsed, and
// run_subcommands parses argv, runs the chosen one and turns errors into one line on stderr
// and a non-zero exit code (library errors are microllm::Error; the library never exits).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "microllm/core/error.h"

namespace microllm::apps {

struct Command {
  CLI::App* app = nullptr;   // the subcommand (parsed when *app is true)
  std::function<int()> run;  // runs it; returns the process exit code
};

// Parses argv for `app` (which must require one subcommand) and runs the chosen command.
inline int run_subcommands(CLI::App& app, const std::vector<Command>& commands, int argc,
                           char** argv, const char* tool) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& command : commands)
      if (*command.app) return command.run();
  } catch (const microllm::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return 1;
  }
  return 0;
}

}  // namespace microllm::apps
