// microllm_tokenizer_parity: compares microllm's ids with the oracle's for a corpus.
//
//   microllm_tokenizer_parity --tokenizer DIR --corpus corpus.jsonl --expected expected.jsonl
//                             [--name NAME] [--roundtrip] [--strict] [--report N]
//
// corpus.jsonl comes from make_corpus.py, expected.jsonl from oracle.mjs (line i answers
// corpus line i: {"plain": ids, "special": ids with add_special_tokens}). For every string:
//   - ids without and with special tokens must equal the oracle's exactly, except for lines
//     marked "js_differs" (a known difference between the JS port and HF; HF wins), which
//     are counted and listed (--strict compares them too: for HF's own ids, hf_oracle.py);
//   - the StreamingDecoder, fed one id at a time, must give what decode() gives;
//   - with --roundtrip: decode(encode(x)) must equal normalize(x) (NFC for Qwen, x itself for
//     Llama 3 and DeepSeek; for invalid UTF-8, of its U+FFFD repair).
// Prints one summary line starting with PARITY; exits 1 on any failure.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "microllm/core/error.h"
#include "microllm/io/tokenizer.h"

namespace {

using microllm::io::StreamingDecoder;
using microllm::io::Tokenizer;

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string ids_text(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump(); }

// The first position where two id lists differ, with a little context.
std::string first_difference(const std::vector<int32_t>& ours, const std::vector<int32_t>& theirs) {
  size_t i = 0;
  while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
  const size_t from = i > 3 ? i - 3 : 0;
  auto slice = [&](const std::vector<int32_t>& v) {
    return ids_text(
        std::vector<int32_t>(v.begin() + static_cast<std::ptrdiff_t>(std::min(from, v.size())),
                             v.begin() + static_cast<std::ptrdiff_t>(std::min(i + 6, v.size()))));
  };
  return "at index " + std::to_string(i) + " (lengths " + std::to_string(ours.size()) + " vs " +
         std::to_string(theirs.size()) + "): microllm ..." + slice(ours) + " oracle ..." +
         slice(theirs);
}

struct Options {
  std::string tokenizer, corpus, expected, name;
  bool roundtrip = false;
  bool strict = false;  // compare the js_differs lines too (the expected ids come from HF)
  int report = 10;
};

int run(const Options& o) {
  const Tokenizer tokenizer = Tokenizer::from_file(o.tokenizer);
  const std::vector<std::string> corpus = read_lines(o.corpus);
  const std::vector<std::string> expected = read_lines(o.expected);
  if (corpus.size() != expected.size())
    throw std::runtime_error(o.corpus + " has " + std::to_string(corpus.size()) + " lines but " +
                             o.expected + " has " + std::to_string(expected.size()));
  size_t plain_equal = 0, special_equal = 0, roundtrip_ok = 0, stream_ok = 0, known = 0,
         known_differ = 0;
  size_t failures = 0, bytes = 0, tokens = 0;
  double encode_seconds = 0;
  int reported = 0;
  auto report = [&](const std::string& name, const std::string& what) {
    if (reported++ < o.report)
      std::printf("MISMATCH %s %s: %s\n", o.name.c_str(), name.c_str(), what.c_str());
  };
  for (size_t i = 0; i < corpus.size(); ++i) {
    const nlohmann::json row = nlohmann::json::parse(corpus[i]);
    const nlohmann::json want = nlohmann::json::parse(expected[i]);
    const std::string name = row.at("name").get<std::string>();
    const std::string text = row.at("text").get<std::string>();
    const std::string input = row.contains("hex") ? unhex(row["hex"].get<std::string>()) : text;
    const bool js_differs = row.contains("js_differs") && !o.strict;

    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> plain = tokenizer.encode(input, false);
    encode_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::vector<int32_t> special = tokenizer.encode(input, true);
    bytes += input.size();
    tokens += plain.size();

    const bool plain_same = plain == want.at("plain").get<std::vector<int32_t>>();
    const bool special_same = special == want.at("special").get<std::vector<int32_t>>();
    if (js_differs) {
      ++known;
      if (!plain_same || !special_same) {
        ++known_differ;
        std::printf("KNOWN %s %s: differs from the JS oracle (%s); microllm %s\n", o.name.c_str(),
                    name.c_str(), row["js_differs"].get<std::string>().c_str(),
                    ids_text(plain).c_str());
      }
    } else {
      plain_equal += plain_same;
      special_equal += special_same;
      if (!plain_same) {
        ++failures;
        report(name, "ids " + first_difference(plain, want["plain"].get<std::vector<int32_t>>()) +
                         " text " + nlohmann::json(text).dump());
      } else if (!special_same) {
        ++failures;
        report(name, "ids with special tokens " +
                         first_difference(special, want["special"].get<std::vector<int32_t>>()));
      }
    }

    const std::string decoded = tokenizer.decode(plain, false);
    StreamingDecoder stream(tokenizer);
    std::string streamed;
    for (const int32_t id : plain) streamed += stream.push(id);
    streamed += stream.finish();
    if (streamed == decoded) {
      ++stream_ok;
    } else {
      ++failures;
      report(name, "streaming decode " + nlohmann::json(streamed).dump() + " != decode " +
                       nlohmann::json(decoded).dump());
    }
    if (o.roundtrip) {
      if (decoded == tokenizer.normalize(text)) {
        ++roundtrip_ok;
      } else {
        ++failures;
        report(name, "decode(encode(x)) " + nlohmann::json(decoded).dump() + " != normalize(x) " +
                         nlohmann::json(tokenizer.normalize(text)).dump());
      }
    }
  }
  const size_t compared = corpus.size() - known;
  std::printf(
      "PARITY %s strings=%zu compared=%zu plain_equal=%zu special_equal=%zu stream_ok=%zu "
      "roundtrip=%s "
      "js_differs=%zu(differing %zu) failures=%zu bytes=%zu tokens=%zu encode_MBps=%.1f\n",
      o.name.c_str(), corpus.size(), compared, plain_equal, special_equal, stream_ok,
      o.roundtrip ? std::to_string(roundtrip_ok).c_str() : "skipped", known, known_differ, failures,
      bytes, tokens, encode_seconds > 0 ? static_cast<double>(bytes) / encode_seconds / 1e6 : 0.0);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--tokenizer")
      o.tokenizer = value();
    else if (arg == "--corpus")
      o.corpus = value();
    else if (arg == "--expected")
      o.expected = value();
    else if (arg == "--name")
      o.name = value();
    else if (arg == "--report")
      o.report = std::stoi(value());
    else if (arg == "--roundtrip")
      o.roundtrip = true;
    else if (arg == "--strict")
      o.strict = true;
    else {
      std::fprintf(stderr, "microllm_tokenizer_parity: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (o.tokenizer.empty() || o.corpus.empty() || o.expected.empty()) {
    std::fprintf(
        stderr,
        "usage: microllm_tokenizer_parity --tokenizer DIR --corpus F --expected F [--name N] "
        "[--roundtrip] [--strict] [--report N]\n");
    return 2;
  }
  if (o.name.empty()) o.name = o.tokenizer;
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "microllm_tokenizer_parity: %s\n", e.what());
    return 1;
  }
}
