// safetensors header parsing and validation, from bytes in memory (a mapped file or a
// fuzzer's input). Every rule of docs/safetensors.md "What the reader rejects" is checked
// here, before any tensor is handed out; each failure names the file and the tensor.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "microllm/io/safetensors.h"
#include "safetensors_internal.h"

namespace microllm::io {
namespace {

using nlohmann::json;

struct DTypeEntry {
  std::string_view name;
  DType dtype;
};
constexpr std::array<DTypeEntry, 11> kDTypes{{
    {"F64", DType::F64},
    {"F32", DType::F32},
    {"F16", DType::F16},
    {"BF16", DType::BF16},
    {"F8_E4M3", DType::F8E4M3},
    {"F8_E5M2", DType::F8E5M2},
    {"I64", DType::I64},
    {"I32", DType::I32},
    {"I8", DType::I8},
    {"U8", DType::U8},
    {"BOOL", DType::Bool},
}};
// Defined by the format but without a microllm dtype: named as unsupported, not unknown.
constexpr std::array<std::string_view, 9> kUnsupported{
    {"I16", "U16", "U32", "U64", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"}};
constexpr std::string_view kSupportedList =
    "F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I8, U8, BOOL";

std::optional<DType> lookup_dtype(std::string_view name) {
  for (const DTypeEntry& e : kDTypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

std::string unknown_dtype_message(std::string_view name) {
  const bool defined =
      std::find(kUnsupported.begin(), kUnsupported.end(), name) != kUnsupported.end();
  return (defined ? "dtype '" + std::string(name) + "' is not supported by microllm"
                  : "unknown dtype '" + std::string(name) + "'") +
         " (supported: " + std::string(kSupportedList) + ")";
}

// Untrusted text quoted in messages: at most `limit` characters, control bytes escaped.
std::string quote(std::string_view text, size_t limit = 200) {
  std::string out;
  for (unsigned char c : text.substr(0, limit)) {
    if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

// "an object", "an array", "a string", "a number", "a boolean", "null".
std::string a_type(const json& value) {
  const std::string name = value.type_name();
  if (value.is_null()) return name;
  return (value.is_object() || value.is_array() ? "an " : "a ") + name;
}

uint64_t read_u64_le(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

class HeaderValidator {
 public:
  HeaderValidator(const std::string& source, uint64_t data_size)
      : source_(source), data_size_(data_size) {}

  SafetensorsHeader validate(const json& root) {
    if (!root.is_object()) fail("the header is " + a_type(root) + ", expected a JSON object");
    SafetensorsHeader header;
    for (const auto& [name, value] : root.items()) {
      if (name == "__metadata__")
        header.metadata = parse_metadata(value);
      else
        header.tensors.push_back(parse_entry(name, value));
    }
    check_coverage(header.tensors);
    header.data_size = data_size_;
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { safetensors_fail(source_, what); }
  [[noreturn]] void fail_tensor(const std::string& name, const std::string& what) const {
    fail("tensor '" + quote(name) + "': " + what);
  }

  std::map<std::string, std::string> parse_metadata(const json& value) const {
    if (!value.is_object())
      fail("__metadata__ is " + a_type(value) + ", expected an object of string values");
    std::map<std::string, std::string> metadata;
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string())
        fail("__metadata__ value of '" + quote(key) + "' is " + a_type(v) + ", expected a string");
      metadata.emplace(key, v.get<std::string>());
    }
    return metadata;
  }

  SafetensorsTensorInfo parse_entry(const std::string& name, const json& entry) const {
    if (name.empty()) fail("a tensor has an empty name");
    if (!entry.is_object())
      fail_tensor(name, "entry is " + a_type(entry) +
                            ", expected an object with dtype, shape and data_offsets");
    for (const auto& item : entry.items())
      if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets")
        fail_tensor(name, "unexpected key '" + quote(item.key()) +
                              "' (expected dtype, shape and data_offsets)");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(key)) fail_tensor(name, std::string("entry lacks '") + key + "'");

    SafetensorsTensorInfo info;
    info.name = name;
    const json& dtype = entry["dtype"];
    if (!dtype.is_string())
      fail_tensor(name, "dtype is " + a_type(dtype) + ", expected a string such as \"F32\"");
    const std::string dtype_text = dtype.get<std::string>();
    const std::optional<DType> parsed = lookup_dtype(dtype_text);
    if (!parsed) fail_tensor(name, unknown_dtype_message(quote(dtype_text)));
    info.dtype = *parsed;

    const json& shape = entry["shape"];
    if (!shape.is_array()) fail_tensor(name, "shape is " + a_type(shape) + ", expected an array");
    for (const json& d : shape) {
      if (d.is_number_integer() && !d.is_number_unsigned())
        fail_tensor(name, "negative dimension " + d.dump() + " in shape");
      if (!d.is_number_unsigned())
        fail_tensor(name, "shape holds " + a_type(d) +
                              (d.is_number() ? " " + d.dump() : std::string()) +
                              ", expected non-negative integers");
      const uint64_t value = d.get<uint64_t>();
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail_tensor(name, "dimension " + std::to_string(value) + " is too large");
      info.shape.push_back(static_cast<int64_t>(value));
    }

    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      fail_tensor(name, "data_offsets must be an array of two non-negative integers [begin, end]");
    info.begin = offsets[0].get<uint64_t>();
    info.end = offsets[1].get<uint64_t>();
    const std::string range =
        "[" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "]";
    if (info.begin > info.end)
      fail_tensor(name, "data_offsets " + range + " end before they begin");
    if (info.end > data_size_)
      fail_tensor(name, "data_offsets " + range + " run past the end of the " +
                            std::to_string(data_size_) + "-byte data section");

    // shape × element size must equal the byte range exactly.
    const uint64_t item = dtype_size(info.dtype);
    uint64_t numel = 1;
    for (int64_t d : info.shape) {
      if (d != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) /
                                static_cast<uint64_t>(d))
        fail_tensor(name, "shape " + shape_str(info.shape) + " has too many elements");
      numel *= static_cast<uint64_t>(d);
    }
    if (numel > std::numeric_limits<uint64_t>::max() / item || numel * item != info.nbytes())
      fail_tensor(
          name,
          "shape " + shape_str(info.shape) + " of " + dtype_text + " needs " +
              (numel > std::numeric_limits<uint64_t>::max() / item ? std::string("more than 2^64")
                                                                   : std::to_string(numel * item)) +
              " bytes but data_offsets " + range + " hold " + std::to_string(info.nbytes()));
    return info;
  }

  // Sorted by offset, the ranges must tile [0, data_size) exactly: no overlap, no hole, no
  // trailing bytes (Hugging Face's reader requires the same: "MetadataIncompleteBuffer").
  void check_coverage(std::vector<SafetensorsTensorInfo>& tensors) const {
    std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t cursor = 0;
    const SafetensorsTensorInfo* previous = nullptr;
    for (const SafetensorsTensorInfo& t : tensors) {
      if (t.begin < cursor)
        fail("tensors '" + quote(previous->name) + "' [" + std::to_string(previous->begin) + ", " +
             std::to_string(previous->end) + "] and '" + quote(t.name) + "' [" +
             std::to_string(t.begin) + ", " + std::to_string(t.end) + "] overlap");
      if (t.begin > cursor)
        fail("bytes [" + std::to_string(cursor) + ", " + std::to_string(t.begin) +
             ") of the data section belong to no tensor (a hole before '" + quote(t.name) + "')");
      cursor = t.end;
      if (t.end > t.begin) previous = &t;  // the tensor that ends at `cursor`
    }
    if (cursor != data_size_)
      fail("bytes [" + std::to_string(cursor) + ", " + std::to_string(data_size_) +
           ") at the end of the data section belong to no tensor");
  }

  const std::string& source_;
  uint64_t data_size_;
};

// Thrown out of nlohmann's parser by the callback below when nesting goes too deep.
struct TooDeep {};
constexpr int kMaxJsonDepth = 64;

// While nlohmann parses: finds the first key that repeats within one JSON object (at any
// depth), and stops at nesting deeper than kMaxJsonDepth — a header needs 3 levels, and
// a deeper one could only cost memory and time (nlohmann's DOM is built iteratively).
class DuplicateKeyFinder {
 public:
  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw TooDeep{};
    switch (event) {
      case json::parse_event_t::object_start:
        objects_.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!objects_.empty()) objects_.pop_back();
        break;
      case json::parse_event_t::key: {
        Object& top = objects_.back();
        top.last = parsed.get<std::string>();
        if (!top.keys.insert(top.last).second && !found)
          found = StrictJson::Duplicate{top.last, objects_.size(),
                                        objects_.size() > 1 ? objects_[0].last : ""};
        break;
      }
      default:
        break;
    }
    return true;
  }
  std::optional<StrictJson::Duplicate> found;

 private:
  struct Object {
    std::set<std::string> keys;
    std::string last;
  };
  std::vector<Object> objects_;
};

}  // namespace

StrictJson parse_json_strict(const char* begin, const char* end, const std::string& source,
                             const std::string& what) {
  DuplicateKeyFinder duplicates;
  StrictJson result;
  try {
    result.value = json::parse(begin, end, std::ref(duplicates));
  } catch (const TooDeep&) {
    safetensors_fail(
        source, "the " + what + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const json::exception& e) {
    std::string message = e.what();
    if (message.size() > 300) message = message.substr(0, 300) + "...";
    safetensors_fail(source, "the " + what + " is not valid JSON (" + message + ")");
  }
  result.duplicate = duplicates.found;
  return result;
}

void safetensors_fail(const std::string& source, const std::string& what) {
  MICROLLM_FAIL("safetensors", source, ": ", what);
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeEntry& e : kDTypes)
    if (e.dtype == dtype) return e.name;
  MICROLLM_FAIL("safetensors", "no safetensors dtype for ", dtype);
}

DType dtype_from_safetensors_name(std::string_view name) {
  const std::optional<DType> dtype = lookup_dtype(name);
  if (!dtype) MICROLLM_FAIL("safetensors", unknown_dtype_message(quote(name)));
  return *dtype;
}

SafetensorsHeader parse_safetensors(const void* file, size_t size, const std::string& source) {
  const auto* bytes = static_cast<const unsigned char*>(file);
  if (size < 8)
    safetensors_fail(source, "file is " + std::to_string(size) +
                                 " bytes, too short for the 8-byte header length");
  const uint64_t header_len = read_u64_le(bytes);
  if (header_len > kSafetensorsMaxHeaderBytes)
    safetensors_fail(source, "header length " + std::to_string(header_len) + " exceeds the " +
                                 std::to_string(kSafetensorsMaxHeaderBytes) +
                                 "-byte limit (not a safetensors file, or corrupt)");
  if (header_len > size - 8)
    safetensors_fail(source, "header length " + std::to_string(header_len) +
                                 " runs past the end of the " + std::to_string(size) +
                                 "-byte file (truncated?)");
  const auto* text = reinterpret_cast<const char*>(bytes + 8);
  // Hugging Face's reader will require this; it also rejects non-safetensors files early.
  if (header_len == 0 || text[0] != '{')
    safetensors_fail(source, "the header does not start with '{' (not a safetensors file?)");

  const StrictJson parsed = parse_json_strict(text, text + header_len, source, "header");
  if (const auto& dup = parsed.duplicate) {
    if (dup->depth == 1 && dup->key == "__metadata__")
      safetensors_fail(source, "__metadata__ appears twice");
    if (dup->depth == 1)
      safetensors_fail(source, "tensor name '" + quote(dup->key) + "' appears twice");
    safetensors_fail(source, "key '" + quote(dup->key) + "' appears twice in the entry of '" +
                                 quote(dup->owner) + "'");
  }
  SafetensorsHeader header = HeaderValidator(source, size - 8 - header_len).validate(parsed.value);
  header.data_offset = 8 + header_len;
  return header;
}

}  // namespace microllm::io
