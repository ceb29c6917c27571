// The subcommands of the `microllm_alignment` tool. Each add_*_command registers its
// options on the parent app and returns the function that runs it once parsed.
#pragma once

#include <CLI/CLI.hpp>

#include "common/subcommands.h"

namespace microllm::alignment {

using apps::Command;

Command add_model_command(CLI::App& parent);
Command add_operator_command(CLI::App& parent);

}  // namespace microllm::alignment
