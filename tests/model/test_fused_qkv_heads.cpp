// The model with ops::rope_qkv_heads (the default) in place of split, rope and the values'
// copy gives the loss and every parameter gradient bit for bit, for each family (qwen3, with
// its q/k norms, keeps the unfused form) in F32 and F64.
#include <gtest/gtest.h>

#include <string>

#include "model/model_gradients.h"
#include "model/tiny_config.h"
#include "ops/op_test_util.h"
#include "support/scoped_env.h"

using namespace microllm;
using microllm::testing::ScopedEnv;
using microllm::testing::tiny_config;
using microllm::testing::optest::same_bits;

TEST(FusedQkvHeads, TransformerGradientsEqualTheUnfusedModelBitForBit) {
  for (model::Family family : {model::Family::Qwen2, model::Family::Llama, model::Family::Qwen3})
    for (DType dtype : {DType::F32, DType::F64}) {
      auto run = [&](const char* fused) {
        const ScopedEnv env("MICROLLM_FUSED_QKV_HEADS", fused);
        return microllm::testing::loss_and_gradients(tiny_config(family), Device::cpu(), dtype);
      };
      const auto [loss_plain, grads_plain] = run("0");
      const auto [loss_fused, grads_fused] = run("1");
      const std::string where =
          std::string(dtype_name(dtype)) + " family " + std::to_string(static_cast<int>(family));
      EXPECT_TRUE(same_bits(loss_fused, loss_plain)) << where;
      ASSERT_EQ(grads_fused.size(), grads_plain.size());
      for (const auto& [name, g] : grads_plain) {
        ASSERT_TRUE(g.defined()) << where << " " << name;
        EXPECT_TRUE(same_bits(grads_fused.at(name), g)) << where << " " << name;
      }
    }
}
