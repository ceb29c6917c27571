// microllm_sampling_runner: runs the sampling and penalty operators on .npy inputs for the
// PyTorch oracles (test_sampling_oracle.py, ../penalties/test_penalties_oracle.py). CPU.
//
//   microllm_sampling_runner distribution DIR [bf16]
//       logits.npy (B, V) f32, temperature.npy / top_p.npy / min_p.npy (B) f32, top_k.npy (B)
//       i32 → scores.npy, probs.npy (B, V) f32   (bf16: the logits are cast to BF16 first)
//   microllm_sampling_runner draws DIR COUNT SEED
//       logits.npy (1, V) and the (1) parameter files → ids.npy (COUNT) i32, drawn at
//       positions 0 .. COUNT − 1 of SEED
//   microllm_sampling_runner penalties DIR
//       logits.npy (B, V) f32, history.npy (B, L) i32, prompt_lens.npy (B) i32,
//       repetition.npy / frequency.npy / presence.npy (B) f32 → out.npy (B, V) f32
//   microllm_sampling_runner logprobs DIR N
//       logits.npy (B, V) f32, ids.npy (B) i32 → logprobs.npy (B), top_ids.npy (B, N) i32,
//       top_logprobs.npy (B, N) f32
// Errors: a message on stderr and exit code 1.
#include <exception>
#include <iostream>
#include <string>

#include "microllm/io/npy.h"
#include "microllm/ops/penalties.h"
#include "microllm/ops/sampling.h"

using namespace microllm;

namespace {

Tensor load(const std::string& dir, const std::string& name) {
  return io::load_npy(dir + "/" + name + ".npy");
}

Tensor workspace(size_t bytes) {
  return bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::U8) : Tensor();
}

ops::SamplingTensors load_params(const std::string& dir) {
  ops::SamplingTensors p;
  p.temperature = load(dir, "temperature");
  p.top_k = load(dir, "top_k");
  p.top_p = load(dir, "top_p");
  p.min_p = load(dir, "min_p");
  return p;
}

void run_distribution(const std::string& dir, bool bf16) {
  Tensor logits = load(dir, "logits");  // (B, V)
  if (bf16) logits = logits.to(DType::BF16);
  const int64_t b = logits.size(0), v = logits.size(1);
  Tensor scores = Tensor::empty({b, v}), probs = Tensor::empty({b, v});  // (B, V) each
  ops::sampling_distribution(logits, load_params(dir), scores, probs,
                             workspace(ops::sample_workspace_bytes(b, v, Device::cpu())));
  io::save_npy(dir + "/scores.npy", scores);
  io::save_npy(dir + "/probs.npy", probs);
}

void run_draws(const std::string& dir, int64_t count, int64_t seed) {
  const Tensor one = load(dir, "logits");  // (1, V)
  const int64_t v = one.size(1);
  const Tensor logits = one.expand({count, v}).contiguous();  // (COUNT, V)
  ops::SamplingTensors p = load_params(dir);
  p.temperature = p.temperature.expand({count}).contiguous();
  p.top_k = p.top_k.expand({count}).contiguous();
  p.top_p = p.top_p.expand({count}).contiguous();
  p.min_p = p.min_p.expand({count}).contiguous();
  p.seed = Tensor::full({count}, static_cast<double>(seed), DType::I64);
  p.position = Tensor::arange(count, DType::I64);
  Tensor ids = Tensor::empty({count}, DType::I32);  // (COUNT)
  ops::sample(logits, p, ids, workspace(ops::sample_workspace_bytes(count, v, Device::cpu())));
  io::save_npy(dir + "/ids.npy", ids);
}

void run_penalties(const std::string& dir) {
  Tensor logits = load(dir, "logits").clone();  // (B, V)
  const Tensor history = load(dir, "history");  // (B, L)
  const ops::PenaltyTensors p{load(dir, "repetition"), load(dir, "frequency"),
                              load(dir, "presence")};
  ops::apply_penalties(logits, history, load(dir, "prompt_lens"), p,
                       workspace(ops::penalties_workspace_bytes(history.size(0), history.size(1))));
  io::save_npy(dir + "/out.npy", logits);
}

void run_logprobs(const std::string& dir, int64_t n) {
  const Tensor logits = load(dir, "logits");  // (B, V)
  const int64_t b = logits.size(0);
  Tensor out = Tensor::empty({b});  // (B)
  Tensor top_ids = Tensor::empty({b, n}, DType::I32), top_lp = Tensor::empty({b, n});
  ops::logprobs(logits, load(dir, "ids"), out, top_ids, top_lp);
  io::save_npy(dir + "/logprobs.npy", out);
  io::save_npy(dir + "/top_ids.npy", top_ids);
  io::save_npy(dir + "/top_logprobs.npy", top_lp);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage =
      "usage: microllm_sampling_runner distribution DIR [bf16] | draws DIR COUNT SEED | "
      "penalties DIR | logprobs DIR N\n";
  if (argc < 3) {
    std::cerr << usage;
    return 1;
  }
  try {
    const std::string mode = argv[1], dir = argv[2];
    if (mode == "distribution")
      run_distribution(dir, argc > 3 && std::string(argv[3]) == "bf16");
    else if (mode == "draws" && argc == 5)
      run_draws(dir, std::stoll(argv[3]), std::stoll(argv[4]));
    else if (mode == "penalties")
      run_penalties(dir);
    else if (mode == "logprobs" && argc == 4)
      run_logprobs(dir, std::stoll(argv[3]));
    else {
      std::cerr << usage;
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "microllm_sampling_runner: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
