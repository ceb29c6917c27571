// `microllm_alignment operator --case DIR [--out DIR] [--device cpu|cuda[:N]]`: runs the
// operator case in DIR (case.json + .npy inputs, protocol in operator_cases.h) on the
// device and writes its outputs, and its input gradients when the case asks for them, as
// F32/integer .npy files on the host.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "alignment_commands.h"
#include "microllm/core/error.h"
#include "operator_cases.h"

namespace microllm::alignment {
namespace {

struct OperatorCli {
  std::string case_dir, out_dir, device = "cpu";
};

int run_operator(const OperatorCli& cli) {
  namespace fs = std::filesystem;
  const Device device = Device::parse(cli.device);
  const fs::path out = cli.out_dir.empty() ? fs::path(cli.case_dir) : fs::path(cli.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  MICROLLM_CHECK(!ec, "operator", "cannot create the output folder ", out.string(), ": ",
                 ec.message());
  const CaseRun run = run_operator_case(cli.case_dir, out, device);
  std::string files;
  for (const std::string& name : run.written) files += (files.empty() ? "" : ", ") + name;
  std::printf("%s on %s%s: wrote %s to %s\n", run.op.c_str(), device.str().c_str(),
              run.backward ? " (forward + backward)" : "", files.c_str(), out.string().c_str());
  return 0;
}

}  // namespace

Command add_operator_command(CLI::App& parent) {
  auto c = std::make_shared<OperatorCli>();
  CLI::App* cmd = parent.add_subcommand("operator", "Run one operator case from .npy files");
  cmd->add_option("--case", c->case_dir, "folder holding case.json and the input .npy files")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--out", c->out_dir,
                  "folder for the outputs (created; default: the case folder)");
  cmd->add_option("--device", c->device, "cpu or cuda[:N]")->capture_default_str();
  return {cmd, [c] { return run_operator(*c); }};
}

}  // namespace microllm::alignment
