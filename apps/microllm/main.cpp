// The microllm command-line tool. Each subcommand reports bad input with one clear line and
// a non-zero exit code; library errors (microllm::Error) are caught here.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "demo.h"
#include "microllm/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"microllm: train, serve and verify small decoder-only language models"};
  app.require_subcommand(1);

  microllm::app::DemoOptions demo;
  CLI::App* demo_cmd = app.add_subcommand(
      "demo", "Fit a one-block attention model to a copy task on the CPU and print the loss falling");
  demo_cmd->add_option("--steps", demo.steps, "optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  demo_cmd->add_option("--batch", demo.batch, "sequences per step")->check(CLI::PositiveNumber)->capture_default_str();
  demo_cmd->add_option("--vocab", demo.vocab, "vocabulary size")->check(CLI::Range(2, 100000))->capture_default_str();
  demo_cmd->add_option("--half", demo.half, "tokens before the copy")->check(CLI::Range(1, 4096))->capture_default_str();
  demo_cmd->add_option("--width", demo.width, "model width")->check(CLI::PositiveNumber)->capture_default_str();
  demo_cmd->add_option("--heads", demo.heads, "query heads (even)")->check(CLI::PositiveNumber)->capture_default_str();
  demo_cmd->add_option("--lr", demo.lr, "Adam learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  demo_cmd->add_option("--seed", demo.seed, "random seed")->capture_default_str();
  demo_cmd->add_option("--log-every", demo.log_every, "steps between log lines")->check(CLI::PositiveNumber)->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*demo_cmd) return microllm::app::run_demo(demo);
  } catch (const microllm::Error& e) {
    std::fprintf(stderr, "microllm: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "microllm: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
