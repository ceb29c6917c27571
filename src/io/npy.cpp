// NumPy .npy reader and writer: preamble, header dict parser, dtype table, raw elements.
// Format reference: numpy.lib.format. Every check names the file and what was found.
#include "microllm/io/npy.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>

namespace microllm::io {
namespace {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr std::string_view kMagic{"\x93NUMPY", 6};
constexpr size_t kHeaderAlign = 64;  // numpy pads the preamble + header to 64 bytes

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  MICROLLM_FAIL("npy", path, ": ", what);
}

struct DescrEntry {
  std::string_view descr;
  DType dtype;
};
// The first entry of each dtype is the one written; the others are accepted on read.
constexpr std::array<DescrEntry, 10> kDescrs{{
    {"<f8", DType::F64},
    {"<f4", DType::F32},
    {"<f2", DType::F16},
    {"<i8", DType::I64},
    {"<i4", DType::I32},
    {"|i1", DType::I8},
    {"<i1", DType::I8},
    {"|u1", DType::U8},
    {"<u1", DType::U8},
    {"|b1", DType::Bool},
}};

DType dtype_from_descr(const std::string& descr, const std::string& path) {
  for (const DescrEntry& e : kDescrs)
    if (e.descr == descr) return e.dtype;
  if (!descr.empty() && descr[0] == '>')
    fail(path, "big-endian dtype '" + descr + "' is not supported (only little-endian)");
  fail(path, "unsupported dtype '" + descr + "' (supported: <f8 <f4 <f2 <i8 <i4 |i1 |u1 |b1)");
}

std::string_view descr_of(DType dtype) {
  for (const DescrEntry& e : kDescrs)
    if (e.dtype == dtype) return e.descr;
  MICROLLM_FAIL("npy", "no NumPy dtype for ", dtype);
}

struct NpyHeader {
  DType dtype = DType::F32;
  bool fortran_order = false;
  Shape shape;
};

// Parses the header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// Exactly the three keys numpy writes must be present.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader header;
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (consume('}')) break;
      const std::string key = parse_string();
      expect(':');
      if (key == "descr") {
        check_unique(has_descr, key);
        header.dtype = dtype_from_descr(parse_string(), path_);
      } else if (key == "fortran_order") {
        check_unique(has_order, key);
        header.fortran_order = parse_bool();
      } else if (key == "shape") {
        check_unique(has_shape, key);
        header.shape = parse_shape();
      } else {
        error("unexpected key '" + key + "'");
      }
      skip_space();
      if (consume(',')) continue;
      expect('}');
      break;
    }
    skip_space();
    if (pos_ != text_.size()) error("unexpected text after the closing '}'");
    if (!has_descr || !has_order || !has_shape)
      error("missing key '" +
            std::string(!has_descr   ? "descr"
                        : !has_order ? "fortran_order"
                                     : "shape") +
            "'");
    return header;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail(path_, "bad header (" + what + ") at offset " + std::to_string(pos_) + " in \"" +
                    std::string(text_) + "\"");
  }
  void check_unique(bool& seen, const std::string& key) const {
    if (seen) error("key '" + key + "' repeats");
    seen = true;
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    skip_space();
    if (!consume(c)) error(std::string("expected '") + c + "'");
  }
  // A Python string literal in single or double quotes, without escapes.
  std::string parse_string() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      error("expected a string");
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) error("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }
  bool parse_bool() {
    skip_space();
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}})
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    error("expected True or False");
  }
  // A tuple of non-negative integers: (), (3,), (2, 3).
  Shape parse_shape() {
    Shape shape;
    expect('(');
    while (true) {
      skip_space();
      if (consume(')')) break;
      if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_])))
        error("expected a non-negative integer in the shape");
      int64_t value = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (value > (std::numeric_limits<int64_t>::max() - 9) / 10) error("dimension too large");
        value = value * 10 + (text_[pos_++] - '0');
      }
      shape.push_back(value);
      skip_space();
      if (consume(',')) continue;
      expect(')');
      break;
    }
    return shape;
  }

  std::string_view text_;
  const std::string& path_;
  size_t pos_ = 0;
};

// Element count of `shape`, or an error when it overflows.
int64_t checked_numel(const Shape& shape, const std::string& path) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / d)
      fail(path, "shape " + shape_str(shape) + " has too many elements");
    numel *= d;
  }
  return numel;
}

