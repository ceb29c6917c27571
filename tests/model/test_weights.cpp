// ModelWeights: the flat buffer and its views. Random initialization equals Transformer's;
// the Hugging Face parameters are row views of the fused QKV and gate/up matrices; every
// view lies inside the one buffer, aligned, without overlap; a saved checkpoint loads back
// (F32, and BF16 on disk into F32); a Transformer over the views computes what the
// original Transformer computes; bad folders are one clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/expect_error.h"
#include "microllm/autograd/node.h"
#include "microllm/io/safetensors.h"
#include "microllm/model/transformer.h"
#include "microllm/model/weights.h"
#include "model/tiny_config.h"

using namespace microllm;
using microllm::testing::throws_error;
using microllm::testing::tiny_config;
using model::ModelConfig;
using model::ModelWeights;
using model::Transformer;

namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::equal(static_cast<const char*>(x.raw_data()),
                    static_cast<const char*>(x.raw_data()) + x.nbytes(),
                    static_cast<const char*>(y.raw_data()));
}

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("microllm_weights_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

const model::Family kFamilies[] = {model::Family::Qwen2, model::Family::Llama,
                                   model::Family::Qwen3};

}  // namespace

TEST(ModelWeights, RandomEqualsTransformerInitialization) {
  for (model::Family family : kFamilies) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      const ModelConfig c = tiny_config(family);
      const ModelWeights w = ModelWeights::random(c, Device::cpu(), dtype, 7);
      const Transformer t(c, Device::cpu(), dtype, 7);
      ASSERT_EQ(w.named().size(), t.parameters().size());
      for (const auto& [name, p] : t.parameters()) {
        ASSERT_TRUE(w.named().count(name)) << name;
        EXPECT_TRUE(bit_equal(w.named().at(name), p)) << name;
      }
    }
  }
}

TEST(ModelWeights, FusedMatricesHoldTheHuggingFaceRows) {
  const ModelConfig c = tiny_config(model::Family::Qwen2);
  const ModelWeights w = ModelWeights::random(c, Device::cpu(), DType::F32, 3);
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), F = c.intermediate_size;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const model::LayerWeights& l = w.layers()[static_cast<size_t>(i)];
    EXPECT_EQ(l.qkv.shape(), (Shape{qd + 2 * kvd, c.hidden_size}));
    EXPECT_TRUE(bit_equal(l.qkv.narrow(0, 0, qd), w.named().at(p + "self_attn.q_proj.weight")));
    EXPECT_TRUE(bit_equal(l.qkv.narrow(0, qd, kvd), w.named().at(p + "self_attn.k_proj.weight")));
    EXPECT_TRUE(
        bit_equal(l.qkv.narrow(0, qd + kvd, kvd), w.named().at(p + "self_attn.v_proj.weight")));
    EXPECT_TRUE(
        bit_equal(l.qkv_bias.narrow(0, qd, kvd), w.named().at(p + "self_attn.k_proj.bias")));
    EXPECT_TRUE(bit_equal(l.gate_up.narrow(0, 0, F), w.named().at(p + "mlp.gate_proj.weight")));
    EXPECT_TRUE(bit_equal(l.gate_up.narrow(0, F, F), w.named().at(p + "mlp.up_proj.weight")));
    // A write through the Hugging Face view is seen by the fused matrix (same storage).
    Tensor up = w.named().at(p + "mlp.up_proj.weight");
    up.narrow(0, 2, 1).fill(5.0);
    EXPECT_EQ(l.gate_up.narrow(0, F + 2, 1).to_vector_f64(),
              std::vector<double>(static_cast<size_t>(c.hidden_size), 5.0));
  }
  EXPECT_TRUE(w.lm_head().same(w.embed()));  // tied
}

