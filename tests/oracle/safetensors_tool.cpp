// microllm_safetensors_tool: microllm's safetensors reader and writer driven from Python,
// for the interoperability tests (tests/io/test_safetensors_interop.py).
//
//   microllm_safetensors_tool dump CHECKPOINT OUT_DIR
//       Opens CHECKPOINT (a .safetensors file, an index .json or a Hugging Face folder) and
//       writes OUT_DIR/<i>.npy for the i-th tensor (BF16 and FP8 as float32, see npy.h) and
//       OUT_DIR/manifest.json: {"tensors": [{"name", "file", "dtype", "shape"}, ...],
//       "metadata": {...}, "index_metadata": {...}}.
//   microllm_safetensors_tool write SPEC.json OUT
//       SPEC: {"tensors": [{"name": N, "npy": PATH, "dtype": "BF16",
//                           "transpose": false}, ...],      // transpose: save a (d1, d0) view
//              "metadata": {...}, "shard_bytes": 0}
//       Loads each .npy, casts it to dtype and saves OUT (a file; with shard_bytes > 0, a
//       directory holding shards and model.safetensors.index.json).
// Errors: a message on stderr and exit code 1.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "microllm/io/npy.h"
#include "microllm/io/safetensors.h"

namespace {

using namespace microllm;
using nlohmann::json;
namespace fs = std::filesystem;

void dump(const std::string& checkpoint_path, const std::string& out_dir) {
  const io::SafetensorsCheckpoint checkpoint = io::open_checkpoint(checkpoint_path);
  fs::create_directories(out_dir);
  json manifest = {{"tensors", json::array()},
                   {"metadata", checkpoint.metadata()},
                   {"index_metadata", checkpoint.index_metadata()}};
  for (size_t i = 0; i < checkpoint.names().size(); ++i) {
    const std::string& name = checkpoint.names()[i];
    const std::string file = std::to_string(i) + ".npy";
    const Tensor t = checkpoint.tensor(name);
    io::save_npy((fs::path(out_dir) / file).string(), t);
    manifest["tensors"].push_back({{"name", name},
                                   {"file", file},
                                   {"dtype", std::string(io::safetensors_dtype_name(t.dtype()))},
                                   {"shape", t.shape()}});
  }
  std::ofstream((fs::path(out_dir) / "manifest.json").string()) << manifest.dump(2) << "\n";
}

void write(const std::string& spec_path, const std::string& out) {
  std::ifstream in(spec_path);
  MICROLLM_CHECK(in, "safetensors_tool", "cannot open ", spec_path);
  const json spec = json::parse(in);
  io::NamedTensors tensors;
  for (const json& entry : spec.at("tensors")) {
    Tensor t = io::load_npy(entry.at("npy").get<std::string>())
                   .to(io::dtype_from_safetensors_name(entry.at("dtype").get<std::string>()));
    if (entry.value("transpose", false)) t = t.transpose(0, 1).contiguous().transpose(0, 1);
    tensors.emplace_back(entry.at("name").get<std::string>(), t);
  }
  const auto metadata = spec.value("metadata", std::map<std::string, std::string>{});
  const uint64_t shard_bytes = spec.value("shard_bytes", uint64_t{0});
  if (shard_bytes > 0)
    io::save_safetensors_sharded(out, tensors, shard_bytes, metadata);
  else
    io::save_safetensors(out, tensors, metadata);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (argc != 4 || (command != "dump" && command != "write")) {
    std::cerr << "usage: microllm_safetensors_tool dump CHECKPOINT OUT_DIR\n"
                 "       microllm_safetensors_tool write SPEC.json OUT\n";
    return 1;
  }
  try {
    if (command == "dump")
      dump(argv[2], argv[3]);
    else
      write(argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::cerr << "microllm_safetensors_tool: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
