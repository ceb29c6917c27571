// `microllm forward --model DIR --ids IDS.npy --out LOGITS.npy [--loss]`: one forward pass
// of a Hugging Face style checkpoint on an int64 (B, T) array, logits written as F32.
#include <cstdio>

#include "commands.h"
#include "microllm/autograd/node.h"
#include "microllm/io/npy.h"
#include "microllm/io/safetensors.h"
#include "microllm/model/transformer.h"

namespace microllm::app {
namespace {

struct ForwardCli {
  std::string model, ids, out, device = "cpu", dtype = "f32";
  bool loss = false;
};

int run_forward(const ForwardCli& cli) {
  autograd::NoGradGuard no_grad;
  const model::ModelConfig config = model::ModelConfig::load(cli.model);
  const Device device = Device::parse(cli.device);
  model::Transformer m =
      model::Transformer::for_loading(config, device, dtype_from_name(cli.dtype));
  io::load_into(m.parameters(), io::open_checkpoint(cli.model), /*strict=*/true);
  const Tensor ids = io::load_npy(cli.ids);
  MICROLLM_CHECK(ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
                 "forward", cli.ids, " must hold an integer (B, T) array, found ", ids.describe());
  const Tensor device_ids = ids.to(DType::I64).to(device);
  const Tensor logits = m.forward(device_ids);  // (B, T, V)
  io::save_npy(cli.out, logits.to(DType::F32).to(Device::cpu()));
  if (cli.loss)
    std::printf("loss %.6f\n", model::Transformer::next_token_loss(logits, device_ids).item());
  return 0;
}

}  // namespace

Command add_forward_command(CLI::App& parent) {
  auto c = std::make_shared<ForwardCli>();
  CLI::App* cmd = parent.add_subcommand("forward", "Run one forward pass and write the logits");
  cmd->add_option("--model", c->model, "Hugging Face style folder (config.json + safetensors)")
      ->required();
  cmd->add_option("--ids", c->ids, "int64 (B, T) .npy")->required();
  cmd->add_option("--out", c->out, "F32 (B, T, V) .npy to write")->required();
  cmd->add_option("--device", c->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--dtype", c->dtype, "f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--loss", c->loss, "also print the mean next-token cross-entropy");
  return {cmd, [c] { return run_forward(*c); }};
}

}  // namespace microllm::app
