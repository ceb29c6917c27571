// microllm_bench_tokenizer: encode throughput of one tokenizer on one thread. Reads the
// strings of a JSONL file (one JSON string per line; run_tokenizer_bench.py cuts the text into
// paragraph chunks of a few KB and writes it), encodes every string `warmup` times untimed,
// then `repetitions` times timed, and prints one JSON document on stdout (schema
// microllm-bench-tokenizer-v1; hf_tokenizer_bench.py prints the same shape for HF tokenizers):
//
//   {"schema", "side": "microllm", "tokenizer", "strings", "bytes", "tokens", "ids_fnv1a",
//    "warmup", "repetitions", "samples_s": [seconds per repetition], "load_s"}
//
//   microllm_bench_tokenizer --tokenizer DIR --input strings.jsonl [--warmup 2] [--repetitions 10]
//
// A repetition encodes every string once (add_special_tokens = false). The per-word cache of
// the BPE model is warm after the warm-up, as HF's is: both sides measure steady state.
// ids_fnv1a (FNV-1a 64 over every id, in order) lets the driver check that both sides
// produced the same ids.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "microllm/core/error.h"
#include "microllm/io/tokenizer.h"

namespace {

using Json = nlohmann::ordered_json;

std::vector<std::string> read_strings(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MICROLLM_CHECK(in.good(), "bench_tokenizer", "cannot open --input ", path);
  std::vector<std::string> strings;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const Json value = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    MICROLLM_CHECK(value.is_string(), "bench_tokenizer", path, ":", number,
                   ": expected one JSON string per line");
    strings.push_back(value.get<std::string>());
  }
  return strings;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Encode throughput of a tokenizer on one thread (JSON on stdout)"};
  std::string tokenizer_path, input;
  int warmup = 2, repetitions = 10;
  app.add_option("--tokenizer", tokenizer_path, "directory with tokenizer.json")->required();
  app.add_option("--input", input, "JSONL file: one JSON string per line")->required();
  app.add_option("--warmup", warmup, "untimed passes over every string")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--repetitions", repetitions, "timed passes")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    const auto load_start = std::chrono::steady_clock::now();
    const microllm::io::Tokenizer tokenizer = microllm::io::Tokenizer::from_file(tokenizer_path);
    const double load_s = seconds_since(load_start);
    const std::vector<std::string> strings = read_strings(input);
    size_t bytes = 0;
    for (const std::string& s : strings) bytes += s.size();

    // The ids once, untimed, for the count and the checksum.
    uint64_t fnv = 1469598103934665603ULL;
    size_t tokens = 0;
    for (const std::string& s : strings) {
      for (const int32_t id : tokenizer.encode(s, false)) {
        fnv = (fnv ^ static_cast<uint64_t>(static_cast<uint32_t>(id))) * 1099511628211ULL;
        ++tokens;
      }
    }
    size_t sink = 0;  // keeps the timed encodes observable
    for (int r = 0; r < warmup; ++r)
      for (const std::string& s : strings) sink += tokenizer.encode(s, false).size();
    std::vector<double> samples;
    for (int r = 0; r < repetitions; ++r) {
      const auto start = std::chrono::steady_clock::now();
      for (const std::string& s : strings) sink += tokenizer.encode(s, false).size();
      samples.push_back(seconds_since(start));
    }
    Json out;
    out["schema"] = "microllm-bench-tokenizer-v1";
    out["side"] = "microllm";
    out["tokenizer"] = tokenizer_path;
    out["strings"] = strings.size();
    out["bytes"] = bytes;
    out["tokens"] = tokens;
    out["ids_fnv1a"] = std::to_string(fnv);
    out["warmup"] = warmup;
    out["repetitions"] = repetitions;
    out["samples_s"] = samples;
    out["load_s"] = load_s;
    out["sink"] = sink;
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& e) {
    std::printf(
        "%s\n",
        Json{{"schema", "microllm-bench-tokenizer-v1"}, {"side", "microllm"}, {"error", e.what()}}
            .dump()
            .c_str());
    return 1;
  }
  return 0;
}
