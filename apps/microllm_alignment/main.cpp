// microllm_alignment: the microllm side of the alignment tools (docs/alignment.md). Each
// subcommand lives in its own file and registers itself through alignment_commands.h; the
// Python drivers under tools/alignment/ run it and compare with PyTorch. Bad input ends
// with one clear line on stderr and a non-zero exit code.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <vector>

#include "alignment_commands.h"
#include "microllm/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "microllm_alignment: run microllm on inputs from files, for comparison with PyTorch"};
  app.require_subcommand(1);
  const std::vector<microllm::alignment::Command> commands = {
      microllm::alignment::add_model_command(app),
      microllm::alignment::add_operator_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& command : commands)
      if (*command.app) return command.run();
  } catch (const microllm::Error& e) {
    std::fprintf(stderr, "microllm_alignment: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "microllm_alignment: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
