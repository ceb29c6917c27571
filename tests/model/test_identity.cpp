// Model identity (microllm/model/identity.h): equal for equal tensors whatever the file's
// tensor order, metadata, sharding or JSON formatting; different for one changed element (one
// bit), one changed config field, a changed dtype or shape, or a changed tokenizer; bad
// folders are one clear error. tests/cli/test_default_model.py recomputes the hash of the
// default model in Python from the layout documented in docs/default-model.md.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/expect_error.h"
#include "microllm/io/safetensors.h"
#include "microllm/model/config.h"
#include "microllm/model/identity.h"

using namespace microllm;
using microllm::testing::throws_error;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

class ModelIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::temp_directory_path() /
        ("microllm-identity-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    config_ = json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
      "vocab_size": 11, "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1,
      "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32,
      "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": true})");
    std::vector<float> a(11 * 8), b(8);
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.01f * static_cast<float>(i) - 0.3f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f + 0.125f * static_cast<float>(i);
    tensors_ = {{"model.embed_tokens.weight", Tensor::from_vector(a, {11, 8}, DType::BF16)},
                {"model.norm.weight", Tensor::from_vector(b, {8}, DType::F32)}};
    tokenizer_ = json::parse(R"({"version": "1.0", "model": {"type": "BPE",
      "vocab": {"a": 0, "b": 1}, "merges": []}, "added_tokens": []})");
  }
  void TearDown() override { fs::remove_all(root_); }

  // A folder with `tensors` in one file (or shards of `shard_bytes`), `config` written with
  // `indent`, and tokenizer.json when `tokenizer` is an object.
  std::string folder(const std::string& name, const io::NamedTensors& tensors, const json& config,
                     const json& tokenizer, int indent = 2,
                     const std::map<std::string, std::string>& metadata = {},
                     uint64_t shard_bytes = 0) {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config.dump(indent);
    if (tokenizer.is_object()) std::ofstream(dir / "tokenizer.json") << tokenizer.dump(indent);
    if (shard_bytes > 0)
      io::save_safetensors_sharded(dir.string(), tensors, shard_bytes, metadata);
    else
      io::save_safetensors((dir / "model.safetensors").string(), tensors, metadata);
    return dir.string();
  }
  std::string identity(const std::string& dir) { return model::model_identity(dir).sha256; }

  fs::path root_;
  json config_, tokenizer_;
  io::NamedTensors tensors_;
};

TEST_F(ModelIdentityTest, EqualTensorsGiveEqualIdentities) {
  const std::string base = identity(folder("base", tensors_, config_, tokenizer_));
  EXPECT_EQ(base.size(), 64u);
  // Reversed tensor order, other metadata, other JSON formatting, an extra config key that
  // does not define the model, and two shards instead of one file.
  io::NamedTensors reversed(tensors_.rbegin(), tensors_.rend());
  json config = config_;
  config["transformers_version"] = "4.40.1";
  config["torch_dtype"] = "bfloat16";  // the tensors' dtypes are hashed, not this field
  EXPECT_EQ(identity(folder("reordered", reversed, config, tokenizer_, -1, {{"note", "x"}})), base);
  EXPECT_EQ(identity(folder("sharded", tensors_, config_, tokenizer_, 4, {}, 64)), base);
  const model::ModelIdentity id = model::model_identity(root_ / "base");
  EXPECT_EQ(id.tensors, 2);
  EXPECT_EQ(id.tensor_bytes, 11u * 8u * 2u + 8u * 4u);
  EXPECT_TRUE(id.has_tokenizer);
}

TEST_F(ModelIdentityTest, OneChangedElementChangesTheIdentity) {
  const std::string base = identity(folder("base", tensors_, config_, tokenizer_));
  io::NamedTensors changed = tensors_;
  changed[1].second = tensors_[1].second.clone();
  uint32_t bits;
  float* last = changed[1].second.data<float>() + 7;
  std::memcpy(&bits, last, 4);
  bits ^= 1u;  // the lowest mantissa bit of the last element
  std::memcpy(last, &bits, 4);
  EXPECT_NE(identity(folder("changed", changed, config_, tokenizer_)), base);
  // The same values in another dtype, or another shape, are another model.
  io::NamedTensors widened = tensors_;
  widened[0].second = tensors_[0].second.to(DType::F32);
  EXPECT_NE(identity(folder("widened", widened, config_, tokenizer_)), base);
  io::NamedTensors reshaped = tensors_;
  reshaped[1].second = tensors_[1].second.reshape({2, 4});
  EXPECT_NE(identity(folder("reshaped", reshaped, config_, tokenizer_)), base);
  io::NamedTensors renamed = tensors_;
  renamed[1].first = "model.norm.bias";
  EXPECT_NE(identity(folder("renamed", renamed, config_, tokenizer_)), base);
}

TEST_F(ModelIdentityTest, ConfigAndTokenizerChangesChangeTheIdentity) {
  const std::string base = identity(folder("base", tensors_, config_, tokenizer_));
  json config = config_;
  config["rope_theta"] = 10001.0;
  EXPECT_NE(identity(folder("rope", tensors_, config, tokenizer_)), base);
  config = config_;
  config["rms_norm_eps"] = 1e-5;
  EXPECT_NE(identity(folder("eps", tensors_, config, tokenizer_)), base);
  json tokenizer = tokenizer_;
  tokenizer["model"]["vocab"]["c"] = 2;
  EXPECT_NE(identity(folder("tokenizer", tensors_, config_, tokenizer)), base);
  const std::string none = identity(folder("no-tokenizer", tensors_, config_, nullptr));
  EXPECT_NE(none, base);
  EXPECT_FALSE(model::model_identity(root_ / "no-tokenizer").has_tokenizer);
  std::ofstream(root_ / "base" / "tokenizer_config.json") << R"({"eos_token": "b"})";
  EXPECT_NE(identity((root_ / "base").string()), base);
}

TEST_F(ModelIdentityTest, BadFoldersAreOneClearError) {
  EXPECT_TRUE(throws_error([&] { model::model_identity((root_ / "missing").string()); },
                           "model identity", {"expected a model folder"}));
  const std::string dir = folder("bad-tokenizer", tensors_, config_, tokenizer_);
  std::ofstream(fs::path(dir) / "tokenizer.json") << "{not json";
  EXPECT_TRUE(throws_error([&] { model::model_identity(dir); }, "model identity",
                           {"tokenizer.json", "is not valid JSON"}));
  fs::remove(fs::path(dir) / "model.safetensors");
  std::ofstream(fs::path(dir) / "tokenizer.json") << tokenizer_.dump();
  EXPECT_THROW(model::model_identity(dir), Error);
}

}  // namespace
