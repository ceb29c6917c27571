// JSON given on the command line or in files, parsed into one clear error naming the
// operation and where the text came from (the commands' "one line on bad input").
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "microllm/core/error.h"

namespace microllm::apps {

// `text` parsed; "<where>: not valid JSON (<parser message>)" from `op` otherwise.
inline nlohmann::json parse_json(const std::string& text, const char* op,
                                 const std::string& where) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    MICROLLM_FAIL(op, where, ": not valid JSON (", e.what(), ")");
  }
}

// The file at `path` parsed, with the same errors (and "cannot read <path>").
inline nlohmann::json read_json_file(const std::string& path, const char* op) {
  std::ifstream in(path, std::ios::binary);
  MICROLLM_CHECK(in.good(), op, "cannot read ", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_json(text, op, path);
}

}  // namespace microllm::apps