TEST(ModelWeights, ViewsShareOneBufferAlignedWithoutOverlap) {
  for (model::Family family : kFamilies) {
    const ModelWeights w = ModelWeights::random(tiny_config(family), Device::cpu(), DType::BF16);
    std::vector<std::pair<int64_t, int64_t>> ranges;  // [start, end) in elements
    std::vector<Tensor> fused = {w.embed(), w.final_norm()};
    if (!w.lm_head().same(w.embed())) fused.push_back(w.lm_head());
    for (const model::LayerWeights& l : w.layers())
      for (const Tensor& t : {l.input_norm, l.qkv, l.qkv_bias, l.q_norm, l.k_norm, l.o_proj,
                              l.post_norm, l.gate_up, l.down})
        if (t.defined()) fused.push_back(t);
    for (const Tensor& t : fused) {
      EXPECT_EQ(t.storage().get(), w.flat().storage().get());
      EXPECT_TRUE(t.is_contiguous());
      // 256-byte aligned within the buffer (whose base the allocator aligns: 256 on CUDA).
      EXPECT_EQ(
          (static_cast<const char*>(t.raw_data()) - static_cast<const char*>(w.flat().raw_data())) %
              256,
          0);
      ranges.push_back({t.offset(), t.offset() + t.numel()});
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
    EXPECT_LE(ranges.back().second, w.flat().offset() + w.flat().numel());
    for (const auto& [name, t] : w.named())
      EXPECT_EQ(t.storage().get(), w.flat().storage().get()) << name;
  }
}

TEST(ModelWeights, LoadsWhatWasSavedAndConvertsDtypes) {
  const ModelConfig c = tiny_config(model::Family::Llama);
  const Transformer original(c, Device::cpu(), DType::F32, 11);
  const auto dir = temp_dir("load");
  c.to_json();
  {
    std::ofstream(dir / "config.json") << c.to_json().dump(2);
    io::NamedTensors tensors;
    for (const auto& [name, p] : original.parameters())
      tensors.push_back({name, p.to(DType::BF16)});
    io::save_safetensors((dir / "model.safetensors").string(), tensors);
  }
  const ModelWeights w = ModelWeights::load(dir.string(), Device::cpu(), DType::F32);
  for (const auto& [name, p] : original.parameters())
    EXPECT_TRUE(bit_equal(w.named().at(name), p.to(DType::BF16).to(DType::F32))) << name;
  std::filesystem::remove_all(dir);
}

TEST(ModelWeights, TransformerOverTheViewsComputesTheSameLogits) {
  autograd::NoGradGuard no_grad;
  for (model::Family family : kFamilies) {
    const ModelConfig c = tiny_config(family);
    const Transformer original(c, Device::cpu(), DType::F32, 5);
    const ModelWeights w = ModelWeights::random(c, Device::cpu(), DType::F32, 5);
    const Transformer shared = Transformer::from_weights(w);
    const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 5, 9, 2, 36, 0}, {2, 3});
    EXPECT_TRUE(bit_equal(shared.forward(ids), original.forward(ids)));
  }
}

TEST(ModelWeights, BadFoldersAreOneClearError) {
  EXPECT_TRUE(
      throws_error([] { ModelWeights::load("/nonexistent/model", Device::cpu(), DType::F32); },
                   "ModelWeights::load", {"/nonexistent/model", "no folder"}));
  const ModelConfig c = tiny_config(model::Family::Qwen2);
  const auto dir = temp_dir("missing");
  std::ofstream(dir / "config.json") << c.to_json().dump(2);
  const Transformer original(c, Device::cpu(), DType::F32, 1);
  io::NamedTensors tensors;
  for (const auto& [name, p] : original.parameters())
    if (name != "model.norm.weight") tensors.push_back({name, p});
  io::save_safetensors((dir / "model.safetensors").string(), tensors);
  EXPECT_TRUE(throws_error([&] { ModelWeights::load(dir.string(), Device::cpu(), DType::F32); }, "",
                           {"model.norm.weight"}));
  std::filesystem::remove_all(dir);
}
