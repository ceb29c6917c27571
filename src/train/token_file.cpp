// Reading and writing microllm-tokens-v1 token files (see token_file.h).
#include "microllm/train/token_file.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "microllm/core/error.h"
#include "microllm/io/sha256.h"

namespace microllm::train {
namespace {

constexpr const char* kFormat = "microllm-tokens-v1";

// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
void write_atomically(const std::string& path, const void* bytes, size_t size) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MICROLLM_CHECK(out.good(), "token file", "cannot write ", tmp);
    out.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
    out.flush();
    MICROLLM_CHECK(out.good(), "token file", "writing ", tmp, " failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    MICROLLM_FAIL("token file", "cannot rename ", tmp, " to ", path, ": ", ec.message());
  }
}

}  // namespace

TokenFile load_token_file(const std::string& path, int64_t model_vocab_size) {
  const std::string manifest_path = path + ".json";
  std::ifstream manifest_in(manifest_path);
  MICROLLM_CHECK(manifest_in.good(), "token file", "missing manifest ", manifest_path, " beside ",
                 path);
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(manifest_in);
  } catch (const nlohmann::json::exception& e) {
    MICROLLM_FAIL("token file", manifest_path, ": invalid JSON: ", e.what());
  }
  auto field = [&](const char* key) -> const nlohmann::json& {
    MICROLLM_CHECK(m.is_object() && m.contains(key), "token file", manifest_path,
                   ": missing field '", key, "'");
    return m.at(key);
  };
  MICROLLM_CHECK(field("format") == kFormat, "token file", manifest_path, ": format is ",
                 field("format").dump(), ", expected \"", kFormat, "\"");
  MICROLLM_CHECK(field("dtype") == "uint32", "token file", manifest_path, ": dtype is ",
                 field("dtype").dump(), ", expected \"uint32\"");
  MICROLLM_CHECK(field("count").is_number_unsigned() && field("vocab_size").is_number_integer() &&
                     field("sha256").is_string(),
                 "token file", manifest_path,
                 ": count, vocab_size and sha256 must be a count, an integer and a string");
  const int64_t count = field("count").get<int64_t>();
  const int64_t vocab = field("vocab_size").get<int64_t>();

  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  MICROLLM_CHECK(!ec, "token file", "cannot read ", path, ": ", ec.message());
  MICROLLM_CHECK(size == static_cast<uintmax_t>(count) * 4, "token file", path, " has ", size,
                 " bytes; the manifest's count ", count, " needs ", count * 4);
  std::vector<uint32_t> ids(static_cast<size_t>(count));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(size));
  MICROLLM_CHECK(in.good() || count == 0, "token file", "reading ", path, " failed");
  const std::string digest = io::sha256_hex(ids.data(), ids.size() * 4);
  MICROLLM_CHECK(digest == field("sha256").get<std::string>(), "token file", path, " has SHA-256 ",
                 digest, " but its manifest says ", field("sha256").get<std::string>());

  const int64_t limit = model_vocab_size > 0 ? model_vocab_size : vocab;
  Tensor tokens = Tensor::empty({count}, DType::I32);  // (N)
  int32_t* p = tokens.data<int32_t>();                 // (N)
  for (int64_t i = 0; i < count; ++i) {
    MICROLLM_CHECK(ids[i]<static_cast<uint64_t>(limit), "token file", path, ": token ", ids[i],
                          " at position ", i, " is outside the ", model_vocab_size> 0
                       ? "model's"
                       : "manifest's",
                   " vocabulary of ", limit);
    p[i] = static_cast<int32_t>(ids[i]);
  }
  return {path, tokens, vocab, digest};
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens,
                      int64_t vocab_size) {
  for (size_t i = 0; i < tokens.size(); ++i)
    MICROLLM_CHECK(tokens[i] < static_cast<uint64_t>(vocab_size), "token file", "token ", tokens[i],
                   " at position ", i, " is outside the vocabulary of ", vocab_size);
  const std::string digest = io::sha256_hex(tokens.data(), tokens.size() * 4);
  write_atomically(path, tokens.data(), tokens.size() * 4);
  const nlohmann::ordered_json manifest = {{"format", kFormat},
                                           {"dtype", "uint32"},
                                           {"count", tokens.size()},
                                           {"sha256", digest},
                                           {"vocab_size", vocab_size}};
  const std::string text = manifest.dump(2) + "\n";
  write_atomically(path + ".json", text.data(), text.size());
}

}  // namespace microllm::train
