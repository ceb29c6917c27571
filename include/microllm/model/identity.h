// Model identity: one SHA-256 over what defines a model folder — its canonical config, its
// tokenizer and every tensor — rather than over the bytes of its files. Two folders with the
// same tensors have the same identity whatever the tensors' order in the file, the
// safetensors metadata, the sharding or the JSON formatting; one changed element, config
// field or tokenizer entry changes it. docs/default-model.md ("Identity") gives the byte
// layout, so that other tools can recompute it (tools/default_model/model_identity.py).
#pragma once

#include <cstdint>
#include <string>

namespace microllm::model {

struct ModelIdentity {
  std::string sha256;          // 64 lower-case hex digits
  int64_t tensors = 0;         // tensors hashed
  uint64_t tensor_bytes = 0;   // their data bytes
  bool has_tokenizer = false;  // tokenizer.json was part of the hash
};

// The identity of the Hugging Face style folder `dir`: config.json (read as ModelConfig,
// written back canonically), tokenizer.json and tokenizer_config.json when present (parsed,
// written back with sorted keys), and the tensors of model.safetensors or its index in name
// order. Error when the folder, its config or its weights cannot be read.
ModelIdentity model_identity(const std::string& dir);

}  // namespace microllm::model
