// The subcommands of the `microllm` tool. Each add_*_command registers its options on the
// parent app and returns the function that runs it once parsed (returning the exit code).
#pragma once

#include <CLI/CLI.hpp>

#include "common/subcommands.h"

namespace microllm::app {

using apps::Command;

Command add_demo_command(CLI::App& parent);
Command add_inspect_command(CLI::App& parent);
Command add_tokenizer_command(CLI::App& parent);
Command add_train_command(CLI::App& parent);
Command add_eval_command(CLI::App& parent);
Command add_launch_command(CLI::App& parent);
Command add_forward_command(CLI::App& parent);
Command add_tokenize_command(CLI::App& parent);
Command add_generate_command(CLI::App& parent);
Command add_chat_command(CLI::App& parent);
#if MICROLLM_WITH_SERVER
Command add_serve_command(CLI::App& parent);
#endif

}  // namespace microllm::app
