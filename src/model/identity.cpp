// The identity hash (microllm/model/identity.h). Every part enters the hash as a labelled,
// length-prefixed field, "LABEL LENGTH\n" + bytes + "\n", so that no two different inputs
// can produce the same byte stream:
//   "microllm-model-identity-v2\n"
//   field("config", ModelConfig::to_json() without torch_dtype, dumped compactly with sorted
//                   keys; the tensors' own dtypes are hashed below)
//   field("tokenizer.json", parsed and dumped the same way)          or field("tokenizer.json", "")
//   field("tokenizer_config.json", the same)                         or an empty field
//   per tensor in name order: field("tensor", name), field("dtype", safetensors dtype name),
//     field("shape", "[d0,d1,...]"), field("data", the tensor's bytes as stored)
#include "microllm/model/identity.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "microllm/core/error.h"
#include "microllm/io/safetensors.h"
#include "microllm/io/sha256.h"
#include "microllm/model/config.h"

namespace microllm::model {
namespace {

namespace fs = std::filesystem;
constexpr const char* kOp = "model identity";

void field(io::Sha256& h, const std::string& label, const void* data, size_t size) {
  const std::string head = label + " " + std::to_string(size) + "\n";
  h.update(head.data(), head.size());
  h.update(data, size);
  h.update("\n", 1);
}

void field(io::Sha256& h, const std::string& label, const std::string& text) {
  field(h, label, text.data(), text.size());
}

// A JSON file written back with sorted keys and no whitespace; "" when the file is absent.
std::string canonical_json_file(const fs::path& path) {
  if (!fs::exists(path)) return "";
  std::ifstream in(path, std::ios::binary);
  MICROLLM_CHECK(in.good(), kOp, "cannot read ", path.string());
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  MICROLLM_CHECK(!j.is_discarded(), kOp, path.string(), " is not valid JSON");
  return j.dump(-1, ' ', /*ensure_ascii=*/false);
}

}  // namespace

ModelIdentity model_identity(const std::string& dir) {
  MICROLLM_CHECK(fs::is_directory(dir), kOp, "expected a model folder, found ",
                 fs::exists(dir) ? "a file" : "nothing", " at '", dir, "'");
  ModelIdentity id;
  io::Sha256 h;
  const std::string magic = "microllm-model-identity-v2\n";
  h.update(magic.data(), magic.size());
  nlohmann::json config = ModelConfig::load(dir).to_json();
  config.erase("torch_dtype");
  field(h, "config", config.dump());
  const std::string tokenizer = canonical_json_file(fs::path(dir) / "tokenizer.json");
  id.has_tokenizer = !tokenizer.empty();
  field(h, "tokenizer.json", tokenizer);
  field(h, "tokenizer_config.json", canonical_json_file(fs::path(dir) / "tokenizer_config.json"));

  const io::SafetensorsCheckpoint checkpoint = io::open_checkpoint(dir);
  std::vector<std::string> names = checkpoint.names();
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const io::SafetensorsTensorInfo& info = checkpoint.info(name);
    std::string shape = "[";
    for (size_t i = 0; i < info.shape.size(); ++i)
      shape += (i ? "," : "") + std::to_string(info.shape[i]);
    shape += "]";
    field(h, "tensor", name);
    field(h, "dtype", std::string(io::safetensors_dtype_name(info.dtype)));
    field(h, "shape", shape);
    // The bytes as stored: the mapped data section, no conversion.
    const Tensor t = checkpoint.tensor(name);
    MICROLLM_CHECK(t.is_contiguous() && t.nbytes() == info.nbytes(), kOp, name, ": expected ",
                   info.nbytes(), " contiguous bytes");
    field(h, "data", t.raw_data(), info.nbytes());
    ++id.tensors;
    id.tensor_bytes += info.nbytes();
  }
  id.sha256 = h.hex_digest();
  return id;
}

}  // namespace microllm::model