uint64_t read_le(const unsigned char* bytes, int count) {
  uint64_t value = 0;
  for (int i = count - 1; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

}  // namespace

Tensor load_npy(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not an npy file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot open file for reading");
  const std::streamoff end = in.tellg();
  if (end < 0) fail(path, "cannot determine the file size");
  const auto file_size = static_cast<uint64_t>(end);
  in.seekg(0);

  // Preamble: magic (6), version (2), header length (2 in 1.0, 4 in 2.0/3.0).
  std::array<unsigned char, 12> preamble{};
  if (file_size < 10)
    fail(path, "file is " + std::to_string(file_size) + " bytes, too short for an npy preamble");
  in.read(reinterpret_cast<char*>(preamble.data()), 8);
  if (std::memcmp(preamble.data(), kMagic.data(), kMagic.size()) != 0)
    fail(path, "not an npy file (magic string \\x93NUMPY missing)");
  const int major = preamble[6], minor = preamble[7];
  if ((major < 1 || major > 3) || minor != 0)
    fail(path, "unsupported npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  const int length_bytes = major == 1 ? 2 : 4;
  if (file_size < 8u + length_bytes) fail(path, "file ends inside the header length");
  in.read(reinterpret_cast<char*>(preamble.data() + 8), length_bytes);
  const uint64_t header_len = read_le(preamble.data() + 8, length_bytes);
  const uint64_t data_offset = 8u + length_bytes + header_len;
  if (data_offset > file_size)
    fail(path, "header length " + std::to_string(header_len) + " runs past the end of the " +
                   std::to_string(file_size) + "-byte file");

  std::string header_text(header_len, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_len));
  if (!in) fail(path, "read error in the header");
  const NpyHeader header = HeaderParser(header_text, path).parse();

  // The data must be exactly numel · itemsize bytes.
  const int64_t numel = checked_numel(header.shape, path);
  const uint64_t item = dtype_size(header.dtype);
  if (static_cast<uint64_t>(numel) > std::numeric_limits<uint64_t>::max() / item)
    fail(path, "shape " + shape_str(header.shape) + " is too large");
  const uint64_t needed = static_cast<uint64_t>(numel) * item;
  const uint64_t present = file_size - data_offset;
  if (present != needed)
    fail(path, std::string(present < needed ? "truncated: " : "trailing bytes: ") + "data is " +
                   std::to_string(present) + " bytes but shape " + shape_str(header.shape) +
                   " of " + std::string(descr_of(header.dtype)) + " needs " +
                   std::to_string(needed));

  // A Fortran-ordered (d0, ..., dn) array is the C-ordered (dn, ..., d0) array transposed.
  Shape stored = header.shape;
  if (header.fortran_order) std::reverse(stored.begin(), stored.end());
  Tensor t = Tensor::empty(stored, header.dtype);
  if (needed > 0) {
    in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(needed));
    if (!in) fail(path, "read error in the data");
  }
  if (header.dtype == DType::Bool) {
    // Any non-zero byte is true; keep bool storage to the values 0 and 1.
    auto* bytes = static_cast<unsigned char*>(t.raw_data());
    for (int64_t i = 0; i < numel; ++i) bytes[i] = bytes[i] != 0;
  }
  if (header.fortran_order && t.dim() > 1) {
    std::vector<int64_t> reversed(static_cast<size_t>(t.dim()));
    for (int64_t i = 0; i < t.dim(); ++i) reversed[i] = t.dim() - 1 - i;
    t = t.permute(reversed).contiguous();
  }
  return t;
}

void save_npy(const std::string& path, const Tensor& t) {
  MICROLLM_CHECK(t.defined(), "npy", path, ": cannot save an undefined tensor");
  Tensor dense = t.detach();
  if (!dense.is_cpu()) dense = dense.to(Device::cpu());
  if (dense.dtype() == DType::BF16 || dense.dtype() == DType::F8E4M3 ||
      dense.dtype() == DType::F8E5M2)
    dense = dense.to(DType::F32);  // not NumPy types: interchange as float32
  dense = dense.contiguous();

  // A Python tuple: (), (3,), (2, 3).
  std::string shape = "(";
  for (size_t i = 0; i < dense.shape().size(); ++i)
    shape += (i ? ", " : "") + std::to_string(dense.shape()[i]);
  shape += dense.shape().size() == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + std::string(descr_of(dense.dtype())) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so the data starts on a 64-byte boundary; '\n' ends the header.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((kHeaderAlign - unpadded % kHeaderAlign) % kHeaderAlign, ' ');
  header += '\n';
  MICROLLM_CHECK(header.size() <= 0xffff, "npy", path, ": header of ", header.size(),
                 " bytes does not fit format 1.0");

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot open file for writing");
  const unsigned char lengths[2] = {static_cast<unsigned char>(header.size() & 0xff),
                                    static_cast<unsigned char>(header.size() >> 8)};
  out.write(kMagic.data(), static_cast<std::streamsize>(kMagic.size()));
  out.put(1).put(0);
  out.write(reinterpret_cast<const char*>(lengths), 2);
  out << header;
  if (dense.numel() > 0)
    out.write(static_cast<const char*>(dense.raw_data()),
              static_cast<std::streamsize>(dense.nbytes()));
  out.close();
  if (!out) fail(path, "write failed");
}

}  // namespace microllm::io
