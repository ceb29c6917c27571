// microllm_model_runner CONFIG.json SEED IDS.npy OUT_DIR [f32|f64]
//
// Builds the transformer of CONFIG.json with random parameters (seed SEED) in the given
// dtype on the CPU, writes every parameter as OUT_DIR/param/<name>.npy, runs forward on
// the int64 (B, T) ids, writes OUT_DIR/logits.npy and OUT_DIR/loss.npy (next-token
// cross-entropy), runs backward from the loss and writes OUT_DIR/grad/<name>.npy for every
// parameter. Also writes OUT_DIR/values/<name>.npy for every observed intermediate.
// The PyTorch side (test_model_oracle.py) rebuilds the architecture from these files.
#include <cstdio>
#include <filesystem>
#include <string>

#include "microllm/io/npy.h"
#include "microllm/model/transformer.h"

using namespace microllm;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s CONFIG.json SEED IDS.npy OUT_DIR [f32|f64]\n", argv[0]);
    return 2;
  }
  try {
    const model::ModelConfig config = model::ModelConfig::load(argv[1]);
    const uint64_t seed = std::stoull(argv[2]);
    const Tensor ids = io::load_npy(argv[3]);
    const std::filesystem::path out(argv[4]);
    const DType dtype = argc > 5 ? dtype_from_name(argv[5]) : DType::F32;
    for (const char* sub : {"param", "grad", "values"})
      std::filesystem::create_directories(out / sub);

    model::Transformer m(config, Device::cpu(), dtype, seed, 0.2);
    m.set_requires_grad(true);
    for (const auto& [name, t] : m.parameters())
      io::save_npy((out / "param" / (name + ".npy")).string(), t);
    const Tensor logits = m.forward(ids, Tensor(), [&](const std::string& name, const Tensor& v) {
      io::save_npy((out / "values" / (name + ".npy")).string(), v.detach());
    });
    const Tensor loss = model::Transformer::next_token_loss(logits, ids);
    io::save_npy((out / "logits.npy").string(), logits.detach());
    io::save_npy((out / "loss.npy").string(), loss.detach());
    loss.backward();
    for (const auto& [name, t] : m.parameters()) {
      if (!t.grad().defined()) {
        std::fprintf(stderr, "parameter %s received no gradient\n", name.c_str());
        return 1;
      }
      io::save_npy((out / "grad" / (name + ".npy")).string(), t.grad());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "microllm_model_runner: %s\n", e.what());
    return 1;
  }
  return 0;
}
