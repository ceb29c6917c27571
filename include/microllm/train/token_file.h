// Token files (format microllm-tokens-v1), shared by `microllm tokenize`, training,
// evaluation and tools:
//   NAME.bin       flat little-endian uint32 token ids
//   NAME.bin.json  {"format": "microllm-tokens-v1", "dtype": "uint32", "count": N,
//                   "sha256": "<hex of NAME.bin>", "vocab_size": V, ...}
// Readers verify the manifest (format, dtype, count, byte size, hash) and reject any id
// ≥ the model's vocabulary with a clear error. Writers write both files atomically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::train {

struct TokenFile {
  std::string path;
  Tensor tokens;       // (N) I32 on the CPU
  int64_t vocab_size;  // from the manifest
  std::string sha256;
};

// Loads and verifies NAME.bin with its manifest. `model_vocab_size` > 0 also checks every
// id against the model's vocabulary.
TokenFile load_token_file(const std::string& path, int64_t model_vocab_size = 0);

// Writes NAME.bin and NAME.bin.json (each to a temporary file, then renamed).
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens,
                      int64_t vocab_size);

}  // namespace microllm::train
